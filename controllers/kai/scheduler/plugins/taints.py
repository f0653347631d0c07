"""Taints and tolerations (Kubernetes TaintToleration): a ``NoSchedule`` or ``NoExecute`` taint
keeps out every task that does not tolerate it."""

from __future__ import annotations

from collections.abc import Hashable

from kai.scheduler.framework import FilterMasks, NodeFilter, NodeView
from kai.scheduler.predicates import TAINT, taint_mask
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    return ((TAINT, taint_mask(view.nodes, spec.tolerations)),)


def _key(spec: TaskSpec) -> Hashable:
    return spec.tolerations


TAINTS = NodeFilter("taints", (TAINT,), _masks, class_key=_key)
