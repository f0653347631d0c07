"""Raw objects -> the core's Snapshot: statuses, capacity, bad input (no server needed)."""

from __future__ import annotations

from typing import Any

from kai.reconcilers.snapshot_builder import SnapshotBuilder
from kai.scheduler.snapshot import TaskStatus
from kai.sim.nodes import NodeShape, node_manifest, ready_conditions
from kai.sim.workloads import pod_manifest


def _node(name: str, index: int = 0, gpus: int = 8) -> dict[str, Any]:
    node = node_manifest(name, index, NodeShape(gpus=gpus))
    node["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
    node["status"]["conditions"] = ready_conditions()
    return node


def _pod(name: str, group: str | None, rv: str = "1", **kw: Any) -> dict[str, Any]:
    pod = pod_manifest(name, "ns", "q", **kw)
    pod["metadata"].update(
        uid=f"uid-{name}", resourceVersion=rv, creationTimestamp="2026-01-01T00:00:00Z"
    )
    if group:
        pod["metadata"].setdefault("annotations", {})["pod-group-name"] = group
    return pod


def _pg(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"queue": "q", "minMember": 1, **spec},
    }


QUEUE = {
    "metadata": {"name": "q", "uid": "q"},
    "spec": {
        "resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
        }
    },
}


def test_statuses_capacity_and_problems() -> None:
    running = _pod("running", "pg-a", gpus=2)
    running["spec"]["nodeName"] = "n0"
    running["status"] = {"phase": "Running"}
    binding = _pod("binding", "pg-a", gpus=1)
    orphan = _pod("orphan", "pg-missing", gpus=3)  # bound, but its PodGroup is gone
    orphan["spec"]["nodeName"] = "n0"
    done = _pod("done", "pg-a", gpus=8)
    done["status"] = {"phase": "Succeeded"}
    waiting = _pod("waiting", None, gpus=1)
    bad = _pod("bad", "pg-a", annotations={"gpu-fraction": "2.5"})
    other = _pod("other", None, gpus=1, scheduler_name="default-scheduler")
    other["spec"]["nodeName"] = "n1"
    br = {
        "metadata": {"name": "binding", "namespace": "ns", "uid": "br"},
        "spec": {"podName": "binding", "selectedNode": "n1"},
        "status": {"phase": "Pending"},
    }
    built = SnapshotBuilder("kai-scheduler").build(
        pods=[running, binding, orphan, done, waiting, bad, other],
        nodes=[_node("n0"), _node("n1", 1)],
        podgroups=[_pg("pg-a", priorityClassName="inference"), _pg("pg-bad", queue=None)],
        queues=[QUEUE],
        bind_requests=[br],
        priority_classes=[{"metadata": {"name": "inference"}, "value": 125}],
    )
    snap = built.snapshot
    (job,) = snap.jobs
    assert job.priority == 125 and job.preemptible is False
    tasks = {t.name: t for t in job.tasks}
    assert tasks["running"].status is TaskStatus.RUNNING and tasks["running"].node == "n0"
    assert tasks["binding"].status is TaskStatus.BINDING and tasks["binding"].node == "n1"
    # a Succeeded pod stays in its gang, holding nothing (a finishing gang is not stale)
    assert tasks["done"].status is TaskStatus.SUCCEEDED and tasks["done"].node is None
    assert set(tasks) == {"running", "binding", "done"}
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["n0"].gpus == 8 - 3  # the orphan still holds its GPUs
    assert nodes["n1"].gpus == 8 - 1  # so does the other scheduler's pod
    assert [p["metadata"]["name"] for p in built.ungrouped] == ["waiting"]
    fields = {(p.obj["metadata"]["name"], p.field) for p in built.problems}
    assert ("bad", "annotation gpu-fraction") in fields
    assert ("pg-bad", "spec.queue") in fields


