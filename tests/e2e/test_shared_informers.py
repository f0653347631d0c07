"""Scheduler, binder and pod-grouper in one process sharing one client and one set of
informers (`kai scheduler --also binder,podgrouper`, ``SystemOptions.share_informers``)."""

from __future__ import annotations

import dataclasses
import functools
import signal
import subprocess
import sys
from pathlib import Path

import test_live_scheduling  # a module: its test is not collected twice
from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from kai.kube.resources import PODGROUPS, PODS, QUEUES
from kai.sim.workloads import ensure_namespace, pod_manifest

KAI = [sys.executable, "-m", "kai.cli"]


def test_one_set_of_informers_serves_all_three(cluster: Cluster) -> None:
    system = cluster.start_system(share_informers=True, components=("scheduler", "binder"))
    system_all = None
    try:
        scheduler_set = system.informers["scheduler"]
        # the binder follows the scheduler's own pods and BindRequests informers
        assert system.informers["binder"] is scheduler_set
        assert system.binder is not None
        assert system.binder.pods is scheduler_set["pods"]
        assert system.binder.brs is scheduler_set["bindrequests"]
    finally:
        system.stop()
    system_all = cluster.start_system(
        share_informers=True,
        components=("scheduler", "binder", "podgrouper"),
        identity_suffix="-all",
    )
    shared = system_all.informers["scheduler"]
    grouper = system_all.grouper
    assert grouper is not None
    assert grouper.pods is shared["pods"] and grouper.podgroups is shared["podgroups"]
    # the pod-grouper's Jobs are not the scheduler's: a Job's status is no scheduling work
    assert "jobs" not in shared.informers
    assert grouper.jobs is system_all.informers["podgrouper"]["jobs"]
    pods = [i for i in shared.informers.values() if i.resource == PODS]
    assert len(pods) == 1


def test_whole_fractional_and_gangs_with_shared_informers(cluster: Cluster) -> None:
    """The whole-system scenario, with the three components sharing their informers."""
    shared = dataclasses.replace(
        cluster, start_system=functools.partial(cluster.start_system, share_informers=True)
    )
    test_live_scheduling.test_whole_and_fractional_gpus_and_gangs(shared)


def test_scheduler_also_runs_binder_and_podgrouper(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=4)
    cluster.start_system(components=("nodes",))  # simulated nodes/kubelet in-process
    proc = subprocess.Popen(
        [
            *KAI,
            "scheduler",
            "--kubeconfig",
            cluster.kubeconfig,
            "--period",
            "0.2",
            "--also",
            "binder,podgrouper",
            "--log-level",
            "INFO",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        kube.create(PODS, pod_manifest("whole", "work", "team", gpus=1))
        kube.create(PODS, pod_manifest("half", "work", "team", fraction=0.5))
        eventually(
            lambda: (
                len(items := kube.list(PODS, "work")["items"]) == 2
                and all(p["status"].get("phase") == "Running" for p in items)
            ),
            timeout=60,
            interval=0.2,
        )
        # the pod-grouper made the PodGroups, the binder bound the fractional pod
        assert len(kube.list(PODGROUPS, "work")["items"]) == 2
        half = kube.get(PODS, "half", "work")
        assert half["metadata"]["annotations"]["received-resource-type"] == "Fraction"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    logs = out + err
    assert "scheduler+binder+podgrouper: informers synced" in logs
    assert "podgrouper: first PodGroup created" in logs


def test_also_names_an_unknown_component(tmp_path: Path) -> None:
    out = subprocess.run(
        [*KAI, "scheduler", "--kubeconfig", str(tmp_path / "none"), "--also", "binder,kubelet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "unknown component 'kubelet'" in out.stderr
