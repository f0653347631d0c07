"""One built situation per pending reason of the taxonomy, as the raw objects a cluster holds.

Each situation is a dict kind -> objects (the kinds of a ClusterSnapshot) with one job named
``target`` in namespace ``work`` whose first reason is the situation's name. The same objects
are put into a snapshot directly (unit tests) or created on the embedded API server and
captured through a kubeconfig (e2e tests).
"""

from __future__ import annotations

from typing import Any

from kai.sim.nodes import NodeShape, node_manifest, ready_conditions

NS = "work"
T0 = "2026-12-01T10:00:00Z"


def node(name: str, index: int, gpus: int = 8, rack: str | None = None) -> dict[str, Any]:
    obj = node_manifest(name, index, NodeShape(gpus=gpus))
    obj["status"]["conditions"] = ready_conditions()
    if rack is not None:
        obj["metadata"]["labels"]["kai.test/rack"] = rack
    return obj


def queue(
    name: str,
    quota: float = -1,
    limit: float = -1,
    parent: str | None = None,
) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name, "creationTimestamp": T0},
        "spec": spec,
    }


def podgroup(
    name: str,
    queue_name: str,
    min_member: int = 1,
    *,
    preemptibility: str | None = None,
    topology: dict[str, Any] | None = None,
    created: str = T0,
    preemption_delay: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": queue_name, "minMember": min_member}
    if preemption_delay:
        spec["preemptionDelay"] = preemption_delay
    if preemptibility:
        spec["preemptibility"] = preemptibility
    if topology:
        spec["topologyConstraint"] = topology
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
        "spec": spec,
    }


def pod(
    name: str,
    group: str,
    queue_name: str,
    gpus: int,
    *,
    node_name: str | None = None,
    releasing: bool = False,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "env": [{"name": "TOKEN", "value": "s3cr3t"}],
                "command": ["sleep", "3600"],
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    md: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "creationTimestamp": T0,
        "labels": {"kai.scheduler/queue": queue_name},
        "annotations": {"pod-group-name": group},
    }
    if releasing:
        md["deletionTimestamp"] = "2026-12-01T10:05:00Z"
        md["finalizers"] = ["kai.test/hold"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def running_job(
    name: str, queue_name: str, nodes_gpus: list[tuple[str, int]], *, releasing: bool = False
) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [podgroup(name, queue_name, len(nodes_gpus))]
    for i, (node_name, gpus) in enumerate(nodes_gpus):
        objs.append(
            pod(f"{name}-{i}", name, queue_name, gpus, node_name=node_name, releasing=releasing)
        )
    return objs


def _world(*groups: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds = {"Node": "nodes", "Pod": "pods", "PodGroup": "podgroups", "Queue": "queues"}
    kinds["Topology"] = "topologies"
    out: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        for obj in group:
            out.setdefault(kinds[obj["kind"]], []).append(obj)
    return out


def target(queue_name: str, gpus: int, pods: int = 1, **pg: Any) -> list[dict[str, Any]]:
    objs = [podgroup("target", queue_name, pods, **pg)]
    objs += [pod(f"target-{i}", "target", queue_name, gpus) for i in range(pods)]
    return objs


def situations() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """reason -> the cluster's objects."""
    two_nodes = [node("n0", 0), node("n1", 1)]
    topology = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": [{"nodeLabel": "kai.test/rack"}]},
    }
    return {
        "QueueDoesNotExist": _world(two_nodes, [queue("team")], target("ghost", 1)),
        "QueueNotLeaf": _world(
            two_nodes, [queue("dept"), queue("team", parent="dept")], target("dept", 1)
        ),
        # the queue's limit is 4 GPUs, 2 are in use, the job asks for 4
        "OverLimit": _world(
            two_nodes,
            [queue("team", quota=2, limit=4)],
            running_job("busy", "team", [("n0", 2)]),
            target("team", 4),
        ),
        # a non-preemptible job may use only the quota (2), it asks for 4
        "NonPreemptibleOverQuota": _world(
            two_nodes,
            [queue("team", quota=2)],
            target("team", 4, preemptibility="non-preemptible"),
        ),
        # as WaitingForEviction, but the target waits out a preemption delay of 6h (from its
        # creation at 10:00): it may not reclaim yet
        "PreemptionDelayNotElapsed": _world(
            two_nodes,
            [queue("a", quota=8), queue("b", quota=8)],
            running_job("b-run", "b", [("n0", 8)]),
            running_job("b-run2", "b", [("n1", 8)]),
            target("a", 8, preemption_delay="6h"),
        ),
        # the cluster is full; the target's queue already holds its whole quota (8), the other
        # queue is within its own: nothing may be reclaimed for the target
        "WaitingForFairShare": _world(
            two_nodes,
            [queue("a", quota=8), queue("b", quota=8)],
            running_job("a-run", "a", [("n0", 8)]),
            running_job("b-run", "b", [("n1", 8)]),
            target("a", 4),
        ),
        # 4 + 4 GPUs idle on two nodes, a gang of 2 x 6 GPUs: each task alone would not fit
        # either... so: one pod of 8 fits on n0 (idle 8), the second does not (n1 has 4 idle)
        "GangDoesNotFit": _world(
            two_nodes,
            [queue("team")],
            running_job("other", "team", [("n1", 4)]),
            target("team", 8, pods=2),
        ),
        # two racks of one node each, 4 GPUs idle on each; a 2 x 4-GPU gang required in one rack
        "TopologyDoesNotFit": _world(
            [node("n0", 0, rack="r0"), node("n1", 1, rack="r1")],
            [queue("team"), topology],
            running_job("other", "team", [("n0", 4), ("n1", 4)]),
            target(
                "team",
                4,
                pods=2,
                topology={"topology": "dc", "requiredTopologyLevel": "kai.test/rack"},
            ),
        ),
        # 16 GPUs asked of 8-GPU nodes
        "NoNodeFits": _world(two_nodes, [queue("team")], target("team", 16)),
        # the target's queue is under its quota, the other is over: reclaim evicts for it
        "WaitingForEviction": _world(
            two_nodes,
            [queue("a", quota=8), queue("b", quota=8)],
            running_job("b-run", "b", [("n0", 8)]),
            running_job("b-run2", "b", [("n1", 8)]),
            target("a", 8),
        ),
        # the only GPUs are held by a pod being deleted: the target is placed on them
        "Pipelined": _world(
            [node("n0", 0)],
            [queue("team")],
            running_job("leaving", "team", [("n0", 8)], releasing=True),
            target("team", 8),
        ),
    }
