"""kai explain / snapshot / queues through a kubeconfig on the embedded API server, the live
scheduler's conditions from the taxonomy, and the snapshot round trip: a snapshot of a running
system simulated offline gives the decisions of the live scheduler's next cycle."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Cluster, both_servers, make_nodes, queue
from live_helpers import eventually

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "insight"))

from situations import NS, situations

from kai.cli import main
from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.resources import NAMESPACES, NODES, PODGROUPS, PODS, QUEUES, TOPOLOGIES
from kai.reconcilers.cluster_snapshot import load
from kai.reconcilers.scheduler import Scheduler, SchedulerOptions, make_informers
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job

SITUATIONS = situations()
RESOURCES = {"nodes": NODES, "queues": QUEUES, "topologies": TOPOLOGIES}


def apply_world(kube: Kube, world: dict[str, list[dict[str, Any]]]) -> None:
    """Create the situation's objects as a cluster holds them: status through the status
    subresource, a releasing pod deleted while a finalizer holds it."""
    ensure_namespace(kube, NS)
    for kind, res in RESOURCES.items():
        for obj in world.get(kind, []):
            created = kube.create(res, obj)
            name = created["metadata"]["name"]
            if "status" in obj:
                kube.patch(res, name, {"status": obj["status"]}, sub="status")
            if kind == "nodes":  # Ready: lift the API server's not-ready taint (the node
                # lifecycle controller's work, which no component runs here)
                kube.patch(res, name, {"spec": {"taints": None}})
    for pg in world.get("podgroups", []):
        kube.create(PODGROUPS, pg, NS)
    for pod in world.get("pods", []):
        body = json.loads(json.dumps(pod))
        releasing = body["metadata"].pop("deletionTimestamp", None)
        body["metadata"].pop("uid", None)
        kube.create(PODS, body, NS)
        name = body["metadata"]["name"]
        kube.patch(PODS, name, {"status": pod["status"]}, NS, sub="status")
        if releasing:
            kube.delete(PODS, name, NS)


@pytest.mark.parametrize("reason", list(SITUATIONS))
def test_explain_through_a_kubeconfig(
    reason: str, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    apply_world(cluster.kube, SITUATIONS[reason])
    code = main(["explain", f"{NS}/target", "--kubeconfig", cluster.kubeconfig, "-o", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["firstReason"]["reason"] == reason, doc
    assert doc["unblock"]


def test_snapshot_and_queues_commands(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apply_world(cluster.kube, SITUATIONS["OverLimit"])
    path = tmp_path / "snap.json"
    assert main(["snapshot", "--kubeconfig", cluster.kubeconfig, "-o", str(path)]) == 0
    assert "2 nodes, 2 pods, 2 podgroups, 1 queues" in capsys.readouterr().err
    snap = load(path)
    text = path.read_text()
    assert "s3cr3t" not in text and "managedFields" not in text
    assert {p["metadata"]["name"] for p in snap.objects["pods"]} == {"busy-0", "target-0"}
    assert main(["explain", "target", "--snapshot", str(path), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["firstReason"]["reason"] == "OverLimit"
    assert main(["queues", "--kubeconfig", cluster.kubeconfig, "-o", "json"]) == 0
    (team,) = json.loads(capsys.readouterr().out)["queues"]
    assert (team["name"], team["allocated"]["gpu"], team["limit"]["gpu"]) == ("team", 2, 4)
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: a kubeconfig\n")
    assert main(["snapshot", "--kubeconfig", str(bad)]) == 2


def test_live_conditions_come_from_the_taxonomy(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 1, gpus=4)
    cluster.start_system()
    kube.create(PODS, pod_manifest("huge", "work", "team", gpus=8))

    def condition() -> dict[str, Any] | None:
        for pg in kube.list(PODGROUPS, "work")["items"]:
            conditions = (pg.get("status") or {}).get("schedulingConditions") or []
            if conditions:
                return dict(conditions[0])
        return None

    found = eventually(condition, timeout=20)
    assert found["reason"] == "NoNodeFits"
    assert found["reasons"][0]["reason"] == "NoNodeFits"
    assert found["message"].startswith("NoNodeFits: task 'huge' of job")
    assert "0/1 nodes are available: 1 node: insufficient gpu" in found["message"]


def test_snapshot_round_trip_equals_the_next_live_cycle(cluster: Cluster, tmp_path: Path) -> None:
    """A running system (scheduler, binder, pod-grouper, nodes); more work arrives; the
    scheduler's informers are snapshotted and its next cycle is run: the offline simulation of
    the snapshot decides the same binds, pipelines and evictions, and the same reasons."""
    from kai.insight.decisions import document
    from kai.insight.explain import run

    kube = cluster.kube
    kube.create(QUEUES, queue("a", gpu_quota=8))
    kube.create(QUEUES, queue("b", gpu_quota=8))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=8)
    system = cluster.start_system()
    for i in range(4):
        kube.create(PODS, pod_manifest(f"b-{i}", "work", "b", gpus=4))
    eventually(
        lambda: (
            sum(
                1 for p in kube.list(PODS, "work")["items"] if p["status"].get("phase") == "Running"
            )
            == 4
        ),
        timeout=30,
    )
    system.stop()  # the live scheduler of the system is gone; a fresh one takes over below
    # new work: a gang for queue a (under its quota: reclaim), a pod that fits nowhere, pods
    # of a missing queue
    submit_job(kube, "gang", "work", "a", pods=2, gpus_per_pod=4, min_member=2)
    kube.create(PODS, pod_manifest("huge", "work", "a", gpus=16))
    kube.create(PODS, pod_manifest("lost", "work", "ghost", gpus=1))
    grouper = cluster.start_system(components=("podgrouper", "nodes"))
    eventually(lambda: len(kube.list(PODGROUPS, "work")["items"]) == 7, timeout=30)
    grouper.stop()

    informers = make_informers(kube, "kai-scheduler")
    informers.start()
    try:
        assert informers.wait_synced(20)
        time.sleep(0.5)
        scheduler = Scheduler(
            kube, informers, EventRecorder(kube, "kai-scheduler"), SchedulerOptions()
        )
        try:
            path = scheduler.write_snapshot(str(tmp_path))
            live = scheduler.run_once()
            assert live is not None and scheduler.last_built is not None
        finally:
            scheduler.stop()
    finally:
        informers.stop()
    offline_built, offline = run(load(path))
    live_doc = document(scheduler.last_built, live)
    offline_doc = document(offline_built, offline)
    assert offline_doc == live_doc
    assert live_doc["pipelined"] or live_doc["binds"]  # the cycle decided something
    assert {j["reason"] for j in live_doc["pending"]} >= {"QueueDoesNotExist", "NoNodeFits"}


def _leave_as_it_was(kube: Kube) -> None:
    """Leave the session's real cluster as it was."""
    with contextlib.suppress(ApiError):
        kube.delete(NAMESPACES, NS)
    for res in (NODES, QUEUES):
        for obj in kube.list(res).get("items") or []:
            if res is QUEUES or obj["metadata"]["name"] in ("n0", "n1"):
                kube.delete(res, obj["metadata"]["name"])


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    """(kubeconfig, client) of a fresh embedded API server, or of this worker's real one."""
    yield from both_servers(request, tmp_path, cleanup=_leave_as_it_was)


