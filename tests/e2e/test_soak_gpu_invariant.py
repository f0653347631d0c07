"""Soak: fractional churn, whole-GPU pods and gangs on full nodes while the binder and the
scheduler change leaders (a new instance starts, the old one stops), with the GPU invariant
watched at every pod event (tests/helpers/gpu_invariant.py), on the embedded API server and on
a real one (there the controller-manager's Job controller makes the gangs' pods, and the
simulated nodes and kubelet play the kubelets). Bounded: about 30 s each."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import Cluster, both_servers, queue, remove_test_objects, system_starter
from live_helpers import eventually

from helpers.gpu_invariant import GpuInvariantWatcher
from kai.kube.client import Kube
from kai.kube.resources import PODS, QUEUES
from kai.kube.writes import create_if_absent
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.system import System
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job

RESERVATIONS = "kai-resource-reservation"


@pytest.fixture(params=["embedded", "real"])
def soak(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str, bool]]:
    """(cluster, namespace, whether the server runs a Job controller) on a fresh embedded API
    server or this worker's real one, three 4-GPU simulated nodes of its own."""
    tag = uuid.uuid4().hex[:6]
    ns, prefix = f"soak-{tag}", f"soak-{tag}"
    systems: list[System] = []

    def cleanup(api: Kube) -> None:  # leave the session's real cluster as it was
        for system in systems:
            system.stop()
        systems.clear()
        remove_test_objects(api, ns, prefix)

    for kubeconfig, kube in both_servers(request, tmp_path, cleanup=cleanup):
        create_nodes(kube, 3, NodeShape(gpus=4), prefix=prefix)
        try:
            start_system = system_starter(kubeconfig, systems)
            cluster = Cluster(None, kubeconfig, kube, start_system)  # type: ignore[arg-type]
            yield cluster, ns, request.param == "real"
        finally:
            for system in systems:
                system.stop()
            systems.clear()


def test_soak_no_gpu_overcommit_through_churn_and_leader_changes(
    soak: tuple[Cluster, str, bool],
) -> None:
    cluster, ns, job_controller = soak
    kube = cluster.kube
    create_if_absent(kube, QUEUES, queue("team"))
    ensure_namespace(kube, ns)
    with GpuInvariantWatcher(kube) as watcher:
        cluster.start_system(components=("nodes",))
        cluster.start_system(components=("podgrouper",))
        scheduler = cluster.start_system(components=("scheduler",), identity_suffix="-s0")
        binder = cluster.start_system(components=("binder",), identity_suffix="-b0")
        names: list[str] = []
        changes = 0

        def change_leader(old: System, component: str) -> System:
            nonlocal changes
            changes += 1
            new = cluster.start_system(components=(component,), identity_suffix=f"-{changes}")
            old.stop()  # releases its Lease: the new instance takes over
            return new

        for wave in range(4):
            # 16 halves fill 8 of the 12 devices and finish quickly; whole-GPU pods and a gang
            # wait behind them for the devices the halves leave
            for i in range(16):
                name = f"half-{wave}-{i:02d}"
                kube.create(PODS, pod_manifest(name, ns, "team", fraction=0.5, duration=1.5))
                names.append(name)
            for i in range(4):
                name = f"whole-{wave}-{i}"
                kube.create(PODS, pod_manifest(name, ns, "team", gpus=1, duration=1.5))
                names.append(name)
            names += submit_job(
                kube,
                f"gang-{wave}",
                ns,
                "team",
                pods=2,
                gpus_per_pod=2,
                min_member=2,
                duration=1.5,
                job_controller=job_controller,
            )
            time.sleep(1.5)
            if wave % 2 == 0:
                binder = change_leader(binder, "binder")
            else:
                scheduler = change_leader(scheduler, "scheduler")

        def phases() -> dict[str, str]:
            return {
                p["metadata"]["name"]: (p.get("status") or {}).get("phase") or "Pending"
                for p in kube.list(PODS, ns)["items"]
            }

        def all_done() -> dict[str, str] | None:
            current = phases()
            done = all(current.get(n) in ("Succeeded", "Failed") for n in names)
            # the gangs' pods made by a real Job controller: every pod of the namespace, 2 per gang
            done = done and all(p in ("Succeeded", "Failed") for p in current.values())
            done = done and len(current) == len(names) + (8 if job_controller else 0)
            return current if done else None

        try:
            final = eventually(all_done, timeout=45, interval=0.25)
            # every reservation is released once its group is empty (none orphaned)
            eventually(lambda: not kube.list(PODS, RESERVATIONS)["items"], timeout=10)
        except AssertionError:
            watcher.assert_held()  # over-commit is the likelier cause: say so first
            current = phases()
            stuck = {n: current.get(n) for n in names if current.get(n) not in ("Succeeded",)}
            left = [p["metadata"]["name"] for p in kube.list(PODS, RESERVATIONS)["items"]]
            raise AssertionError(f"not finished: {stuck}; reservations left: {left}") from None
    failed = {n: p for n, p in final.items() if p != "Succeeded"}
    assert not failed, failed  # the kubelet refused nothing
    watcher.assert_held()
    assert max(watcher.peak.values()) == 4  # the nodes were really full
    assert changes == 4
