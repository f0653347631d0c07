"""Soak: fractional churn, whole-GPU pods and gangs on full nodes while the binder and the
scheduler change leaders (a new instance starts, the old one stops), with the GPU invariant
watched at every pod event (tests/helpers/gpu_invariant.py). Bounded: about 30 s."""

from __future__ import annotations

import time

from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from helpers.gpu_invariant import GpuInvariantWatcher
from kai.kube.resources import PODS, QUEUES
from kai.sim.system import System
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job

RESERVATIONS = "kai-resource-reservation"


def test_soak_no_gpu_overcommit_through_churn_and_leader_changes(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 3, gpus=4)
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
                kube.create(PODS, pod_manifest(name, "work", "team", fraction=0.5, duration=1.5))
                names.append(name)
            for i in range(4):
                name = f"whole-{wave}-{i}"
                kube.create(PODS, pod_manifest(name, "work", "team", gpus=1, duration=1.5))
                names.append(name)
            names += submit_job(
                kube,
                f"gang-{wave}",
                "work",
                "team",
                pods=2,
                gpus_per_pod=2,
                min_member=2,
                duration=1.5,
            )
            time.sleep(1.5)
            if wave % 2 == 0:
                binder = change_leader(binder, "binder")
            else:
                scheduler = change_leader(scheduler, "scheduler")

        def phases() -> dict[str, str]:
            return {
                p["metadata"]["name"]: (p.get("status") or {}).get("phase") or "Pending"
                for p in kube.list(PODS, "work")["items"]
            }

        def all_done() -> dict[str, str] | None:
            current = phases()
            done = all(current.get(n) in ("Succeeded", "Failed") for n in names)
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
