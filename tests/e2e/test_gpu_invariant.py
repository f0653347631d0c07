"""The GPU invariant of the live system, watched at every pod event: on a node the GPU requests
of non-terminal pods (reservation pods included) never exceed allocatable, and a shared
device's fractions never exceed one (see docs/design/gpu-sharing.md, "Who holds a device")."""

from __future__ import annotations

from typing import Any

from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from helpers.gpu_invariant import GpuInvariantWatcher
from kai.kube.resources import PODS, QUEUES
from kai.reconcilers.binder import reservation_pod_name
from kai.sim.workloads import ensure_namespace, pod_manifest


def _phases(cluster: Cluster, ns: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: (p.get("status") or {}).get("phase") or "Pending"
        for p in cluster.kube.list(PODS, ns)["items"]
    }


def test_whole_gpus_wait_for_the_reservations_of_finished_fractions(cluster: Cluster) -> None:
    """Fractional pods fill every device and finish; whole-GPU pods queued behind them must
    not land on a device whose reservation pod still holds it."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=4)
    with GpuInvariantWatcher(kube) as watcher:
        cluster.start_system()
        for i in range(16):  # 2 x 4 devices, two halves each
            kube.create(
                PODS, pod_manifest(f"half-{i:02d}", "work", "team", fraction=0.5, duration=2)
            )
        eventually(
            lambda: sum(v == "Running" for v in _phases(cluster, "work").values()) == 16,
            timeout=30,
        )
        for i in range(8):
            kube.create(PODS, pod_manifest(f"whole-{i}", "work", "team", gpus=1))

        def whole_running() -> Any:
            phases = _phases(cluster, "work")
            return all(phases[f"whole-{i}"] == "Running" for i in range(8))

        eventually(whole_running, timeout=40, interval=0.2)
    watcher.assert_held()
    assert max(watcher.peak.values()) == 4


def _reservation(name: str, node: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kai-resource-reservation",
            "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "kai-scheduler",
            "containers": [
                {"name": "r", "image": "r", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def test_a_new_binder_leader_adopts_the_groups_it_finds(cluster: Cluster) -> None:
    """What a previous leader may leave behind: a reservation of an emptied group, a second
    reservation for one group, a group whose pods run without a reservation."""
    kube = cluster.kube
    ensure_namespace(kube, "work")
    (node,) = make_nodes(cluster, 1, gpus=4)
    cluster.start_system(components=("nodes",))
    for group in ("kept", "orphan"):
        pod = pod_manifest(f"in-{group}", "work", None, fraction=0.5)
        pod["metadata"]["labels"]["runai-gpu-group"] = group
        pod["spec"]["nodeName"] = node
        kube.create(PODS, pod)
    kube.create(PODS, _reservation(reservation_pod_name(node, "kept"), node, "kept"))
    kube.create(PODS, _reservation("gpu-reservation-extra", node, "kept"))
    kube.create(PODS, _reservation(reservation_pod_name(node, "empty"), node, "empty"))
    eventually(
        lambda: (
            sum(v == "Running" for v in _phases(cluster, "kai-resource-reservation").values()) == 3
        )
    )
    cluster.start_system(components=("binder",))
    want = {reservation_pod_name(node, "kept"), reservation_pod_name(node, "orphan")}
    eventually(lambda: set(_phases(cluster, "kai-resource-reservation")) == want, timeout=15)
    # and once the groups empty, their reservations go at once (no age, no sweep needed)
    for group in ("kept", "orphan"):
        kube.delete(PODS, f"in-{group}", "work", grace_period_seconds=0)
    eventually(lambda: not _phases(cluster, "kai-resource-reservation"), timeout=5)
