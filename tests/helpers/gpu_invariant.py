"""A watcher for the GPU invariant of a live cluster, usable against any API server.

The invariant, checked after every pod or node event (so at every resourceVersion the watch
delivers, not only at the end of a test):

- on a node, the ``nvidia.com/gpu`` requests of its non-terminal pods (reservation pods in
  ``kai-resource-reservation`` included, pods being deleted included: a kubelet runs them until
  they are gone) never exceed the node's allocatable ``nvidia.com/gpu``;
- a shared device -- the pods of one node labelled with the same ``runai-gpu-group`` (or
  ``runai-gpu-group/<group>``) -- is never asked for more than one device's worth
  (``gpu-fraction``, or ``gpu-memory`` over the node's ``nvidia.com/gpu.memory``).

Every violation is recorded with the node, the amounts and the pods involved::

    with GpuInvariantWatcher(kube) as watcher:
        ...  # run the workload
    watcher.assert_held()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kai.api.gpu_request import GpuRequestError, gpu_request_from_pod
from kai.api.quantity import parse_quantity
from kai.kube.client import Kube
from kai.kube.informer import Informer
from kai.kube.resources import NODES, PODS

GPU = "nvidia.com/gpu"
GROUP_LABEL = "runai-gpu-group"


@dataclass(frozen=True)
class Violation:
    node: str
    kind: str  # "gpus" (whole requests over allocatable) or "shares" (one shared device)
    used: float
    allowed: float
    pods: tuple[str, ...]  # namespace/name (request) of each pod counted
    resource_version: str  # of the event that produced the state

    def __str__(self) -> str:
        what = "GPUs requested" if self.kind == "gpus" else f"shares of device {self.kind[7:]}"
        return (
            f"node {self.node}: {what} {self.used:g} > {self.allowed:g} at resourceVersion "
            f"{self.resource_version}: {', '.join(self.pods)}"
        )


def pod_gpu_requests(pod: dict[str, Any]) -> int:
    """``nvidia.com/gpu`` a kubelet admits the pod for: containers summed (a limit without a
    request counts as the request), each init container max'ed against the sum."""
    spec = pod.get("spec") or {}

    def amount(container: dict[str, Any]) -> int:
        res = container.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        return int(parse_quantity(value))

    total = sum(amount(c) for c in spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        total = max(total, amount(init))
    return total


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_groups(pod: dict[str, Any]) -> list[str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return [v for k, v in labels.items() if k == GROUP_LABEL or k.startswith(GROUP_LABEL + "/")]


class GpuInvariantWatcher:
    """Watches pods and nodes through ``kube`` and records every :class:`Violation`."""

    def __init__(self, kube: Kube) -> None:
        self.nodes = Informer(kube, NODES, name="invariant-nodes")
        self.pods = Informer(kube, PODS, name="invariant-pods")
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.violations: list[Violation] = []
        self.checks = 0
        self.peak: dict[str, int] = {}  # node -> most GPUs ever requested at once
        self.pods.add_handler(self._on_pod)

    def start(self, timeout: float = 30.0) -> GpuInvariantWatcher:
        self.nodes.start()
        if not self.nodes.wait_synced(timeout):
            raise TimeoutError("GPU invariant watcher: nodes not listed")
        self.pods.start()
        if not self.pods.wait_synced(timeout):
            raise TimeoutError("GPU invariant watcher: pods not listed")
        return self

    def stop(self) -> None:
        self.pods.stop()
        self.nodes.stop()

    def __enter__(self) -> GpuInvariantWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def assert_held(self) -> None:
        assert self.checks > 0, "the GPU invariant watcher saw no pod on any node"
        if self.violations:
            shown = "\n".join(str(v) for v in self.violations[:20])
            more = len(self.violations) - 20
            raise AssertionError(
                f"{len(self.violations)} GPU invariant violations"
                + (f" ({more} more not shown)" if more > 0 else "")
                + f":\n{shown}"
            )

    # -- events --------------------------------------------------------------------------
    def _on_pod(self, etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        md = pod.get("metadata") or {}
        key = (str(md.get("namespace") or ""), str(md.get("name") or ""))
        touched = set()
        with self._lock:
            for node, pods in self._by_node.items():
                if pods.pop(key, None) is not None:
                    touched.add(node)
            node = (pod.get("spec") or {}).get("nodeName")
            if etype != "DELETED" and node and not is_terminal(pod):
                self._by_node.setdefault(node, {})[key] = pod
                touched.add(node)
            for name in sorted(touched):
                self._check(name, str(md.get("resourceVersion") or ""))

    def _check(self, node_name: str, rv: str) -> None:
        node = self.nodes.get(node_name)
        if node is None:
            return
        status = node.get("status") or {}
        alloc = (status.get("allocatable") or status.get("capacity") or {}).get(GPU, 0)
        allowed = int(parse_quantity(alloc))
        labels = (node.get("metadata") or {}).get("labels") or {}
        device_mib = float(labels.get("nvidia.com/gpu.memory") or 0) or None
        pods = self._by_node.get(node_name, {})
        self.checks += 1
        whole = 0
        holders = []
        shares: dict[str, list[tuple[float, str]]] = {}
        for (ns, name), pod in sorted(pods.items()):
            gpus = pod_gpu_requests(pod)
            if gpus:
                whole += gpus
                holders.append(f"{ns}/{name} ({gpus})")
            groups = pod_groups(pod)
            if not groups:
                continue
            try:
                request = gpu_request_from_pod(pod).request
            except GpuRequestError:
                continue
            share = request.fraction
            if share is None and request.memory_mib is not None and device_mib:
                share = request.memory_mib / device_mib
            if share:
                for group in groups:
                    shares.setdefault(group, []).append((share, f"{ns}/{name} ({share:g})"))
        self.peak[node_name] = max(self.peak.get(node_name, 0), whole)
        if whole > allowed:
            self.violations.append(Violation(node_name, "gpus", whole, allowed, tuple(holders), rv))
        for group, parts in sorted(shares.items()):
            total = sum(s for s, _ in parts)
            if total > 1.0 + 1e-9:
                self.violations.append(
                    Violation(
                        node_name, f"shares:{group}", total, 1.0, tuple(p for _, p in parts), rv
                    )
                )
