"""Per-kind grouping for the pod-grouper: which PodGroup a pod belongs to, decided by its top
owner's kind (see docs/workloads.md for every kind).

``plan_for(chain)`` picks the grouper registered for the top owner's apiVersion and kind
(:mod:`.registry`); ``manifest(chain, plan, settings)`` builds the PodGroup (:mod:`.base`).
Each family lives in its own module and registers its groupers on import.
"""

from __future__ import annotations

from kai.reconcilers.grouping import (  # noqa: F401  (register their groupers)
    argo,
    jobset,
    knative,
    kubeflow,
    lws,
    ray,
    workloads,
)
from kai.reconcilers.grouping.base import (
    Chain,
    GroupingError,
    KindDefault,
    Plan,
    Settings,
    manifest,
    parse_default_priorities,
)
from kai.reconcilers.grouping.registry import REGISTRY, lookup, plan_for

__all__ = [
    "REGISTRY",
    "Chain",
    "GroupingError",
    "KindDefault",
    "Plan",
    "Settings",
    "lookup",
    "manifest",
    "parse_default_priorities",
    "plan_for",
]
