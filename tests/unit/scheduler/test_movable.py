"""Consolidation moves only tasks that come back when evicted (``TaskSpec.movable``: the pod
has a controller). Live, a move is an eviction: a bare pod moved would be gone for good."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kai.scenario import load_scenario
from kai.scenario.convert import to_snapshot
from kai.scheduler.session import run_session
from kai.scheduler.snapshot import Snapshot

BASIC_MOVE = Path(__file__).parents[2] / "scenarios" / "consolidation" / "basic_move.yaml"


def _with_movable(snapshot: Snapshot, movable: bool) -> Snapshot:
    jobs = [
        dataclasses.replace(job, tasks=[dataclasses.replace(t, movable=movable) for t in job.tasks])
        for job in snapshot.jobs
    ]
    return dataclasses.replace(snapshot, jobs=jobs)


def test_a_task_without_a_controller_is_never_moved() -> None:
    scenario = load_scenario(str(BASIC_MOVE))
    snapshot = to_snapshot(scenario)
    moved = run_session(_with_movable(snapshot, True), scenario.actions)
    assert moved.moves, "the file's case needs a move"
    kept = run_session(_with_movable(snapshot, False), scenario.actions)
    assert kept.moves == [] and kept.evictions == []
    placed = {uid for uid, out in kept.tasks.items() if out.status.value != "Pending"}
    assert placed == {t.uid for j in snapshot.jobs for t in j.tasks if t.node is not None}


def test_the_live_snapshot_reads_the_controller() -> None:
    from kai.reconcilers.snapshot_builder import has_controller

    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    assert has_controller({"ownerReferences": [owner]})
    assert not has_controller({"ownerReferences": [{**owner, "controller": False}]})
    assert not has_controller({})
