"""What the snapshot builder reads from the cluster that the core needs: a running job's start
without the ``last-start-timestamp`` annotation (min runtime switched on after it started)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "insight"))

from situations import node, queue, running_job, target

from kai.reconcilers.incremental_snapshot import IncrementalSnapshot, dict_source
from kai.reconcilers.snapshot_builder import SnapshotBuilder, parse_time

T_BOUND = "2026-12-01T11:00:00Z"
T_STARTED = "2026-12-01T11:00:07Z"
T_EARLY = "2026-12-01T09:00:00Z"


def _objects(pods_status: list[dict[str, Any]], annotation: str | None = None) -> dict[str, Any]:
    run = running_job("run", "team", [("n0", 2), ("n1", 2)])
    if annotation:
        run[0]["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": annotation}
    for pod, status in zip(run[1:], pods_status, strict=True):
        pod["status"].update(status)
    return {
        "nodes": [node("n0", 0), node("n1", 1)],
        "queues": [queue("team")],
        "podgroups": [run[0], target("team", 1)[0]],
        "pods": [*run[1:], target("team", 1)[1]],
    }


def _starts(objects: dict[str, Any]) -> dict[str, float | None]:
    """last_start_time by job, from a full build and from the incremental snapshot (equal)."""
    kinds = ("pods", "nodes", "podgroups", "queues")
    full = SnapshotBuilder("kai-scheduler").build(
        pods=objects["pods"],
        nodes=objects["nodes"],
        podgroups=objects["podgroups"],
        queues=objects["queues"],
        bind_requests=[],
        now=0.0,
    )
    sources = {
        k: dict_source(
            {(o["metadata"].get("namespace") or "", o["metadata"]["name"]): o for o in objects[k]}
        )
        for k in kinds
    }
    sources |= {k: dict_source({}) for k in ("bindrequests", "topologies", "priorityclasses")}
    inc = IncrementalSnapshot(SnapshotBuilder("kai-scheduler"), sources).build(now=0.0)
    got = {j.uid: j.last_start_time for j in full.snapshot.jobs}
    assert got == {j.uid: j.last_start_time for j in inc.snapshot.jobs}
    return got


def _scheduled(at: str) -> dict[str, Any]:
    return {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}


def test_a_running_job_without_the_annotation_started_when_its_pods_were_bound() -> None:
    later = "2026-12-01T11:30:00Z"
    starts = _starts(_objects([_scheduled(later), _scheduled(T_BOUND)]))
    assert starts["work/run"] == parse_time(T_BOUND)  # the earliest pod
    assert starts["work/target"] is None  # nothing of it runs


def test_the_kubelets_start_time_without_a_podscheduled_condition() -> None:
    starts = _starts(_objects([{"startTime": T_STARTED}, {"startTime": T_STARTED}]))
    assert starts["work/run"] == parse_time(T_STARTED)
    # no time at all: unknown, unprotected (as KAI without the annotation)
    assert _starts(_objects([{}, {}]))["work/run"] is None


def test_the_annotation_wins_over_the_pods() -> None:
    written = "2026-12-01T10:59:58Z"
    objects = _objects([_scheduled(T_BOUND), _scheduled(T_BOUND)], annotation=written)
    assert _starts(objects)["work/run"] == parse_time(written)


def test_a_pending_pod_does_not_count() -> None:
    objects = _objects([_scheduled(T_BOUND), _scheduled(T_BOUND)])
    pending = json.loads(json.dumps(objects["pods"][0]))
    pending["metadata"].update(name="run-9", uid="uid-run-9")
    pending["spec"].pop("nodeName")
    pending["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "lastTransitionTime": T_EARLY}],
    }
    objects["pods"].append(pending)
    assert _starts(objects)["work/run"] == parse_time(T_BOUND)