def test_parse_cache_follows_resource_versions() -> None:
    builder = SnapshotBuilder("kai-scheduler")
    args = {
        "nodes": [_node("n0")],
        "podgroups": [_pg("pg")],
        "queues": [QUEUE],
        "bind_requests": [],
    }
    first = builder.build(pods=[_pod("p", "pg", rv="1", gpus=1)], **args)
    assert first.snapshot.jobs[0].tasks[0].gpu.whole == 1
    second = builder.build(pods=[_pod("p", "pg", rv="2", gpus=2)], **args)
    assert second.snapshot.jobs[0].tasks[0].gpu.whole == 2
    assert first.snapshot.jobs[0] is not second.snapshot.jobs[0]


def test_mig_nodes_and_bad_nodes() -> None:
    mig = node_manifest("mig", 0, NodeShape(gpus=2, mig={"nvidia.com/mig-1g.10gb": 14}))
    mig["metadata"].update(uid="uid-mig", resourceVersion="1")
    mig["status"]["conditions"] = ready_conditions()
    broken = _node("broken", 1)
    broken["status"]["allocatable"]["cpu"] = "many"
    built = SnapshotBuilder("kai-scheduler").build(
        pods=[],
        nodes=[mig, broken, _node("plain", 2)],
        podgroups=[],
        queues=[QUEUE],
        bind_requests=[],
    )
    nodes = {n.name: n for n in built.snapshot.nodes}
    assert set(nodes) == {"mig", "plain"}
    assert nodes["mig"].mig is not None
    assert nodes["mig"].mig.devices == (("nvidia.com/mig-1g.10gb", 14),)
    assert nodes["mig"].mig.physical_gpus == 2
    assert nodes["plain"].gpu_memory_mib == 81900  # 81920 MiB floored to a multiple of 100
    (problem,) = built.problems
    assert problem.obj["metadata"]["name"] == "broken"
    assert problem.field == "status.allocatable.cpu"


def _reservation(name: str, node: str, group: str, **md: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kai-resource-reservation",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group},
            **md,
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "kai-scheduler",
            "containers": [
                {"name": "r", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ],
        },
        "status": {"phase": "Running"},
    }


def test_a_reservation_pod_holds_its_gpu_until_it_is_gone() -> None:
    half = _pod("half", "pg", fraction=0.5)
    half["spec"]["nodeName"] = "n0"
    half["metadata"]["labels"]["runai-gpu-group"] = "live"
    half["status"] = {"phase": "Running"}
    finished = _pod("finished", "pg", fraction=0.5)
    finished["spec"]["nodeName"] = "n0"
    finished["metadata"]["labels"]["runai-gpu-group"] = "emptied"
    finished["status"] = {"phase": "Succeeded"}
    reservations = [
        _reservation("r-live", "n0", "live"),  # its device is the group's: not counted twice
        _reservation("r-emptied", "n0", "emptied"),  # group finished, pod still there
        _reservation("r-deleting", "n0", "gone", deletionTimestamp="2026-01-01T00:00:00Z"),
        _reservation("r-live-elsewhere", "n1", "live"),  # same group name, other node
    ]
    built = SnapshotBuilder("kai-scheduler").build(
        pods=[half, finished, *reservations],
        nodes=[_node("n0"), _node("n1", 1)],
        podgroups=[_pg("pg")],
        queues=[QUEUE],
        bind_requests=[],
    )
    nodes = {n.name: n for n in built.snapshot.nodes}
    assert nodes["n0"].gpus == 8 - 2  # "emptied" and "gone"; "live" is the task's device
    assert nodes["n1"].gpus == 8 - 1
    assert nodes["n0"].max_pods == 110 - 3  # every reservation pod takes a pod slot
    (job,) = built.snapshot.jobs
    # the finished pod is a Succeeded task that holds no GPU group
    assert [(t.name, t.gpu_groups) for t in job.tasks] == [("half", ("live",)), ("finished", ())]
