"""Which queue a workload goes to: its queue label, else its namespace's queue, else the default.

A QueueTree leaf may list ``namespaces``: workloads created there without a queue label run in
that leaf. The mapping can be read from two places, and both give the same answer once the
controller has applied the trees:

- the QueueTree documents themselves (:func:`from_queue_trees`), e.g. an admission webhook
  that wants the mapping before any Queue exists;
- the Queues the controller produced (:func:`from_queues`), which carry the bound namespaces in
  the annotation ``gitops.kai.scheduler/namespaces`` (comma-separated). This follows the last
  good state the controller applied, so a namespace never points at a queue that does not
  exist yet.

When two sources bind the same namespace (which ``kai validate`` refuses, but objects in a
cluster may still disagree), the older object wins (creationTimestamp, then kind/name) and the
conflict is reported in :attr:`NamespaceQueues.conflicts`; the answer does not depend on the
order in which the objects are given.

:func:`resolve_queue` is the one precedence rule used by the pod-grouper and the mutating
webhook: ``kai.scheduler/queue`` label of the top owner, then of the pod; then the legacy
``project`` label (owner, then pod); then the namespace binding; then ``default-queue``.

Pure functions over plain dicts (API objects as JSON): no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_QUEUE",
    "NAMESPACES_ANNOTATION",
    "PROJECT_LABEL",
    "QUEUE_LABEL",
    "NamespaceBinding",
    "NamespaceQueues",
    "from_cluster",
    "from_queue_trees",
    "from_queues",
    "resolve_queue",
]

QUEUE_LABEL = "kai.scheduler/queue"
PROJECT_LABEL = "project"
DEFAULT_QUEUE = "default-queue"
NAMESPACES_ANNOTATION = "gitops.kai.scheduler/namespaces"


@dataclass(frozen=True)
class NamespaceBinding:
    """One namespace bound to one leaf queue by one object (``source``: ``Kind/name``)."""

    namespace: str
    queue: str
    source: str


@dataclass(frozen=True)
class NamespaceQueues:
    """namespace -> leaf queue, plus the bindings refused because an older object won."""

    bindings: Mapping[str, NamespaceBinding] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()

    def queue_for(self, namespace: str) -> str | None:
        """The queue bound to ``namespace``, None when it is not bound."""
        binding = self.bindings.get(namespace)
        return binding.queue if binding is not None else None

    def as_dict(self) -> dict[str, str]:
        """namespace -> queue, sorted by namespace."""
        return {ns: self.bindings[ns].queue for ns in sorted(self.bindings)}


def _age_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    md = obj.get("metadata") or {}
    # An object not stored yet (no creationTimestamp) counts as the newest.
    return (
        str(md.get("creationTimestamp") or "~"),
        str(obj.get("kind") or ""),
        str(md.get("name")),
    )


def _collect(candidates: list[tuple[tuple[str, str, str], NamespaceBinding]]) -> NamespaceQueues:
    bindings: dict[str, NamespaceBinding] = {}
    conflicts: list[str] = []
    for _key, binding in sorted(candidates, key=lambda c: (c[0], c[1].namespace, c[1].queue)):
        first = bindings.get(binding.namespace)
        if first is None:
            bindings[binding.namespace] = binding
        elif first.queue != binding.queue:
            conflicts.append(
                f"namespace {binding.namespace!r}: {binding.source} binds it to queue "
                f"{binding.queue!r}, but the older {first.source} binds it to "
                f"{first.queue!r}; the older binding is used"
            )
    return NamespaceQueues(dict(sorted(bindings.items())), tuple(conflicts))


def _tree_leaves(items: Iterable[Any]) -> Iterable[tuple[str, list[str]]]:
    for item in items:
        if not isinstance(item, Mapping):
            continue
        children = item.get("children") or []
        if children:
            yield from _tree_leaves(children)
        namespaces = item.get("namespaces") or []
        if isinstance(item.get("name"), str) and isinstance(namespaces, list):
            yield item["name"], [ns for ns in namespaces if isinstance(ns, str)]


def from_queue_trees(trees: Iterable[Mapping[str, Any]]) -> NamespaceQueues:
    """The bindings written in QueueTree objects (``spec.queues[...].namespaces``)."""
    candidates = []
    for tree in trees:
        spec = tree.get("spec") or {}
        source = f"QueueTree/{(tree.get('metadata') or {}).get('name')}"
        key = _age_key(tree)
        for queue, namespaces in _tree_leaves(spec.get("queues") or []):
            for namespace in namespaces:
                candidates.append((key, NamespaceBinding(namespace, queue, source)))
    return _collect(candidates)


def from_queues(queues: Iterable[Mapping[str, Any]]) -> NamespaceQueues:
    """The bindings recorded on Queues in the ``gitops.kai.scheduler/namespaces`` annotation."""
    candidates = []
    for queue in queues:
        md = queue.get("metadata") or {}
        raw = (md.get("annotations") or {}).get(NAMESPACES_ANNOTATION)
        if not isinstance(raw, str) or not md.get("name"):
            continue
        source = f"Queue/{md['name']}"
        key = _age_key(queue)
        for namespace in raw.split(","):
            if namespace.strip():
                candidates.append((key, NamespaceBinding(namespace.strip(), md["name"], source)))
    return _collect(candidates)


def from_cluster(
    trees: Iterable[Mapping[str, Any]], queues: Iterable[Mapping[str, Any]]
) -> NamespaceQueues:
    """The bindings the cluster holds: those of the Queues (compiled by ``kai controller``),
    overridden by those of the QueueTree documents (newer: the controller may not have compiled
    them yet). The pod-grouper and the mutating webhook both resolve with this."""
    by_queues = from_queues(queues).bindings
    by_trees = from_queue_trees(trees).bindings
    return NamespaceQueues(dict(sorted({**by_queues, **by_trees}.items())))


def resolve_queue(
    namespace: str,
    pod_labels: Mapping[str, str],
    owner_labels: Mapping[str, str] | None = None,
    namespaces: NamespaceQueues | None = None,
    *,
    queue_label: str = QUEUE_LABEL,
    default_queue: str = DEFAULT_QUEUE,
) -> str:
    """The queue of a workload: explicit labels first, then the namespace, then the default.

    ``owner_labels`` are the top owner's labels (None for a bare pod); ``queue_label`` is the
    configurable queue label key (KAI's ``Config`` ``global.queueLabelKey``).
    """
    owner = owner_labels or {}
    return (
        owner.get(queue_label)
        or pod_labels.get(queue_label)
        or owner.get(PROJECT_LABEL)
        or pod_labels.get(PROJECT_LABEL)
        or (namespaces.queue_for(namespace) if namespaces is not None else None)
        or default_queue
    )
