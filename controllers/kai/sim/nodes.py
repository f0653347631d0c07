"""Simulated GPU nodes and their life cycle.

A node is created as a real one registers: with capacity and the labels the scheduler reads
(``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory``, zone/rack topology, optional MIG), and no
Ready condition. The API server taints it ``node.kubernetes.io/not-ready:NoSchedule`` (as the
TaintNodesByCondition admission plugin does); :class:`NodeLifecycle` then plays the kubelet's
first status report and the node-lifecycle controller: it marks the node Ready and removes the
taint, so the scheduler honours the taint until the node is really usable.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kai.kube.client import Kube, KubeError
from kai.kube.informer import Informer
from kai.kube.resources import NODES
from kai.kube.writes import create_if_absent, patch_if_changed, with_retries

log = logging.getLogger("kai.sim.nodes")

SIMULATED_LABEL = "kai.sim/simulated"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"


@dataclass
class NodeShape:
    gpus: int = 8
    gpu_memory_mib: int = 81920  # an 80 GB device
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "128"
    memory: str = "1024Gi"
    max_pods: int = 110
    mig: dict[str, int] = field(default_factory=dict)  # e.g. {"nvidia.com/mig-1g.10gb": 7}
    nodes_per_rack: int = 4
    racks_per_block: int = 2
    blocks_per_zone: int = 2


def node_manifest(name: str, index: int, shape: NodeShape) -> dict[str, Any]:
    rack = index // max(1, shape.nodes_per_rack)
    block = rack // max(1, shape.racks_per_block)
    zone = block // max(1, shape.blocks_per_zone)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        SIMULATED_LABEL: "true",
        ZONE_LABEL: f"zone-{zone}",
        BLOCK_LABEL: f"block-{block}",
        RACK_LABEL: f"rack-{rack}",
        "nvidia.com/gpu.count": str(shape.gpus),
        "nvidia.com/gpu.memory": str(shape.gpu_memory_mib),
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.present": "true",
    }
    capacity: dict[str, str] = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": str(shape.max_pods),
        "ephemeral-storage": "1Ti",
    }
    if shape.mig:
        labels["node-role.kubernetes.io/mig-enabled"] = "true"
        labels["nvidia.com/mig.strategy"] = "mixed"
        capacity.update({k: str(v) for k, v in shape.mig.items()})
    else:
        capacity["nvidia.com/gpu"] = str(shape.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": node_info(name),
            "addresses": [
                {
                    "type": "InternalIP",
                    "address": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
                },
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def node_info(name: str) -> dict[str, str]:
    """``status.nodeInfo`` with every field a kubelet fills (clients such as the official
    Python one require them all as strings); the ids are stable per node name."""
    machine = uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.nodes.kai.sim")
    return {
        "machineID": machine.hex,
        "systemUUID": str(machine).upper(),
        "bootID": str(uuid.uuid5(machine, "boot")),
        "kernelVersion": "6.8.0-kai.sim",
        "osImage": "kai simulated node",
        "containerRuntimeVersion": "kai-sim://1",
        "kubeletVersion": "v1.36.0-kai.sim",
        "kubeProxyVersion": "",  # deprecated: the kubelet leaves it empty since v1.31
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def create_nodes(
    kube: Kube,
    count: int,
    shape: NodeShape | None = None,
    *,
    prefix: str = "gpu-node",
    workers: int = 8,
) -> list[str]:
    """Create ``count`` nodes (idempotent: existing ones are kept). Returns their names."""
    shape = shape or NodeShape()
    width = max(2, len(str(count - 1)))
    names = [f"{prefix}-{i:0{width}d}" for i in range(count)]

    def make(item: tuple[int, str]) -> None:
        index, name = item
        create_if_absent(kube, NODES, node_manifest(name, index, shape))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(make, enumerate(names)))
    return names


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_conditions() -> list[dict[str, Any]]:
    now = _now()
    base = {"status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now}
    return [
        {**base, "type": "MemoryPressure", "reason": "KubeletHasSufficientMemory"},
        {**base, "type": "DiskPressure", "reason": "KubeletHasNoDiskPressure"},
        {**base, "type": "PIDPressure", "reason": "KubeletHasSufficientPID"},
        {
            **base,
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status (simulated)",
        },
    ]


def is_ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


class NodeLifecycle:
    """Marks simulated nodes Ready and lifts the not-ready taint once they are."""

    def __init__(self, kube: Kube, informer: Informer, workers: int = 4) -> None:
        self.kube = kube
        self.informer = informer
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="sim-node")
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        informer.add_handler(self._on_event)

    def stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _on_event(self, etype: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        md = node.get("metadata") or {}
        if (md.get("labels") or {}).get(SIMULATED_LABEL) != "true":
            return
        tainted = any(
            t.get("key") == NOT_READY_TAINT for t in (node.get("spec") or {}).get("taints") or []
        )
        if is_ready(node) and not tainted:
            return
        name = md["name"]
        with self._lock:
            if name in self._pending:
                return
            self._pending.add(name)
        with contextlib.suppress(RuntimeError):  # shutting down
            self.pool.submit(self._settle, name)

    def _settle(self, name: str) -> None:
        try:
            node = with_retries(lambda: self.kube.get(NODES, name))
            if not is_ready(node):
                node = (
                    patch_if_changed(
                        self.kube,
                        NODES,
                        node,
                        {"status": {"conditions": ready_conditions()}},
                        sub="status",
                    )
                    or node
                )
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
            if len(kept) != len(taints):
                patch_if_changed(self.kube, NODES, node, {"spec": {"taints": kept or None}})
        except KubeError as exc:
            log.warning("node %s: cannot mark it ready: %s", name, exc)
        finally:
            with self._lock:
                self._pending.discard(name)
