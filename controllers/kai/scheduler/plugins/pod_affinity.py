"""Required pod affinity and anti-affinity (Kubernetes InterPodAffinity, required terms): a task
filter, since its masks depend on where the matching tasks are placed (see
:mod:`kai.scheduler.pod_affinity` for the rules and the index of placed pods)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.framework import FilterMasks, TaskFilter
from kai.scheduler.pod_affinity import affinity_masks
from kai.scheduler.predicates import POD_AFFINITY, POD_ANTI_AFFINITY

if TYPE_CHECKING:
    from kai.scheduler.jobs import TaskInfo
    from kai.scheduler.session import Session


def _active(session: Session) -> bool:
    return session.uses_pod_affinity


def _masks(session: Session, task: TaskInfo) -> FilterMasks:
    spec = task.spec
    placed = session.placed_pods
    if not (spec.pod_affinity or spec.pod_anti_affinity or placed.any_anti_affinity()):
        return ()  # no terms of its own and no placed task with an anti-affinity term
    affinity, anti = affinity_masks(spec, placed, session.nodes.labels)
    return ((POD_AFFINITY, affinity), (POD_ANTI_AFFINITY, anti))


POD_AFFINITY_FILTER = TaskFilter("pod-affinity", (POD_AFFINITY, POD_ANTI_AFFINITY), _active, _masks)
