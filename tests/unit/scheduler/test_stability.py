"""Stability: once a scenario has converged, further full scheduling cycles change nothing.

Reclaim ping-pong and preemption loops are the most reported bug class of batch schedulers. For
every scenario file under ``tests/scenarios/`` this runs the file as ``kai simulate`` does, then
keeps cycling with all five actions (allocate, consolidation, reclaim, preempt,
stalegangeviction) and the update rules of "mode: rounds" (the scenario package's ``advance``):

1. warm-up: at most ``WARM_UP`` cycles until one of them binds, pipelines and evicts nothing
   (single-session files stop mid-way: an evicted job still has to come back, a pipelined one to
   bind); never reaching a quiet cycle is itself a failure (a loop);
2. then ``EXTRA_ROUNDS`` more cycles, each of which must bind, pipeline and evict nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.scenario import advance, load_scenario, run_scenario, to_snapshot
from kai.scenario.model import Scenario
from kai.scenario.rounds import State, read_result
from kai.scheduler.errors import IMPLEMENTED_ACTIONS
from kai.scheduler.result import SessionResult
from kai.scheduler.session import run_session

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
FILES = sorted(SCENARIOS.rglob("*.yaml"))
WARM_UP = 6
EXTRA_ROUNDS = 10


def _id(path: Path) -> str:
    return path.relative_to(SCENARIOS).with_suffix("").as_posix()


def _cycle(scenario: Scenario, state: State) -> tuple[SessionResult, State]:
    result = run_session(to_snapshot(scenario, state), IMPLEMENTED_ACTIONS)
    return result, advance(scenario, read_result(scenario, result))


def _changes(result: SessionResult) -> list[str]:
    return (
        [f"bind {b.task} on {b.node}" for b in result.binds]
        + [f"pipeline {p.task} on {p.node}" for p in result.pipelined]
        + [f"evict {e.task} ({e.action})" for e in result.evictions]
    )


def test_there_are_scenarios_of_every_action() -> None:
    actions = {_id(f).split("/")[0] for f in FILES}
    assert {"allocate", "reclaim", "preempt", "consolidation", "stalegangeviction"} <= actions


@pytest.mark.parametrize("path", FILES, ids=[_id(f) for f in FILES])
def test_no_change_after_convergence(path: Path) -> None:
    scenario = load_scenario(str(path))
    rounds = run_scenario(scenario, lambda snap, actions: run_session(snap, actions))
    last = rounds[-1]
    state = last.next if last.next is not None else advance(scenario, last.result)
    history: list[list[str]] = []
    for _ in range(WARM_UP):
        result, state = _cycle(scenario, state)
        changes = _changes(result)
        history.append(changes)
        if not changes:
            break
    else:
        pytest.fail(f"no quiet cycle within {WARM_UP} warm-up cycles: {history}")
    for extra in range(1, EXTRA_ROUNDS + 1):
        result, state = _cycle(scenario, state)
        changes = _changes(result)
        assert not changes, f"extra cycle {extra} after convergence changed things: {changes}"
