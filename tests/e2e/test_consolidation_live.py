"""Consolidation carried out live: the core's moves become evictions whose pods come back (from
their Job) on the room the core found for them, and the pipelined preemptor binds once the room is
free, as KAI does. On the embedded API server and on a real one."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Cluster, queue, remove_test_objects, system_starter
from live_helpers import eventually

from kai.kube.client import ApiError, Kube
from kai.kube.resources import EVENTS, PODS, QUEUES
from kai.scheduler.result import Move, SessionResult
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.system import System, bootstrap
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job
from kube_emulator import ApiServer

NODES, GPUS = 3, 4
NS, QUEUE, PREFIX = "consolidate-live", "consolidate-team", "consolidate-node"


@pytest.fixture(params=["embedded", "real"])
def jobs_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A fresh embedded server with its Job controller on, or this worker's real control plane
    (kube-controller-manager's Job controller): either way an evicted Job pod comes back."""
    systems: list[System] = []
    if request.param == "real":
        kubeconfig = str(request.getfixturevalue("real_cluster").kubeconfig)
        kube = Kube.from_kubeconfig(kubeconfig)
        bootstrap(kube)
        try:
            yield Cluster(None, kubeconfig, kube, system_starter(kubeconfig, systems))  # type: ignore[arg-type]
        finally:
            for system in systems:
                system.stop()
            remove_test_objects(kube, NS, PREFIX)
            with contextlib.suppress(ApiError):
                kube.delete(QUEUES, QUEUE)
            kube.close()
        return
    server = ApiServer(bookmark_interval=0.2, workload_controllers=True).start()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    kube = Kube.from_kubeconfig(kubeconfig)
    bootstrap(kube)
    try:
        yield Cluster(server, kubeconfig, kube, system_starter(kubeconfig, systems))
    finally:
        for system in systems:
            system.stop()
        kube.close()
        server.stop()


def _pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return kube.list(PODS, ns)["items"]


def _running(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [
        p
        for p in _pods(kube, ns)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _free_per_node(kube: Kube, ns: str, nodes: list[str]) -> dict[str, int]:
    used: Counter[str] = Counter()
    for pod in _pods(kube, ns):
        node = pod["spec"].get("nodeName")
        if node and pod["status"].get("phase") in ("Pending", "Running"):
            limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
            used[node] += int(limits.get("nvidia.com/gpu", 0))
    return {n: GPUS - used[n] for n in nodes}


def test_consolidation_moves_pods_live_and_the_preemptor_runs(jobs_cluster: Cluster) -> None:
    kube = jobs_cluster.kube
    kube.create(QUEUES, queue(QUEUE))
    ensure_namespace(kube, NS)
    nodes = create_nodes(kube, NODES, NodeShape(gpus=GPUS), prefix=PREFIX)
    system = jobs_cluster.start_system()
    # one 1-GPU blocker pinned on each node, then a Job that fills the rest but for 2 GPUs
    for node in nodes:
        blocker = pod_manifest(f"blocker-{node}", NS, QUEUE, gpus=1)
        blocker["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        kube.create(PODS, blocker)
    eventually(lambda: len(_running(kube, NS)) == NODES, timeout=20)
    job_pods = NODES * GPUS - NODES - 2
    submit_job(kube, "filler", NS, QUEUE, pods=job_pods, job_controller=True)
    eventually(lambda: len(_running(kube, NS)) == NODES + job_pods, timeout=30)
    for node in nodes:
        kube.delete(PODS, f"blocker-{node}", NS, grace_period_seconds=0)
    eventually(lambda: len(_running(kube, NS)) == job_pods, timeout=20)
    free = _free_per_node(kube, NS, nodes)
    assert sum(free.values()) == NODES + 2 and max(free.values()) < GPUS, free
    # every cycle that sees the big pod: its status, and the moves the core decided
    seen: list[tuple[str, list[Move]]] = []

    def record(built: Any, result: SessionResult) -> None:
        uid = next((u for u, p in built.pods.items() if p["metadata"]["name"] == "big"), None)
        if uid is not None and uid in result.tasks:
            seen.append((result.tasks[uid].status.value, list(result.moves)))

    system.scheduler.result_listeners.append(record)
    kube.create(PODS, pod_manifest("big", NS, QUEUE, gpus=GPUS))

    def big_running() -> bool:
        return kube.get(PODS, "big", NS)["status"].get("phase") == "Running"

    assert eventually(big_running, timeout=30)
    moves = [move for _, cycle_moves in seen for move in cycle_moves]
    assert moves, f"the core moved nothing: {seen}"
    assert all(move.action == "consolidation" for move in moves)
    # bound within three cycles of the one that moved pods; nothing moved a second time
    first = next(i for i, (_, cycle_moves) in enumerate(seen) if cycle_moves)
    bound = next(i for i, (status, _) in enumerate(seen) if status in ("Binding", "Bound"))
    assert bound - first <= 3, seen
    assert len({move.task for move in moves}) == len(moves), "a task was moved twice"
    evictions = [e for e in kube.list(EVENTS, NS)["items"] if e["reason"] == "Evict"]
    assert len(evictions) == len(moves)
    assert all("consolidation" in e["message"] for e in evictions)
    assert max(Counter(e["involvedObject"]["uid"] for e in evictions).values()) == 1
    # the moved pods came back (from the Job) on the nodes the core chose; the big pod's node
    # holds it alone
    eventually(lambda: len(_running(kube, NS)) == job_pods + 1, timeout=30)
    big_node = kube.get(PODS, "big", NS)["spec"]["nodeName"]
    after = _free_per_node(kube, NS, nodes)
    assert after[big_node] == 0
    gained = Counter(move.to_node for move in moves)
    lost = Counter(move.from_node for move in moves)
    for node in nodes:
        if node != big_node:
            assert free[node] - after[node] == gained[node] - lost[node], (free, after, moves)
