"""A command synopsis in the docs (a code block starting ``kai COMMAND [...]``) names only flags
the command has, with the defaults it really has: a renamed or dropped flag, or a changed
default (``[--workers 64]``), fails here instead of misleading a reader."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kai import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SYNOPSIS = re.compile(r"^kai ([a-z-]+) ")
# `[--flag VALUE]` where VALUE is a concrete default (a number, or a word that is not a
# metavariable such as FILE, NS, PORT)
FLAG_DEFAULT = re.compile(r"\[(--[a-z0-9-]+) ([a-z0-9.][\w./-]*)\]")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def _synopses() -> list[tuple[str, str, str]]:
    """(where, command, text) of every synopsis block."""
    out = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[:-1]):
            if line.strip() != "```" or not SYNOPSIS.match(lines[i + 1]):
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            where = f"{page.relative_to(ROOT)}:{i + 2}"
            command = SYNOPSIS.match(lines[i + 1]).group(1)  # type: ignore[union-attr]
            out.append((where, command, "\n".join(lines[i + 1 : end])))
    return out


ALL = _synopses()


def test_the_synopses_are_found() -> None:
    assert {"validate", "render", "controller", "webhook"} <= {c for _, c, _ in ALL}


@pytest.mark.parametrize(("where", "command", "text"), ALL, ids=[w for w, _, _ in ALL])
def test_synopsis_matches_the_parser(where: str, command: str, text: str) -> None:
    assert command in cli.COMMANDS, f"{where}: there is no `kai {command}`"
    parser = cli._subcommand(cli.build_parser(cli.COMMANDS, command), command)
    actions = {flag: a for a in parser._actions for flag in a.option_strings}
    problems = [
        f"{where}: kai {command} has no {flag}"
        for flag in FLAG.findall(text)
        if flag not in actions
    ]
    for flag, written in FLAG_DEFAULT.findall(text):
        action = actions.get(flag)
        if action is None or isinstance(action, argparse._StoreTrueAction) or written.isupper():
            continue
        if str(action.default) != written:
            problems.append(
                f"{where}: {flag} defaults to {action.default!r}, the doc says {written}"
            )
    assert not problems, "\n".join(problems)
