"""docs/scenario-format.md documents exactly the keys the scenario loader accepts.

The accepted keys are not listed here by hand: they are recorded from the loader itself, by
watching every ``Checker.mapping`` call (each names a mapping's required and optional keys) while
the loader reads the whole scenario suite. A second check makes sure every such call site in
``kai.scenario`` was reached, so a new mapping kind cannot hide from the recording. The page marks
each field table with ``<!-- fields: PATH -->``; its first column lists the keys.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from kai.scenario import field_checks, model, validate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scenario-format.md"
SCENARIOS = ROOT / "tests" / "scenarios"
PACKAGE = ROOT / "controllers" / "kai" / "scenario"
TOP = "(top level)"


def _shape(path: tuple[str | int, ...]) -> str:
    """``("jobs", 3, "tasks", 0, "request")`` -> ``jobs[].tasks[].request``; names of expected
    tasks and nodes (map keys, not fields) -> ``<name>``."""
    out = ""
    for i, part in enumerate(path):
        if isinstance(part, int):
            out += "[]"
        elif i == 2 and path[0] == "expected" and path[1] in ("tasks", "nodes"):
            out += ".<name>"
        else:
            out += f".{part}" if out else part
    return out or TOP


@pytest.fixture(scope="module")
def accepted() -> tuple[dict[str, set[str]], set[tuple[str, int]]]:
    """Mapping shape -> keys the loader accepts there, and the call sites that were reached."""
    keys: dict[str, set[str]] = {}
    sites: set[tuple[str, int]] = set()
    original = field_checks.Checker.mapping

    def recording(
        self: field_checks.Checker,
        value: Any,
        path: tuple[str | int, ...],
        required: Collection[str],
        optional: Collection[str] = (),
    ) -> dict[str, Any] | None:
        caller = sys._getframe(1)
        sites.add((Path(caller.f_code.co_filename).name, caller.f_lineno))
        keys.setdefault(_shape(path), set()).update(required, optional)
        return original(self, value, path, required, optional)

    mp = pytest.MonkeyPatch()
    mp.setattr(field_checks.Checker, "mapping", recording)
    try:
        files = sorted(SCENARIOS.rglob("*.yaml"))
        assert len(files) > 100, "the scenario suite is missing"
        for f in files:
            validate.load_scenario(str(f))
    finally:
        mp.undo()
    return keys, sites


def _documented() -> dict[str, list[str]]:
    """Field tables of the page: shape -> keys of the table's first column."""
    tables: dict[str, list[str]] = {}
    pending: list[str] = []
    current: list[str] | None = None
    for line in DOC.read_text().splitlines():
        marker = re.fullmatch(r"<!-- fields: (.+) -->", line.strip())
        if marker:
            pending.append(marker.group(1))
            current = None
            continue
        if line.startswith("|") and pending:
            current = []
            for shape in pending:
                assert shape not in tables, f"{DOC.name}: two field tables for {shape}"
                tables[shape] = current
            pending = []
        if line.startswith("|") and current is not None:
            cell = line.split("|")[1].strip()
            key = re.fullmatch(r"`([^`]+)`", cell)
            if key:
                current.append(key.group(1))
        elif not line.startswith("|"):
            current = None
    assert not pending, f"{DOC.name}: a fields marker without a table: {pending}"
    return tables


def test_every_mapping_call_site_was_reached(
    accepted: tuple[dict[str, set[str]], set[tuple[str, int]]],
) -> None:
    _, reached = accepted
    sites = {
        (f.name, number)
        for f in PACKAGE.glob("*.py")
        for number, line in enumerate(f.read_text().splitlines(), 1)
        if re.search(r"\bc\.mapping\($", line) or re.search(r"\bc\.mapping\(\S", line)
    }
    # a call split over lines reports the line of its first argument or of ``c.mapping(``
    unreached = {s for s in sites if s not in reached and (s[0], s[1] + 1) not in reached}
    assert sites, "no Checker.mapping call found in kai.scenario: update this test"
    assert not unreached, (
        f"no scenario in tests/scenarios reaches these mapping checks, so their keys are not "
        f"recorded: {sorted(unreached)}; add a scenario that uses them"
    )


def test_every_accepted_key_is_documented_and_nothing_more(
    accepted: tuple[dict[str, set[str]], set[tuple[str, int]]],
) -> None:
    keys, _ = accepted
    documented = _documented()
    problems = []
    for shape, names in sorted(keys.items()):
        if shape not in documented:
            problems.append(f"no field table for {shape} (keys: {', '.join(sorted(names))})")
            continue
        missing = sorted(names - set(documented[shape]))
        extra = sorted(set(documented[shape]) - names)
        if missing:
            problems.append(f"{shape}: accepted but not documented: {', '.join(missing)}")
        if extra:
            problems.append(f"{shape}: documented but rejected by the loader: {', '.join(extra)}")
    for shape in sorted(set(documented) - set(keys)):
        problems.append(f"a field table for {shape}, which the loader does not have")
    assert not problems, f"{DOC.relative_to(ROOT)} is out of step:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize(
    "values",
    [
        model.ACTIONS,
        model.MODES,
        model.STATUSES,
        model.PLACEMENTS,
        model.SHARING_PLACEMENTS,
        model.MIG_STRATEGIES,
    ],
    ids=["actions", "modes", "statuses", "placements", "sharing", "mig"],
)
def test_every_enumerated_value_is_documented(values: tuple[str, ...]) -> None:
    text = DOC.read_text()
    missing = [v for v in values if f"`{v}`" not in text]
    assert not missing, f"{DOC.name} does not mention {missing}"
