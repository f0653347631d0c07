"""What `kai validate` reports: one :class:`Problem` per finding, with its place in a file.

A problem names the rule that found it (the ids of ``gitops-format.md``), the file, the 1-based
line and column of the offending value, the object (``QueueTree/research``) and the field path
inside the object (``queues[0].children[1] (nlp) limit.gpu``). Everything in ``kai.gitops`` that
finds problems returns these; the commands only sort and print them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]

# Every rule id, in the order of the contract's table. Tests check each one is exercised.
RULE_IDS: tuple[str, ...] = (
    "schema",
    "duplicate-key",
    "name",
    "parent-exists",
    "cycle",
    "values",
    "limit-below-quota",
    "children-quota-sum",
    "child-quota-over-parent-limit",
    "child-limit-over-parent-limit",
    "namespaces-on-leaf",
    "over-capacity",
    "yaml",
    "document",
    "io",
    # Extensions for the policy documents (see docs/gitops.md).
    "topology",
    "policy",
)


@dataclass(frozen=True, order=True)
class Source:
    """A place in a file: 1-based line and column."""

    file: str
    line: int
    column: int


@dataclass(frozen=True)
class Problem:
    """One finding. ``object`` and ``path`` are None for file-level problems."""

    file: str
    line: int
    column: int
    severity: Severity
    rule: str
    object: str | None
    path: str | None
    message: str

    @classmethod
    def at(
        cls,
        where: Source,
        rule: str,
        message: str,
        *,
        object: str | None = None,
        path: str | None = None,
        severity: Severity = "error",
    ) -> Problem:
        return cls(where.file, where.line, where.column, severity, rule, object, path, message)

    def sort_key(self) -> tuple[str, int, int, str, str, str]:
        return (self.file, self.line, self.column, self.rule, self.path or "", self.message)

    def text(self) -> str:
        """``FILE:LINE:COL: error: [rule] OBJECT FIELD-PATH: message`` (empty parts left out)."""
        subject = " ".join(part for part in (self.object, self.path) if part)
        body = f"{subject}: {self.message}" if subject else self.message
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: [{self.rule}] {body}"

    def as_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "rule": self.rule,
            "object": self.object,
            "path": self.path,
            "message": self.message,
        }


def sort_problems(problems: list[Problem]) -> list[Problem]:
    """Sorted by file, then line and column; duplicates (same text) dropped."""
    seen: set[Problem] = set()
    unique = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            unique.append(problem)
    return sorted(unique, key=Problem.sort_key)
