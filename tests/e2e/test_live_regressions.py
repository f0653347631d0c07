"""Live regression tests of bugs found when kai was tried as a user would (issue 14): each runs
the whole system on an embedded API server and checks what a user sees on the cluster."""

from __future__ import annotations

import time
from typing import Any

from e2e_helpers import Cluster, queue
from live_helpers import eventually

from kai.kube.resources import PODS, QUEUES
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.workloads import ensure_namespace, pod_manifest


def _pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.kube.list(PODS, ns)["items"]}


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def test_native_sidecars_are_summed_with_the_main_containers(cluster: Cluster) -> None:
    """A pod of 4 cpu + a 4-cpu native sidecar needs 8 cpu: two do not share an 8-cpu node
    (the old rule max'ed the sidecar like an init container: both were bound, one failed
    OutOfcpu at the kubelet)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=0, cpu="8", memory="64Gi"))
    cluster.start_system()
    for name in ("a", "b"):
        pod = pod_manifest(name, "work", "team", cpu="4", memory="1Gi")
        pod["spec"]["initContainers"] = [
            {
                "name": "proxy",
                "image": "busybox:1.36",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "4", "memory": "1Gi"}},
            }
        ]
        kube.create(PODS, pod)
    eventually(
        lambda: (
            sorted(_phase(p) for p in _pods(cluster, "work").values()) == ["Pending", "Running"]
        ),
        timeout=20,
    )
    time.sleep(1.0)  # a few more cycles: the second pod stays pending, never bound or failed
    pods = _pods(cluster, "work")
    assert sorted(_phase(p) for p in pods.values()) == ["Pending", "Running"]
    pending = next(p for p in pods.values() if _phase(p) == "Pending")
    assert not pending["spec"].get("nodeName")


def _anti_affinity(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": expressions},
                }
            ]
        }
    }


def test_anti_affinity_with_only_match_expressions_selects_what_they_say(
    cluster: Cluster,
) -> None:
    """A term with only matchExpressions used to parse to an empty selector that matched every
    pod, so any pod on a node blocked it."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=4))
    cluster.start_system()
    kube.create(PODS, pod_manifest("web", "work", "team", gpus=1, labels={"app": "web"}))
    eventually(lambda: _phase(_pods(cluster, "work")["web"]) == "Running", timeout=20)
    free = pod_manifest("free", "work", "team", gpus=1, labels={"app": "batch"})
    free["spec"]["affinity"] = _anti_affinity([{"key": "app", "operator": "In", "values": ["db"]}])
    kube.create(PODS, free)
    blocked = pod_manifest("blocked", "work", "team", gpus=1, labels={"app": "batch"})
    blocked["spec"]["affinity"] = _anti_affinity([{"key": "app", "operator": "Exists"}])
    kube.create(PODS, blocked)
    eventually(lambda: _phase(_pods(cluster, "work")["free"]) == "Running", timeout=20)
    time.sleep(1.0)
    assert not _pods(cluster, "work")["blocked"]["spec"].get("nodeName")
