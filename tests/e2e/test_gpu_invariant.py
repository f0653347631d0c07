"""The GPU invariant of the live system, watched at every pod event: on a node the GPU requests
of non-terminal pods (reservation pods included) never exceed allocatable, and a shared
device's fractions never exceed one (see docs/design/gpu-sharing.md, "Who holds a device")."""

from __future__ import annotations

from typing import Any

from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from helpers.gpu_invariant import GpuInvariantWatcher
from kai.kube.resources import PODS, QUEUES
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
