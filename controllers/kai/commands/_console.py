"""Colour for people at a terminal: problems (error red, warning yellow, FILE:LINE bold) and table
headers.

``--color auto`` (the default) colours a stream only when it is a terminal, ``NO_COLOR`` is unset
or empty (https://no-color.org) and ``TERM`` is not ``dumb``; CI logs and pipes stay plain.
``--color always`` colours even into a pipe (``| less -R``), ``--color never`` never does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, TextIO

_RESET = "\x1b[0m"
BOLD, DIM, RED, GREEN, YELLOW = "1", "2", "31", "32", "33"


def colour_wanted(stream: TextIO, mode: str = "auto") -> bool:
    """Whether to colour what goes to ``stream`` under ``--color mode``."""
    if mode == "never":
        return False
    if mode == "always":
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed or not a real stream
        return False


class ProblemLike(Protocol):
    """What :meth:`Style.problem` reads of a problem (``kai.gitops.problems.Problem``)."""

    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def column(self) -> int: ...
    @property
    def severity(self) -> str: ...
    def text(self) -> str: ...
    def location(self) -> str: ...


class Style:
    """Paints text when ``enabled``; returns it unchanged otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, *codes: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}{_RESET}"

    def bold(self, text: str) -> str:
        return self.paint(text, BOLD)

    def severity(self, text: str, severity: str) -> str:
        """``text`` in the colour of ``severity``: error red, warning yellow, ok green."""
        codes = {"error": (BOLD, RED), "warning": (YELLOW,), "ok": (GREEN,)}.get(severity, ())
        return self.paint(text, *codes) if codes else text

    def problem(self, problem: ProblemLike) -> str:
        """``problem.text()`` with ``FILE:LINE:COL`` bold and its severity coloured."""
        text = problem.text()
        location = problem.location()
        marker = f": {problem.severity}:"
        if not self.enabled or not text.startswith(location + marker):
            return text
        rest = text[len(location) + len(marker) :]
        return f"{self.bold(location)}: {self.severity(problem.severity, problem.severity)}:{rest}"


def style_for(stream: TextIO, mode: str = "auto") -> Style:
    return Style(colour_wanted(stream, mode))


def table(header: Sequence[str], rows: Sequence[Sequence[str]], style: Style) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, the header bold."""
    widths = [len(cell) for cell in header]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [style.bold(line(header)), *(line(row) for row in rows)]
