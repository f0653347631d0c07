"""The benchmark's synthetic cluster is a valid scenario file, and `kai simulate` on it decides
exactly what the core decides on the generator's own snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from generate_cluster import generate, to_snapshot
from kai.cli import main
from kai.scheduler.session import run_session


def test_generated_cluster_runs_through_kai_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = generate(24, seed=3)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    assert main(["simulate", str(path), "--output", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)["rounds"][0]["result"]["tasks"]
    direct = run_session(to_snapshot(scenario), ["allocate"]).tasks
    assert set(printed) == set(direct)
    for name, outcome in direct.items():
        assert printed[name]["status"] == outcome.status.value
        assert printed[name]["node"] == outcome.node
    placed = sum(1 for t in printed.values() if t["status"] in ("Binding", "Pipelined"))
    assert placed > 0


def test_generator_is_deterministic() -> None:
    assert generate(10, seed=5) == generate(10, seed=5)
    assert generate(10, seed=5) != generate(10, seed=6)
