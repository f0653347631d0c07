"""The core's decisions on every scenario file and on the small benchmark clusters equal the
recorded digests (tests/digests.json, written by ``bench/digests.py --write``).

A refactor of the core must leave them unchanged; a deliberate change of behaviour re-records them
in the same commit and says why (``bench/digests.py --check`` names each digest that moved)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _digests_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "kai_bench_digests", ROOT / "bench" / "digests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_decisions_match_the_recorded_digests() -> None:
    digests = _digests_module()
    recorded = json.loads((ROOT / "tests" / "digests.json").read_text())
    found = digests.compute(large=False)
    assert len(found) > 290
    assert digests.differences(recorded, found) == []


def test_a_changed_decision_is_named() -> None:
    digests = _digests_module()
    recorded = {"x": {"decisions": "a", "reasons": "r", "counts": "1b/0p/0e"}}
    found = {"x": {"decisions": "b", "reasons": "r", "counts": "2b/0p/0e"}}
    assert digests.differences(recorded, found) == ["x: decisions changed (1b/0p/0e -> 2b/0p/0e)"]
