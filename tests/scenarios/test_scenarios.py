"""Every scenario file under tests/scenarios/, run as ``kai simulate --check`` runs it.

Each file goes through :func:`kai.commands.simulate.execute` in-process (the function behind the
command, for speed); a few files are also run as real ``kai simulate`` processes to cover the CLI
plumbing. A file that lists an action the core does not implement yet is skipped, with the action
in the reason (and counted in the terminal summary): never passed silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kai.commands.simulate import execute
from kai.scenario import load_scenario
from kai.scheduler.errors import IMPLEMENTED_ACTIONS

from .conftest import UNSUPPORTED_PREFIX

HERE = Path(__file__).parent
FILES = sorted(HERE.rglob("*.yaml"))


def _id(path: Path) -> str:
    return path.relative_to(HERE).with_suffix("").as_posix()


def test_there_are_scenarios() -> None:
    assert len([f for f in FILES if _id(f).startswith("allocate/")]) >= 60


@pytest.mark.parametrize("path", FILES, ids=[_id(f) for f in FILES])
def test_scenario(path: Path) -> None:
    outcome = execute(str(path), output="text", check=True)
    if outcome.code == 2 and outcome.unsupported_action is not None:
        action = outcome.unsupported_action
        assert action in load_scenario(str(path)).actions, outcome.stderr
        assert action not in IMPLEMENTED_ACTIONS, outcome.stderr
        pytest.skip(f"{UNSUPPORTED_PREFIX}{action} (yet)")
    assert outcome.code == 0, f"exit {outcome.code}\n{outcome.stdout}{outcome.stderr}"


@pytest.mark.parametrize("path", FILES, ids=[_id(f) for f in FILES])
def test_scenario_file_conventions(path: Path) -> None:
    scenario = load_scenario(str(path), require_expected=True)
    assert scenario.id == _id(path), "id must be <action>/<file name without .yaml>"
    assert scenario.source and scenario.notes, (
        "say where the scenario comes from and what it checks"
    )


def _kai() -> list[str]:
    script = Path(sys.executable).parent / "kai"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kai.cli"]


SUBPROCESS_FILES = [
    f for f in FILES if _id(f) in ("allocate/basic_one_gpu", "allocate/cycle_gang_stable")
]


@pytest.mark.parametrize("path", SUBPROCESS_FILES, ids=[_id(f) for f in SUBPROCESS_FILES])
def test_real_kai_simulate_process(path: Path) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run(
        [*_kai(), "simulate", str(path), "--output", "json", "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    in_process = execute(str(path), output="json", check=True)
    if in_process.unsupported_action is not None:
        assert run.returncode == 2 and run.stdout == ""
        pytest.skip(f"{UNSUPPORTED_PREFIX}{in_process.unsupported_action} (yet)")
    assert run.returncode == in_process.code == 0, run.stderr
    assert run.stdout == in_process.stdout  # byte-identical, one JSON object
    document = json.loads(run.stdout)
    assert document["id"] == _id(path)
    text = subprocess.run(
        [*_kai(), "simulate", str(path), "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert text.returncode == 0 and text.stdout.endswith("CHECK PASS\n"), text.stdout + text.stderr
