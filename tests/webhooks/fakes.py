"""Test doubles for the webhooks: a cluster view over plain lists, requests in one line."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kai.api.namespace_queues import NamespaceQueues, from_queue_trees, from_queues
from kai.gitops.loader import load_paths
from kai.webhooks.cluster import QueueInfo, queue_index
from kai.webhooks.review import Request

ROOT = Path(__file__).resolve().parents[2]


class FakeCluster:
    """What :class:`kai.webhooks.cluster.ClusterView` answers, from lists held in memory."""

    def __init__(self, objects: list[dict[str, Any]] | None = None) -> None:
        self.objects = list(objects or [])
        self.workloads: dict[str, list[str]] = {}
        self.cache_lags = False  # the informer cache misses what objects hold
        self.fresh_reads = 0

    def policy_objects(self) -> list[dict[str, Any]]:
        return list(self.objects)

    def queue_workloads(self, queue: str) -> list[str]:
        return list(self.workloads.get(queue, []))

    def _of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    def queues(self, fresh: bool = False) -> dict[str, QueueInfo]:
        if fresh:
            self.fresh_reads += 1
        elif self.cache_lags:
            return {}
        return queue_index(self._of("QueueTree"), self._of("Queue"))

    def namespace_queues(self) -> NamespaceQueues:
        merged = {
            **from_queues(self._of("Queue")).bindings,
            **from_queue_trees(self._of("QueueTree")).bindings,
        }
        return NamespaceQueues(merged)

    def topology_levels(self, name: str, fresh: bool = False) -> Any:
        for obj in self._of("Topology") + self._of("TopologyPolicy"):
            if obj["metadata"]["name"] == name:
                return [(lv["nodeLabel"], lv.get("alias")) for lv in obj["spec"]["levels"]]
        return None


def example_objects(path: str = "examples/gitops") -> list[dict[str, Any]]:
    """The documents of an example repository, as the API server would hold them."""
    loaded = load_paths([str(ROOT / path)])
    return [
        d.data
        for d in loaded.documents
        if isinstance(d.data, dict)
        and str(d.data.get("apiVersion", "")).split("/")[0]
        in ("gitops.kai.scheduler", "scheduling.run.ai", "kai.scheduler")
    ]


def request(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    *,
    dry_run: bool = False,
) -> Request:
    subject = obj if obj is not None else old or {}
    api_version = str(subject.get("apiVersion") or "v1")
    group, _, version = api_version.rpartition("/")
    md = subject.get("metadata") or {}
    return Request(
        uid=str(uuid.uuid4()),
        group=group,
        version=version,
        kind=str(subject.get("kind") or ""),
        operation=operation,
        name=str(md.get("name") or ""),
        namespace=str(md.get("namespace") or ""),
        object=obj,
        old_object=old,
        dry_run=dry_run,
    )


def pod(
    name: str = "p",
    namespace: str = "team-nlp",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    scheduler: str = "kai-scheduler",
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
        },
        "spec": spec,
    }


def _with(p: dict[str, Any], **spec: Any) -> dict[str, Any]:
    p["spec"].update(spec)
    return p


def _resources(p: dict[str, Any], field: str, resources: dict[str, str]) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"] = {field: resources}
    return p


#: pods of every kind the pod webhooks tell apart (the match condition tests, the patch test)
POD_SHAPES: dict[str, dict[str, Any]] = {
    "plain, namespace bound": pod(),
    "plain, namespace unbound": pod(namespace="elsewhere"),
    "queue label": pod(labels={"kai.scheduler/queue": "nlp"}),
    "empty queue label": pod(labels={"kai.scheduler/queue": ""}),
    "project label": pod(labels={"project": "nlp"}),
    "missing queue": pod(labels={"kai.scheduler/queue": "no-such-queue"}),
    "parent queue": pod(labels={"kai.scheduler/queue": "research"}),
    "fraction": pod(annotations={"gpu-fraction": "0.5"}),
    "fraction, labelled": pod(
        annotations={"gpu-fraction": "0.5"}, labels={"kai.scheduler/queue": "nlp"}
    ),
    "memory, labelled": pod(annotations={"gpu-memory": "2000"}, labels={"project": "nlp"}),
    "bad fraction, no label": pod(annotations={"gpu-fraction": "2"}, namespace="elsewhere"),
    "num devices alone": pod(annotations={"gpu-fraction-num-devices": "2"}, namespace="elsewhere"),
    "mps alone": pod(annotations={"mps": "true"}, namespace="elsewhere"),
    "container name alone": pod(
        annotations={"gpu-fraction-container-name": "x"}, namespace="elsewhere"
    ),
    "legacy mig annotation": pod(annotations={"nvidia.com/mig-1g.5gb": "1"}, namespace="elsewhere"),
    "other annotations": pod(
        annotations={"team": "a"}, labels={"kai.scheduler/queue": "nlp", "app": "x"}
    ),
    "whole gpus, labelled": pod(gpus=2, labels={"kai.scheduler/queue": "nlp"}),
    "whole gpus, unbound": pod(gpus=2, namespace="elsewhere"),
    "gpu request differs from limit": _resources(
        pod(namespace="elsewhere"), "requests", {"nvidia.com/gpu": "0.5"}
    ),
    "mig resource": _resources(
        pod(namespace="elsewhere"), "limits", {"nvidia.com/mig-1g.5gb": "1"}
    ),
    "gpu in an init container": pod(
        namespace="elsewhere",
        init=[{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}],
    ),
    "runtime class set": _with(
        pod(gpus=1, labels={"kai.scheduler/queue": "nlp"}), runtimeClassName="nvidia"
    ),
    "cpu, labelled, unbound": pod(namespace="elsewhere", labels={"kai.scheduler/queue": "nlp"}),
}
