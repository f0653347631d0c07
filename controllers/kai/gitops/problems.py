"""What `kai validate` reports: one :class:`Problem` per finding, with its place in a file.

A problem names the rule that found it (the ids of ``gitops-format.md``), the file, the 1-based
line and column of the offending value, the object (``QueueTree/research``) and the field path
inside the object (``queues[0].children[1] (nlp) limit.gpu``). Everything in ``kai.gitops`` that
finds problems returns these; the commands only sort and print them.
"""

from __future__ import annotations

import functools
import re
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


# What a terminal or a CI log must never receive raw from a file, an object or a message: C0
# controls (ESC, CR, LF, BEL, ...), DEL, C1 controls (0x9b is a CSI to some terminals), the
# Unicode line and paragraph separators, the bidirectional overrides that reorder what is shown
# ("Trojan Source"), and lone surrogates (the bytes of a file name that is not UTF-8).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for a byte that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character, line break, bidirectional override and byte that
    is not UTF-8 written as a visible escape (``\\x1b``, ``\\n`` as ``\\x0a``, ``\\u2028``): one
    line that changes nothing on a terminal."""
    return text if _UNSAFE.search(text) is None else _UNSAFE.sub(_escaped, text)


def printable_file(name: str) -> str:
    """A file name for the start of a line: :func:`printable`, and ``./`` before a relative
    name that would start the line with ``:`` or ``#`` (or blank space), so that no file name
    can make a line a CI workflow command (``::error ...``, ``::add-mask::``, ``##[error]``)."""
    shown = printable(name)
    if shown[:1].isspace() or shown.lstrip()[:1] in (":", "#"):
        return "./" + shown
    return shown


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

    def location(self) -> str:
        """``FILE:LINE:COL``, the file name made safe for a terminal (:func:`printable_file`)."""
        return f"{printable_file(self.file)}:{self.line}:{self.column}"

    def text(self) -> str:
        """``FILE:LINE:COL: error: [rule] OBJECT FIELD-PATH: message`` (empty parts left out).

        Always one line without control characters, whatever the file, the object, the field
        path and the message hold (see :func:`printable`)."""
        subject = " ".join(printable(part) for part in (self.object, self.path) if part)
        message = printable(self.message)
        body = f"{subject}: {message}" if subject else message
        return f"{self.location()}: {self.severity}: [{self.rule}] {body}"

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
