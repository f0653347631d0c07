"""What the webhooks know of the cluster.

Two ways to read, chosen per webhook by how often it is called:

- the policy kinds and Queues (rare writes, every answer must be right): a fresh LIST from the
  API server for each request (:meth:`ClusterView.policy_objects`), a consistent read, so a
  document applied a moment ago is always seen;
- pods (hundreds per second): informer caches of Queues, QueueTrees, Topologies and
  TopologyPolicies (:meth:`ClusterView.queues`, :meth:`ClusterView.namespace_queues`), with a
  live read before a pod is refused for a queue the cache does not know yet.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from kai.api.namespace_queues import NamespaceQueues, from_cluster
from kai.kube.client import ApiError, Kube, Resource
from kai.kube.informer import InformerSet
from kai.kube.resources import PODGROUPS, PODS, QUEUES, TOPOLOGIES

QUEUE_TREES = Resource("gitops.kai.scheduler", "v1alpha1", "queuetrees", False, "QueueTree")
TOPOLOGY_POLICIES = Resource(
    "gitops.kai.scheduler", "v1alpha1", "topologypolicies", False, "TopologyPolicy"
)
SHARING_POLICIES = Resource(
    "gitops.kai.scheduler", "v1alpha1", "sharingpolicies", False, "SharingPolicy"
)
SCHEDULER_POLICIES = Resource(
    "gitops.kai.scheduler", "v1alpha1", "schedulerpolicies", False, "SchedulerPolicy"
)

#: every kind `kai validate` checks together, as the cluster serves them
POLICY_RESOURCES = (
    QUEUE_TREES,
    TOPOLOGY_POLICIES,
    SHARING_POLICIES,
    SCHEDULER_POLICIES,
    QUEUES,
    TOPOLOGIES,
)

MANAGED_BY = "app.kubernetes.io/managed-by"
SOURCE_ANNOTATION = "gitops.kai.scheduler/source"


def compiled(obj: dict[str, Any]) -> bool:
    """A Queue or Topology the controller compiled from a document (its source is checked)."""
    md = obj.get("metadata") or {}
    return (md.get("labels") or {}).get(MANAGED_BY) == "kai" and bool(
        (md.get("annotations") or {}).get(SOURCE_ANNOTATION)
    )


@dataclass
class QueueInfo:
    """A queue as the pod webhooks see it: exists, is a leaf, which namespaces may use it."""

    name: str
    parent: str | None = None
    children: set[str] = field(default_factory=set)
    namespaces: tuple[str, ...] = ()  # empty: any namespace


def queue_index(trees: list[dict[str, Any]], queues: list[dict[str, Any]]) -> dict[str, QueueInfo]:
    """Every queue named by a QueueTree or a Queue, with its children and namespaces."""
    index: dict[str, QueueInfo] = {}

    def add(name: str, parent: str | None, namespaces: tuple[str, ...]) -> None:
        info = index.setdefault(name, QueueInfo(name))
        info.parent = info.parent or parent
        info.namespaces = info.namespaces or namespaces

    def walk(items: Any, parent: str | None) -> None:
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            raw = item.get("namespaces") or []
            names = tuple(n for n in raw if isinstance(n, str)) if isinstance(raw, list) else ()
            add(item["name"], parent, names)
            walk(item.get("children"), item["name"])

    for tree in trees:
        spec = tree.get("spec") or {}
        parent = spec.get("parent") if isinstance(spec.get("parent"), str) else None
        walk(spec.get("queues"), parent or None)
    for queue in queues:
        md = queue.get("metadata") or {}
        if not md.get("name"):
            continue
        parent = (queue.get("spec") or {}).get("parentQueue") or None
        raw = (md.get("annotations") or {}).get("gitops.kai.scheduler/namespaces") or ""
        names = tuple(n.strip() for n in str(raw).split(",") if n.strip())
        add(str(md["name"]), str(parent) if parent else None, names)
    for info in index.values():
        if info.parent and info.parent in index:
            index[info.parent].children.add(info.name)
    return index


class ClusterView:
    def __init__(self, kube: Kube, *, watch: bool = True) -> None:
        self.kube = kube
        self.informers = InformerSet(kube)
        if watch:
            for res in (QUEUES, QUEUE_TREES, TOPOLOGIES, TOPOLOGY_POLICIES):
                self.informers.add(res.plural, res)
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, ...], dict[str, QueueInfo], NamespaceQueues] | None = None

    def start(self) -> ClusterView:
        self.informers.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        return self.informers.wait_synced(timeout)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.informers.values())

    def stop(self) -> None:
        self.informers.stop()

    # -- live reads ------------------------------------------------------------------------
    def list_all(self, res: Resource, **params: Any) -> list[dict[str, Any]]:
        """Every object of ``res`` (a consistent read); a kind whose CRD is absent is empty."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                page = self.kube.list(res, limit=500, continue_token=token, **params)
            except ApiError as exc:
                if exc.status == 404:
                    return []
                raise
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    def policy_objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for res in POLICY_RESOURCES:
            out.extend(self.list_all(res))
        return out

    def queue_workloads(self, queue: str) -> list[str]:
        """PodGroups charged to ``queue`` and its pods that have not finished (``Kind/ns/name``)."""
        found = []
        for pg in self.list_all(PODGROUPS):
            if (pg.get("spec") or {}).get("queue") == queue:
                md = pg["metadata"]
                found.append(f"PodGroup/{md.get('namespace')}/{md.get('name')}")
        for pod in self.list_all(PODS, label_selector=f"kai.scheduler/queue={queue}"):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            md = pod["metadata"]
            found.append(f"Pod/{md.get('namespace')}/{md.get('name')}")
        return found

    # -- cached reads (the pod path) -------------------------------------------------------
    def _items(self, name: str) -> list[dict[str, Any]]:
        informer = self.informers.informers.get(name)
        return informer.items() if informer is not None else []

    def _snapshot(self) -> tuple[dict[str, QueueInfo], NamespaceQueues]:
        generations = tuple(i.generation for i in self.informers.informers.values())
        cached = self._cached
        if cached is not None and cached[0] == generations:
            return cached[1], cached[2]
        with self._lock:
            trees, queues = self._items("queuetrees"), self._items("queues")
            index = queue_index(trees, queues)
            merged = from_cluster(trees, queues)  # the pod-grouper's resolver too
            self._cached = (generations, index, merged)
            return index, merged

    def queues(self, fresh: bool = False) -> dict[str, QueueInfo]:
        if fresh:
            return queue_index(self.list_all(QUEUE_TREES), self.list_all(QUEUES))
        return self._snapshot()[0]

    def namespace_queues(self) -> NamespaceQueues:
        return self._snapshot()[1]

    def topology_levels(
        self, name: str, fresh: bool = False
    ) -> list[tuple[str, str | None]] | None:
        """The (nodeLabel, alias) levels of the Topology or TopologyPolicy ``name``, or None."""
        if fresh:
            candidates = self.list_all(TOPOLOGIES) + self.list_all(TOPOLOGY_POLICIES)
        else:
            candidates = self._items("topologies") + self._items("topologypolicies")
        for obj in candidates:
            if (obj.get("metadata") or {}).get("name") != name:
                continue
            levels = (obj.get("spec") or {}).get("levels") or []
            return [
                (str(level.get("nodeLabel")), level.get("alias"))
                for level in levels
                if isinstance(level, dict)
            ]
        return None
