"""Node readiness (Kubernetes NodeReady / NodeUnschedulable): a node that is not Ready, or that
is cordoned (``spec.unschedulable``), takes no new task."""

from __future__ import annotations

from kai.scheduler.framework import FilterMasks, NodeFilter, NodeView
from kai.scheduler.predicates import NOT_READY, UNSCHEDULABLE
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    return ((NOT_READY, view.nodes.ready), (UNSCHEDULABLE, view.nodes.schedulable))


NODE_READINESS = NodeFilter("node-readiness", (NOT_READY, UNSCHEDULABLE), _masks)
