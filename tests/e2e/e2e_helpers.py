"""Helpers of the end-to-end tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai.kube.client import ApiError, Kube
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.system import System, SystemOptions
from kube_emulator import ApiServer


def queue(
    name: str, gpu_quota: float = -1, gpu_limit: float = -1, parent: str | None = None
) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


@dataclass
class Cluster:
    server: ApiServer
    kubeconfig: str
    kube: Kube
    start_system: Callable[..., System]


def system_starter(kubeconfig: str, systems: list[System]) -> Callable[..., System]:
    """``start_system(**overrides)`` for a :class:`Cluster`: a live system on ``kubeconfig``
    with the short periods that keep the tests fast (any ``SystemOptions`` field overridable),
    started and appended to ``systems`` for the fixture to stop."""

    def start_system(**overrides: Any) -> System:
        options = SystemOptions(
            period=0.2,
            status_period=0.3,
            lease_duration=2.0,
            renew_period=0.5,
            retry_period=0.1,
        )
        for key, value in overrides.items():
            setattr(options, key, value)
        system = System(kubeconfig, options).start()
        systems.append(system)
        return system

    return start_system


def make_nodes(cluster: Cluster, count: int, gpus: int = 8) -> list[str]:
    return create_nodes(cluster.kube, count, NodeShape(gpus=gpus))


def remove_test_objects(api: Kube, ns: str, node_prefix: str) -> None:
    """Leave a shared real cluster as a test found it: its namespace and pods, the GPU
    reservation pods on its nodes, and its nodes (named ``node_prefix``...). Pods go with grace
    0: no kubelet runs on a simulated node to finish a graceful deletion."""
    from kai.kube.resources import NAMESPACES, NODES, PODS
    from kai.reconcilers.snapshot_builder import RESERVATION_NAMESPACE

    with contextlib.suppress(ApiError):
        api.delete(NAMESPACES, ns)
    for namespace in (ns, RESERVATION_NAMESPACE):
        for pod in api.list(PODS, namespace)["items"]:
            if namespace == ns or (pod.get("spec") or {}).get("nodeName", "").startswith(
                node_prefix
            ):
                with contextlib.suppress(ApiError):
                    api.delete(PODS, pod["metadata"]["name"], namespace, grace_period_seconds=0)
    for node in api.list(NODES)["items"]:
        if node["metadata"]["name"].startswith(node_prefix):
            with contextlib.suppress(ApiError):
                api.delete(NODES, node["metadata"]["name"])


def both_servers(
    request: Any, tmp_path: Path, cleanup: Callable[[Kube], None] | None = None
) -> Iterator[tuple[str, Kube]]:
    """The body of an ``api`` fixture parametrized ``["embedded", "real"]``: (kubeconfig,
    bootstrapped client) of a fresh embedded API server, or of this worker's real one (the
    ``real_cluster`` fixture, which skips without a real control plane). ``cleanup`` runs on the
    real one afterwards, to leave the session's cluster as it was."""
    from kai.sim.system import bootstrap

    if request.param == "embedded":
        # HTTPS: the tests run kubectl too, which sends the token over HTTPS only
        server = ApiServer(bookmark_interval=0.2, tls=True).start()
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        kube = Kube.from_kubeconfig(kubeconfig)
        bootstrap(kube)
        try:
            yield kubeconfig, kube
        finally:
            kube.close()
            server.stop()
        return
    cluster = request.getfixturevalue("real_cluster")
    kubeconfig = str(cluster.kubeconfig)
    kube = Kube.from_kubeconfig(kubeconfig)
    bootstrap(kube)
    try:
        yield kubeconfig, kube
    finally:
        if cleanup is not None:
            cleanup(kube)
        kube.close()
