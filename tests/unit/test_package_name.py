"""The distribution's name is ours: ``kai`` on the public package index is an unrelated project,
so the project is ``kai-gitops-scheduler`` (the command and the import package stay ``kai``),
and nothing a user reads or runs says ``pip install kai``."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
NAME = "kai-gitops-scheduler"
# `pip install kai`, `pip install 'kai[local]'`, `pip3 install -U kai==0.1`, `pip download kai`...
PIP = re.compile(r"\bpip3?\s+(?:install|download)\b(?P<args>[^\n`]*)")


def _project() -> dict[str, object]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(project, dict)
    return project


def test_the_distribution_is_not_named_kai() -> None:
    project = _project()
    assert project["name"] == NAME, (
        f"pyproject.toml's name is {project['name']!r}: `kai` on PyPI is someone else's project"
    )
    assert project["scripts"] == {"kai": "kai.cli:main"}  # type: ignore[comparison-overlap]


def test_the_extras_refer_to_the_distribution_itself() -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    own = [
        Requirement(r)
        for reqs in extras.values()
        for r in reqs
        if r.split("[")[0].strip()
        in (
            "kai",
            NAME,
        )
    ]
    assert own, "the dev extra pulls in the other extras through the distribution itself"
    assert {canonicalize_name(r.name) for r in own} == {NAME}


def _installs_kai(args: str) -> list[str]:
    """The package arguments of one pip command line that name the distribution ``kai``."""
    try:
        words = shlex.split(args, comments=True)
    except ValueError:  # an unbalanced quote in prose: split on blanks
        words = args.split()
    bad = []
    for word in words:
        word = word.strip("'\"(),;")
        if word.startswith("-"):
            continue
        name = re.split(r"[\[=<>!~ ]", word, maxsplit=1)[0]
        if name.lower() == "kai":
            bad.append(word)
    return bad


def _user_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "Dockerfile"]
    for folder, patterns in (
        ("docs", ("*.md",)),
        ("examples", ("*.yaml", "*.yml", "*.md", "*.py", "*.sh")),
        ("charts", ("*.txt", "*.yaml", "*.md")),
        ("controllers", ("*.py",)),
        (".ci", ("*",)),
    ):
        for pattern in patterns:
            files += [p for p in (ROOT / folder).rglob(pattern) if p.is_file()]
    return sorted(set(files))


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("pip install kai", ["kai"]),
        ("run: pip install 'kai[local]'", ["kai[local]"]),
        ("pip3 install -U kai==0.1.0", ["kai==0.1.0"]),
        ("`pip download --no-deps kai`", ["kai"]),
        ("pip install -c constraints.txt '.[dev]'", []),
        ("pip install kai-gitops-scheduler", []),
        ("pip install 'kai-gitops-scheduler[plot]'", []),
        ("pip install -c .kai/constraints.txt ./.kai", []),
    ],
)
def test_the_check_itself(line: str, bad: list[str]) -> None:
    found = [w for m in PIP.finditer(line) for w in _installs_kai(m.group("args"))]
    assert found == bad


def test_no_doc_example_or_message_says_pip_install_kai() -> None:
    offenders = []
    for path in _user_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in PIP.finditer(line):
                if _installs_kai(match.group("args")):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "installs the unrelated PyPI project `kai`:\n" + "\n".join(offenders)
