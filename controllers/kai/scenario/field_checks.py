"""Type and range checks on plain data, collecting every problem with its field path.

Each check returns the value when it is acceptable and ``None`` otherwise (after recording a
:class:`FieldProblem`), so a validator can keep going and report all problems of a file at once.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any

from kai.scenario.source import FieldProblem, Path


def describe(value: Any) -> str:
    """A short, human rendering of a wrong value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return repr(text)
    return str(value)


def is_number(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return True
    if kind is float:
        return math.isfinite(value)
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


class Checker:
    """Collects problems; each method checks one value at one path."""

    def __init__(self) -> None:
        self.problems: list[FieldProblem] = []

    def fail(self, path: Path, message: str, *, at_key: bool = False) -> None:
        self.problems.append(FieldProblem(path, message, at_key=at_key))

    def fail_missing(self, path: Path, key: str, message: str = "required key is missing") -> None:
        """A required key is absent: reported at the mapping that lacks it."""
        self.problems.append(FieldProblem((*path, key), message, locate=path))

    def mapping(
        self,
        value: Any,
        path: Path,
        required: Collection[str],
        optional: Collection[str] = (),
    ) -> dict[str, Any] | None:
        """A mapping with exactly the given keys (every required one, no unknown one)."""
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping, got {describe(value)}")
            return None
        for key in value:
            if key not in required and key not in optional:
                self.fail((*path, str(key)), _unknown_key(key, [*required, *optional]), at_key=True)
        for key in required:
            if key not in value:
                self.fail_missing(path, key)
        return value

    def sequence(self, value: Any, path: Path, *, non_empty: bool = False) -> list[Any] | None:
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {describe(value)}")
            return None
        if non_empty and not value:
            self.fail(path, "must be a non-empty list")
            return None
        return value

    def string(self, value: Any, path: Path) -> str | None:
        """A non-empty string."""
        if not isinstance(value, str) or not value:
            self.fail(path, f"must be a non-empty string, got {describe(value)}")
            return None
        return value

    def text(self, value: Any, path: Path) -> str | None:
        """Any string (free-form, may be empty)."""
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {describe(value)}")
            return None
        return value

    def optional_name(self, value: Any, path: Path) -> tuple[bool, str | None]:
        """A name or null (e.g. a parent); returns (acceptable, value)."""
        if value is None:
            return True, None
        name = self.string(value, path)
        return name is not None, name

    def boolean(self, value: Any, path: Path) -> bool | None:
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {describe(value)}")
            return None
        return value

    def choice(self, value: Any, path: Path, allowed: Iterable[str]) -> str | None:
        options = tuple(allowed)
        if not isinstance(value, str) or value not in options:
            self.fail(path, f"must be one of {', '.join(options)}, got {describe(value)}")
            return None
        return value

    def integer(self, value: Any, path: Path, minimum: int | None = None) -> int | None:
        if not is_integer(value) or (minimum is not None and value < minimum):
            wanted = "an integer" if minimum is None else f"an integer >= {minimum}"
            self.fail(path, f"must be {wanted}, got {describe(value)}")
            return None
        return int(value)

    def number(self, value: Any, path: Path, *, minus_one: bool = False) -> float | None:
        """A number >= 0 (or exactly -1 when ``minus_one``: unlimited)."""
        if is_number(value) and (value >= 0 or (minus_one and value == -1)):
            return value  # type: ignore[no-any-return]
        wanted = "a number >= 0 or -1" if minus_one else "a number >= 0"
        self.fail(path, f"must be {wanted}, got {describe(value)}")
        return None

    def any_number(self, value: Any, path: Path) -> float | None:
        if not is_number(value):
            self.fail(path, f"must be a number, got {describe(value)}")
            return None
        return value  # type: ignore[no-any-return]

    def string_map(self, value: Any, path: Path) -> dict[str, str] | None:
        """A mapping of strings to strings (labels)."""
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping of strings to strings, got {describe(value)}")
            return None
        good = True
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                self.fail((*path, str(key)), "a key must be a non-empty string", at_key=True)
                good = False
            elif not isinstance(item, str):
                self.fail((*path, key), f"must be a string, got {describe(item)}")
                good = False
        return value if good else None

    def string_list(self, value: Any, path: Path, *, non_empty: bool = False) -> list[str] | None:
        items = self.sequence(value, path, non_empty=non_empty)
        if items is None:
            return None
        good = all([self.string(item, (*path, i)) is not None for i, item in enumerate(items)])
        return items if good else None

    def count_map(self, value: Any, path: Path, minimum: int) -> tuple[tuple[str, int], ...] | None:
        """A MIG profile map (profile name -> instance count >= ``minimum``)."""
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping of MIG profile to count, got {describe(value)}")
            return None
        out: list[tuple[str, int]] = []
        good = True
        for key, count in value.items():
            if not isinstance(key, str) or not key:
                self.fail(
                    (*path, str(key)), "a MIG profile must be a non-empty string", at_key=True
                )
                good = False
                continue
            checked = self.integer(count, (*path, key), minimum)
            if checked is None:
                good = False
            else:
                out.append((key, checked))
        return tuple(out) if good else None


def _unknown_key(key: Any, known: list[str]) -> str:
    import difflib

    message = f"unknown key {describe(key) if not isinstance(key, str) else repr(key)}"
    if isinstance(key, str):
        close = difflib.get_close_matches(key, known, n=1)
        if close:
            return f"{message}; did you mean {close[0]!r}?"
    allowed = ", ".join(sorted(known))
    return f"{message}; allowed keys: {allowed}"
