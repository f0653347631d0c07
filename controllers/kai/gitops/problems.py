"""What `kai validate` reports: one :class:`Problem` per finding, with its place in a file.

A problem names the rule that found it (the ids of ``gitops-format.md``), the file, the 1-based
line and column of the offending value, the object (``QueueTree/research``) and the field path
inside the object (``queues[0].children[1] (nlp) limit.gpu``). Everything in ``kai.gitops`` that
finds problems returns these; the commands only sort and print them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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


class Locator(Protocol):
    """What finds the line and column of a value (or of its key) by field path."""

    def position(self, path: tuple[Any, ...], of_key: bool) -> tuple[int, int]: ...


@functools.total_ordering
class Source:
    """A place in a file: 1-based line and column.

    Compared, hashed and shown as ``(file, line, column)``. A source made by :meth:`lazy` finds
    its line and column only when they are first read (a document loaded without a table of
    positions re-reads its file then), so places that no problem ever cites cost nothing."""

    __slots__ = ("_base", "_column", "_line", "_of_key", "_rel", "_where", "file")

    def __init__(self, file: str, line: int, column: int) -> None:
        self.file = file
        self._line = line
        self._column = column
        self._where: Locator | None = None
        self._base: tuple[Any, ...] = ()
        self._rel: tuple[Any, ...] = ()
        self._of_key = False

    @classmethod
    def lazy(
        cls, file: str, where: Locator, base: tuple[Any, ...], rel: tuple[Any, ...], of_key: bool
    ) -> Source:
        """The place of the value (or key) at ``base + rel`` that ``where`` finds when needed.

        The path comes in two parts so that the places of one queue share its path."""
        source = cls.__new__(cls)
        source.file = file
        source._line = source._column = 0
        source._where = where
        source._base = base
        source._rel = rel
        source._of_key = of_key
        return source

    def _resolve(self) -> None:
        where = self._where
        if where is not None:
            self._line, self._column = where.position((*self._base, *self._rel), self._of_key)
            self._where = None
            self._base = self._rel = ()

    @property
    def line(self) -> int:
        if self._where is not None:
            self._resolve()
        return self._line

    @property
    def column(self) -> int:
        if self._where is not None:
            self._resolve()
        return self._column

    def _key(self) -> tuple[str, int, int]:
        return (self.file, self.line, self.column)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Source):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Source):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Source(file={self.file!r}, line={self.line!r}, column={self.column!r})"


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
