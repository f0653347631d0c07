"""The docs describe the project as it is, not the history of its work items: no "issue 13" or
"(issue 4)" that a reader of the repository cannot look up."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+\b")


def test_no_doc_points_at_a_numbered_issue() -> None:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    problems = [
        f"{page.relative_to(ROOT)}:{number}: {found.group(0)!r}"
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for found in [ISSUE.search(line)]
        if found
    ]
    assert not problems, "say what the text means instead of citing an issue:\n" + "\n".join(
        problems
    )