def test_explain_and_wide_queues_on_both_servers(
    api: tuple[str, Kube], kubectl: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same situation through the embedded and the real API server; `kubectl get queues
    -o wide` shows the GPU quota, limit, fair share and allocation columns."""
    kubeconfig, kube = api
    apply_world(kube, SITUATIONS["OverLimit"])
    assert main(["explain", f"{NS}/target", "--kubeconfig", kubeconfig, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["firstReason"]["reason"] == "OverLimit"
    assert doc["queuePath"][0]["resources"]["gpu"]["allocated"] == 2
    kube.patch(
        QUEUES,
        "team",
        {"status": {"allocated": {"nvidia.com/gpu": "2"}, "fairShare": {"nvidia.com/gpu": "4"}}},
        sub="status",
    )
    out = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "get", "queues", "-o", "wide"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    header, row = out.splitlines()[:2]
    names = header.split()
    starts = [header.index(f"{n} ") if f"{n} " in header else header.index(n) for n in names]
    cells = {
        n: row[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None], strict=True)
    }
    wide = ("GPU-QUOTA", "GPU-LIMIT", "GPU-FAIRSHARE", "GPU-ALLOCATED")
    assert [cells["NAME"], *(cells[n] for n in wide)] == ["team", "2", "4", "4", "2"], out


def test_a_running_scheduler_writes_a_snapshot_on_sigusr1(cluster: Cluster, tmp_path: Path) -> None:
    import os
    import signal

    apply_world(cluster.kube, SITUATIONS["NoNodeFits"])
    out = tmp_path / "snapshots"
    out.mkdir()
    argv = [sys.executable, "-m", "kai.cli", "scheduler", "--kubeconfig", cluster.kubeconfig]
    argv += ["--no-leader-election", "--snapshot-dir", str(out), "--log-level", "WARNING"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        eventually(
            lambda: any(
                (pg.get("status") or {}).get("schedulingConditions")
                for pg in cluster.kube.list(PODGROUPS, NS)["items"]
            ),
            timeout=30,
        )
        os.kill(proc.pid, signal.SIGUSR1)
        (path,) = eventually(lambda: list(out.glob("kai-snapshot-*.json")), timeout=20)
        eventually(lambda: load(path) is not None, timeout=5)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    snap = load(path)
    assert {p["metadata"]["name"] for p in snap.objects["pods"]} == {"target-0"}
    from kai.insight.explain import explain

    assert explain(snap, "work/target").reasons[0].reason.value == "NoNodeFits"


def test_explain_agrees_with_the_live_scheduler_on_sharing_modes(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A MIG pod where the default pool's SharingPolicy allows fractions only: the live
    scheduler leaves it pending (PodScheduled=False, SharingPolicy does not allow), and `kai
    explain` through the kubeconfig says the same, in the same words."""
    import yaml

    from kai.kube.resources import CONFIGMAPS
    from kai.sim.nodes import NodeShape, create_nodes

    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    ensure_namespace(kube, "kai-scheduler")
    policy = {"name": "default", "nodePool": "", "modes": ["fraction"]}
    kube.create(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kai-scheduler-config", "namespace": "kai-scheduler"},
            "data": {"sharing-policy.default.yaml": yaml.safe_dump(policy)},
        },
    )
    create_nodes(kube, 1, NodeShape(gpus=1, mig={"nvidia.com/mig-1g.10gb": 7}), prefix="mig")
    cluster.start_system()
    body = pod_manifest("slice", "work", "team")
    body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    kube.create(PODS, body)

    def live_message() -> str | None:
        pod = kube.get(PODS, "slice", "work")
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return str(cond.get("message"))
        return None

    message = eventually(live_message, timeout=20)
    assert "SharingPolicy does not allow" in message
    assert main(["explain", "work/slice", "--kubeconfig", cluster.kubeconfig, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state"] == "Pending"
    assert doc["firstReason"]["reason"] == "NoNodeFits"
    assert doc["firstReason"]["message"] in message
