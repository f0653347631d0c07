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


# -- kai explain / simulate --snapshot read the live scheduler's inputs --------------------------
POOL = "kai.scheduler/node-pool"


def _snapshot(world: dict[str, list[dict[str, Any]]], **kw: Any) -> Any:
    from kai.reconcilers.cluster_snapshot import KINDS, ClusterSnapshot

    snap = ClusterSnapshot(captured_at=parse_time("2026-12-01T12:00:00Z") or 0.0, **kw)
    for kind in KINDS:
        snap.objects[kind] = world.get(kind, [])
    return snap


def _sharing_configmap(**pools: list[str]) -> dict[str, Any]:
    import yaml

    data = {
        f"sharing-policy.{name or 'default'}.yaml": yaml.safe_dump(
            {"name": name or "default", "nodePool": name, "modes": modes}
        )
        for name, modes in pools.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kai-scheduler-config", "namespace": "kai-scheduler"},
        "data": data,
    }


def _mig_world() -> dict[str, list[dict[str, Any]]]:
    from kai.sim.nodes import NodeShape, node_manifest, ready_conditions

    mig = node_manifest("mig-0", 0, NodeShape(gpus=1, mig={"nvidia.com/mig-1g.10gb": 7}))
    mig["status"]["conditions"] = ready_conditions()
    objs = target("team", 1)
    limits = objs[1]["spec"]["containers"][0]["resources"]["limits"]
    limits.clear()
    limits["nvidia.com/mig-1g.10gb"] = "1"
    return {"nodes": [mig], "queues": [queue("team")], "podgroups": [objs[0]], "pods": [objs[1]]}


def test_explain_reads_the_sharing_policies_of_the_configmap() -> None:
    """A MIG pod on a pool whose SharingPolicy allows only fractions: the live scheduler says
    NoNodeFits (SharingPolicy does not allow); so does explain of a snapshot (it used to place it:
    "nothing blocks it")."""
    from kai.insight.explain import explain
    from kai.scheduler.predicates import SHARING_MODE_NOT_ALLOWED

    world = _mig_world()
    allowed = explain(_snapshot(world), "work/target")
    assert allowed.state == "Running" and not allowed.reasons  # no SharingPolicy: every mode
    world["configmaps"] = [_sharing_configmap(**{"": ["fraction"]})]
    found = explain(_snapshot(world), "work/target").as_dict()
    assert found["state"] == "Pending"
    assert found["firstReason"]["reason"] == "NoNodeFits"
    assert found["firstReason"]["nodes"] == {SHARING_MODE_NOT_ALLOWED: 1}
    world["configmaps"] = [_sharing_configmap(**{"": ["fraction", "mig"]})]
    assert explain(_snapshot(world), "work/target").state == "Running"


def _pool_world() -> dict[str, list[dict[str, Any]]]:
    n0, px = node("n0", 0), node("px-0", 1)
    px["metadata"]["labels"][POOL] = "x"
    tx = queue("team-x")
    tx["metadata"]["labels"] = {POOL: "x"}
    busy = running_job("busy", "team", [("n0", 8)])
    mine = target("team-x", 4)
    for obj in mine:
        obj["metadata"].setdefault("labels", {})[POOL] = "x"
    plain = target("team", 4)
    plain[0]["metadata"]["name"] = "plain"
    plain[1]["metadata"].update(name="plain-0", uid="uid-plain-0")
    plain[1]["metadata"]["annotations"]["pod-group-name"] = "plain"
    return {
        "nodes": [n0, px],
        "queues": [queue("team"), tx],
        "podgroups": [busy[0], mine[0], plain[0]],
        "pods": [*busy[1:], mine[1], plain[1]],
    }


def test_explain_and_simulate_see_the_pools_as_their_schedulers_do() -> None:
    """A pool-x pod is placed on pool x's node by pool x's scheduler (explain takes the pool of
    its target); the default pool's pod waits although pool x's node is free (it used to be
    "placed on" any node, whatever its pool)."""
    from kai.insight.explain import explain, run

    snap = _snapshot(_pool_world())
    built, result = run(snap, "x")
    assert {j.uid for j in built.snapshot.jobs} == {"work/target"}
    assert result.tasks["uid-target-0"].node == "px-0"
    assert explain(snap, "work/target").state == "Running"
    plain = explain(snap, "work/plain").as_dict()
    assert plain["state"] == "Pending"
    assert plain["firstReason"]["nodes"] == {"insufficient gpu": 1}  # n0 only: px-0 not its
    built, result = run(snap)  # simulate --snapshot: the default pool, as recorded (none)
    assert {n.name for n in built.snapshot.nodes} == {"n0"}
    assert result.tasks["uid-plain-0"].node is None
    recorded = _snapshot(_pool_world(), node_pool="x")  # written by pool x's scheduler
    assert {n.name for n in run(recorded)[0].snapshot.nodes} == {"px-0"}


