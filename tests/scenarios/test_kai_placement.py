"""Placement-policy regression test: the informational ``kaiNode`` / ``kaiGpuGroups`` expectations.

The scenario contract calls these keys **informational**: they record which node (and which GPU
device) KAI Scheduler picks where other choices would also be valid, following its placement
policy (binpack/spread, gpupack/gpuspread, resourcetype, topology domain packing) or a tie-break.
``kai simulate --check`` never compares them, and a scheduler that differs there is not wrong.

This test compares them anyway, separately from the ``--check`` tests in ``test_scenarios.py``,
so that a change of kai's placement policy shows up as a failure here instead of going unnoticed.
A failure is not a correctness bug by itself: decide whether the policy change is intended, and
if it is, update the scenario's ``kai*`` keys (they must still describe what KAI would choose).

What is compared, in every state ``--check`` compares (``single-session``: the round's result;
``rounds``: the updated list after ``untilMatch`` and each later round's result):

- ``kaiNode``: equal to the task's node.
- ``kaiGpuGroups``: an id equal to one of the scenario's input ``gpuGroups`` ids means "that
  existing device" and must match exactly; any other id is a fresh label chosen by whoever wrote
  the file, so those are compared up to a renaming that is consistent within one node of one state
  (the same expected label always maps to the same simulator id, distinct labels to distinct ids,
  and a fresh label never maps onto an input id).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from kai.scenario import load_scenario, run_scenario
from kai.scenario.comparison import checked_states
from kai.scenario.convert import TaskState
from kai.scenario.model import Scenario
from kai.scheduler.session import run_session

HERE = Path(__file__).parent


def _id(path: Path) -> str:
    return path.relative_to(HERE).with_suffix("").as_posix()


def _has_kai_keys(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "kaiNode" in text or "kaiGpuGroups" in text


FILES = sorted(f for f in HERE.rglob("*.yaml") if _has_kai_keys(f))


def test_there_are_placement_expectations() -> None:
    assert len(FILES) >= 10


def _node_of(group: str) -> str:
    return group.rsplit("/", 1)[0]


def placement_mismatches(
    scenario: Scenario, state: Mapping[str, TaskState], where: str
) -> list[str]:
    """Every difference between the ``kai*`` expectations and one state (empty when they agree)."""
    assert scenario.expected is not None
    input_ids = {group for task in scenario.tasks() for group in task.gpu_groups}
    out: list[str] = []
    # per task: (fresh expected labels, simulator ids left once the fixed ids are matched)
    pending: list[tuple[str, list[str], list[str]]] = []
    for name, want in scenario.expected.tasks.items():
        got = state[name]
        if want.kai_node is not None and got.node != want.kai_node:
            out.append(f"{where}: task {name}: kaiNode {want.kai_node}, got {got.node}")
        if want.kai_gpu_groups is None:
            continue
        expected_groups = list(want.kai_gpu_groups)
        remaining = list(got.gpu_groups)
        fresh: list[str] = []
        for group in expected_groups:
            if group not in input_ids:
                fresh.append(group)
            elif group in remaining:
                remaining.remove(group)
            else:
                remaining = []
                fresh = ["<existing device missing>"]
                break
        if len(fresh) != len(remaining) or any(g in input_ids for g in remaining):
            out.append(
                f"{where}: task {name}: kaiGpuGroups {expected_groups}, got {list(got.gpu_groups)}"
            )
            continue
        pending.append((name, fresh, remaining))
    if pending and _renaming(pending, {}) is None:
        detail = "; ".join(f"{name}: {fresh} vs {ids}" for name, fresh, ids in pending)
        out.append(f"{where}: no consistent renaming of the fresh kaiGpuGroups labels: {detail}")
    return out


def _renaming(
    pending: list[tuple[str, list[str], list[str]]], mapping: dict[str, str]
) -> dict[str, str] | None:
    """An injective map from fresh labels to simulator ids on the same node under which every
    task's fresh labels become exactly its remaining ids (small backtracking search)."""
    for _name, fresh, ids in pending:
        unmapped = [label for label in fresh if label not in mapping]
        if unmapped:
            label = unmapped[0]
            used = set(mapping.values())
            for candidate in sorted(set(ids)):
                if candidate in used or _node_of(candidate) != _node_of(label):
                    continue
                found = _renaming(pending, {**mapping, label: candidate})
                if found is not None:
                    return found
            return None
        if sorted(mapping[label] for label in fresh) != sorted(ids):
            return None
    return mapping


@pytest.mark.parametrize("path", FILES, ids=[_id(f) for f in FILES])
def test_kai_placement_matches(path: Path) -> None:
    scenario = load_scenario(str(path), require_expected=True)
    rounds = run_scenario(scenario, run_session)
    problems: list[str] = []
    for state in checked_states(scenario, rounds):
        problems += placement_mismatches(
            scenario, state.tasks, f"round {state.round} {state.stage}"
        )
    assert not problems, "placement policy differs from the kai* keys:\n" + "\n".join(problems)


def test_renaming_is_consistent_and_injective() -> None:
    same = [("a", ["n0/x"], ["n0/5"]), ("b", ["n0/x"], ["n0/5"])]
    assert _renaming(same, {}) == {"n0/x": "n0/5"}
    split = [("a", ["n0/x"], ["n0/5"]), ("b", ["n0/x"], ["n0/6"])]  # one label, two devices
    assert _renaming(split, {}) is None
    merged = [("a", ["n0/x"], ["n0/5"]), ("b", ["n0/y"], ["n0/5"])]  # two labels, one device
    assert _renaming(merged, {}) is None
    other_node = [("a", ["n1/x"], ["n0/5"])]
    assert _renaming(other_node, {}) is None
    multi = [("a", ["n0/x", "n0/y"], ["n0/7", "n0/8"]), ("b", ["n0/y"], ["n0/8"])]
    assert _renaming(multi, {}) == {"n0/x": "n0/7", "n0/y": "n0/8"}
