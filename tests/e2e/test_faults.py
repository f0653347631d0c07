"""The whole system through the embedded API server's fault mode: 500s, 409s and dropped
watches at a rate. Every pod must end bound exactly once (its spec.nodeName goes from empty to
a node once and never changes), and fractional pods must share devices consistently."""

from __future__ import annotations

from typing import Any

from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from kai.kube.client import KubeError
from kai.kube.resources import PODS, QUEUES
from kai.kube.writes import create_if_absent
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job


def test_every_pod_bound_exactly_once_under_faults(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 6, gpus=8)
    transitions: dict[str, list[str]] = {}

    def watch_binds(event: Any) -> None:
        if event.tkey != ("", "pods") or event.type != "MODIFIED":
            return
        before = (event.prev or {}).get("spec", {}).get("nodeName")
        after = event.obj.get("spec", {}).get("nodeName")
        if after != before:
            transitions.setdefault(event.obj["metadata"]["name"], []).append(after or "")

    cluster.server.core.store.listeners.append(watch_binds)
    cluster.start_system()
    cluster.server.faults.configure(
        error_rate=0.05, conflict_rate=0.2, watch_drop_rate=0.02, seed=11
    )
    names = []
    for i in range(30):
        name = f"whole-{i:02d}"
        create_if_absent(kube, PODS, pod_manifest(name, "work", "team", gpus=1))
        names.append(name)
    for i in range(8):
        name = f"half-{i}"
        create_if_absent(kube, PODS, pod_manifest(name, "work", "team", fraction=0.5))
        names.append(name)
    names += submit_job(kube, "gang", "work", "team", pods=3, gpus_per_pod=2, min_member=3)

    def all_bound() -> bool:
        try:  # the test's own reads meet the injected faults too
            items = kube.list(PODS, "work")["items"]
        except KubeError:
            return False
        pods = [p for p in items if p["metadata"]["name"] in names]
        return len(pods) == len(names) and all(p["spec"].get("nodeName") for p in pods)

    try:
        eventually(all_bound, timeout=60, interval=0.2)
    finally:
        injected = dict(cluster.server.faults.injected)
        cluster.server.faults.clear()
    assert injected["errors"] > 0 and injected["conflicts"] > 0 and injected["watch_drops"] > 0
    assert set(transitions) >= set(names)
    assert all(len(nodes) == 1 for nodes in transitions.values()), {
        k: v for k, v in transitions.items() if len(v) != 1
    }
    # fractional pods: at most two halves per GPU group, each group on one node
    pods = {p["metadata"]["name"]: p for p in kube.list(PODS, "work")["items"]}
    groups: dict[str, list[str]] = {}
    for i in range(8):
        pod = pods[f"half-{i}"]
        group = pod["metadata"]["labels"]["runai-gpu-group"]
        groups.setdefault(group, []).append(pod["spec"]["nodeName"])
    assert all(len(nodes) <= 2 and len(set(nodes)) == 1 for nodes in groups.values())
    # GPUs never over-committed on any node
    used: dict[str, float] = {}
    for pod in pods.values():
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        used[pod["spec"]["nodeName"]] = used.get(pod["spec"]["nodeName"], 0) + int(
            limits.get("nvidia.com/gpu", 0)
        )
    for node, whole in used.items():
        shared = len({g for g, n in groups.items() if n[0] == node})
        assert whole + shared <= 8, (node, whole, shared)