def test_a_fractional_pod_whose_bind_never_completed_waits_for_its_bind() -> None:
    """A BindRequest without status, no node: not "Running ... nothing blocks it" but waiting
    for its bind, with the BindRequest's state; then with the binder's failures."""
    from kai.insight.explain import explain, text

    world = json.loads(json.dumps(_pool_world()))
    world["pods"] = [p for p in world["pods"] if p["metadata"]["name"] == "plain-0"]
    world["podgroups"] = [g for g in world["podgroups"] if g["metadata"]["name"] == "plain"]
    world["nodes"] = world["nodes"][:1]
    limits = world["pods"][0]["spec"]["containers"][0]["resources"]["limits"]
    limits.pop("nvidia.com/gpu")
    world["pods"][0]["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    br = {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {"name": "plain-0", "namespace": "work"},
        "spec": {
            "podName": "plain-0",
            "selectedNode": "n0",
            "selectedGPUGroups": ["g1"],
            "receivedResourceType": "Fraction",
            "backoffLimit": 3,
        },
    }
    world["bindrequests"] = [br]
    found = explain(_snapshot(world), "work/plain")
    assert found.state == "Binding" and not found.reasons
    out = text(found)
    assert "nothing blocks it" not in out and "Running" not in out
    assert "waiting for its bind:" in out
    assert "BindRequest work/plain-0 to node n0 (GPU group g1), no status yet" in out
    assert found.unblock and "reservation pod" in found.unblock[0]
    br["status"] = {"phase": "Pending", "failedAttempts": 2, "reason": "ReservationTimeout: x"}
    doc = explain(_snapshot(world), "work/plain").as_dict()
    assert doc["waitingForBind"] == [
        "pod work/plain-0: BindRequest work/plain-0 to node n0 (GPU group g1), phase Pending, "
        "2 failed attempt(s): ReservationTimeout: x"
    ]


def test_the_pool_fields_of_the_snapshot_format() -> None:
    import pytest

    from kai.reconcilers.cluster_snapshot import SnapshotFormatError, from_document

    snap = _snapshot(_pool_world(), node_pool="x", node_pool_label="example.com/pool")
    doc = snap.to_document()
    assert (doc["nodePool"], doc["nodePoolLabelKey"]) == ("x", "example.com/pool")
    back = from_document(json.loads(json.dumps(doc)))
    assert (back.node_pool, back.node_pool_label) == ("x", "example.com/pool")
    plain = _snapshot(_pool_world()).to_document()
    assert "nodePool" not in plain and "nodePoolLabelKey" not in plain
    assert from_document(plain).node_pool is None
    with pytest.raises(SnapshotFormatError, match="snapshot: nodePool: expected a string"):
        from_document({**doc, "nodePool": 3})
    with pytest.raises(SnapshotFormatError, match="nodePoolLabelKey: expected a non-empty"):
        from_document({**doc, "nodePoolLabelKey": ""})


def test_simulated_nodes_read_through_the_official_clients_models() -> None:
    """Every field the official client's models require is there (it refused the nodes'
    nodeInfo without bootID, kernelVersion, machineID, osImage, systemUUID, kubeProxyVersion)."""
    import pytest

    pytest.importorskip("kubernetes")
    from kubernetes.client import ApiClient

    from kai.sim.nodes import NodeShape, node_info, node_manifest

    items = [
        node_manifest("gpu-node-00", 0, NodeShape()),
        node_manifest("mig-node-00", 1, NodeShape(mig={"nvidia.com/mig-1g.10gb": 7})),
    ]
    body = json.dumps({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items})
    nodes = ApiClient().deserialize(body, "V1NodeList", "application/json").items
    assert [n.status.node_info.machine_id for n in nodes] == [
        node_info("gpu-node-00")["machineID"],
        node_info("mig-node-00")["machineID"],
    ]
    assert node_info("gpu-node-00") == node_info("gpu-node-00")  # stable per name
    assert node_info("gpu-node-00")["bootID"] != node_info("gpu-node-01")["bootID"]
