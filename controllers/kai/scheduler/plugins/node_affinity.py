"""Node selector and required node affinity (Kubernetes NodeAffinity): every selector label
equal, and at least one required term whose requirements all hold."""

from __future__ import annotations

from collections.abc import Hashable

from kai.scheduler.framework import FilterMasks, NodeFilter, NodeView
from kai.scheduler.predicates import NODE_AFFINITY, affinity_mask
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    mask = affinity_mask(view.labels, spec.node_selector, spec.node_affinity, len(view.nodes))
    return ((NODE_AFFINITY, mask),)


def _key(spec: TaskSpec) -> Hashable:
    return (tuple(sorted(spec.node_selector.items())), spec.node_affinity)


NODE_AFFINITY_FILTER = NodeFilter("node-affinity", (NODE_AFFINITY,), _masks, class_key=_key)
