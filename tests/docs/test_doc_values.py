"""docs/install.md's table of chart values says the defaults values.yaml really has: each row
whose first cell names full value paths (`binder.workers`, `podgrouper.workers`) and whose
second cell gives as many defaults is compared with charts/kai-scheduler/values.yaml."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"`([^`]*)`")
MISSING = object()


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _rows() -> list[tuple[int, list[str], list[str]]]:
    lines = (ROOT / "docs" / "install.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| value | default |"))
    rows = []
    for number, line in enumerate(lines[start + 2 :], start + 3):
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows.append((number, CODE.findall(cells[0]), CODE.findall(cells[1])))
    return rows


def test_documented_defaults_are_the_charts() -> None:
    values = yaml.safe_load((ROOT / "charts" / "kai-scheduler" / "values.yaml").read_text())
    checked, problems = 0, []
    for number, keys, defaults in _rows():
        found = [_lookup(values, k) for k in keys]
        if not keys or MISSING in found or len(defaults) != len(keys):
            continue
        for key, have, written in zip(keys, found, defaults, strict=True):
            want = yaml.safe_load(written) if written else written
            if isinstance(have, list | dict) and not have and want in ([], {}, None):
                continue
            if have != want and str(have) != str(want):
                problems.append(
                    f"docs/install.md:{number}: {key} is {have!r}, the doc says {written}"
                )
            checked += 1
    assert checked >= 10, f"only {checked} documented defaults found: the table's shape changed?"
    assert not problems, "\n".join(problems)
