"""Helpers of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kai.kube.client import Kube
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.system import System
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


def make_nodes(cluster: Cluster, count: int, gpus: int = 8) -> list[str]:
    return create_nodes(cluster.kube, count, NodeShape(gpus=gpus))
