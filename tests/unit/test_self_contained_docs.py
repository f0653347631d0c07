"""What a user reads stands alone: README, CONTRIBUTING, docs/ and the package sources (docstrings,
help texts, error messages) never send the reader outside the repository, and every file they
point to exists.

Scanned: ``README.md``, ``CONTRIBUTING.md``, ``docs/**/*.md``, ``controllers/**/*.py``. Checked:

- no reference to the material beside the checkout (a ``shared/`` directory next to the
  repository), to the private notes it holds (``KAI-FACTS``), or to their numbered sections
  (``§4.6``): the fact itself belongs in our words, or a link to our own doc;
- every relative Markdown link ``[text](path)`` resolves to a file or directory of the repository;
- every ``docs/....md`` path named in the sources or the docs exists, and so does every
  repository path quoted in the docs (`` `tests/unit/...` ``, `` `controllers/...` ``, ...).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = [
    (
        re.compile(r"\.\./shared\b|/work/shared\b|\bshared/(?:real-k8s|kai-reference|\w+\.md)"),
        "points to material outside the repository",
    ),
    (re.compile(r"KAI-FACTS"), "cites private notes that are not part of the repository"),
    (re.compile(r"§\s?\d"), "cites a numbered section of a document that is not in the repository"),
]
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOC_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)\b")
QUOTED_PATH = re.compile(
    r"`((?:tests|controllers|bench|examples|docs|schemas|manifests|\.ci)/[^`\s*{}<>]*)`"
)


def _read_by_user() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "controllers").rglob("*.py"))
    return [f for f in files if f.is_file()]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_scan_covers_the_user_facing_files() -> None:
    names = {_rel(f) for f in _read_by_user()}
    assert {"README.md", "CONTRIBUTING.md", "docs/scenario-format.md"} <= names
    assert any(n.startswith("controllers/kai/") for n in names)
    assert any(n.startswith("controllers/kube_emulator/") for n in names)


def test_nothing_points_outside_the_repository() -> None:
    problems = []
    for f in _read_by_user():
        for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, why in FORBIDDEN:
                found = pattern.search(line)
                if found:
                    problems.append(f"{_rel(f)}:{number}: {found.group(0)!r} {why}")
    assert not problems, "\n".join(problems)


def test_relative_markdown_links_resolve() -> None:
    problems = []
    for f in _read_by_user():
        if f.suffix != ".md":
            continue
        text = f.read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor on the same page
            path = target.split("#", 1)[0]
            resolved = (f.parent / path).resolve()
            if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
                number = text.count("\n", 0, match.start()) + 1
                problems.append(f"{_rel(f)}:{number}: link to {target!r}: no such file here")
    assert not problems, "\n".join(problems)


def test_named_doc_paths_exist() -> None:
    problems = []
    for f in _read_by_user():
        for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for named in sorted({m.group(1) for m in DOC_PATH.finditer(line)}):
                if not (ROOT / named).is_file():
                    problems.append(f"{_rel(f)}:{number}: names {named}, which is missing")
    assert not problems, "\n".join(problems)


def test_paths_quoted_in_the_docs_exist() -> None:
    problems = []
    for f in _read_by_user():
        if f.suffix != ".md":
            continue
        for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for match in QUOTED_PATH.finditer(line):
                path = match.group(1).split("::", 1)[0].rstrip("/")
                if not (ROOT / path).exists():
                    problems.append(f"{_rel(f)}:{number}: `{match.group(1)}` does not exist")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "caught"),
    [
        ("see ../shared/DESIGN.md", True),
        ("Semantics: KAI-FACTS §4.4", True),
        ("(§3.8 rules)", True),
        ("the shared GPU device", False),
        ("KAI's fair-share division", False),
    ],
)
def test_the_patterns_catch_what_they_should(text: str, caught: bool) -> None:
    assert any(p.search(text) for p, _ in FORBIDDEN) is caught
