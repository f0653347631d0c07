"""Fixtures for the GitOps tests: validate YAML text and look at the problems."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from kai.gitops.loader import load_text
from kai.gitops.problems import Problem
from kai.gitops.validate import validate

Check = Callable[..., list[Problem]]


def _check(text: str, name: str = "t.yaml", capacity: object = None) -> list[Problem]:
    return validate(load_text(textwrap.dedent(text), name), capacity).problems  # type: ignore[arg-type]


@pytest.fixture
def check() -> Check:
    """``check(yaml_text)`` -> sorted problems of that one file."""
    return _check


def brief(problems: list[Problem]) -> list[tuple[int, int, str, str]]:
    """(line, column, severity, rule) of each problem, for compact assertions."""
    return [(p.line, p.column, p.severity, p.rule) for p in problems]


@pytest.fixture
def short() -> Callable[[list[Problem]], list[tuple[int, int, str, str]]]:
    return brief
