"""Knative Serving (serving.knative.dev): a gang per Revision.

The chain is pod -> ReplicaSet -> Deployment -> Revision -> Configuration -> Service.
"""

from __future__ import annotations

from kai.reconcilers.grouping.base import INFERENCE, Chain, Plan, annotations_of, count, dig
from kai.reconcilers.grouping.registry import default_plan, register

MIN_SCALE = "autoscaling.knative.dev/min-scale"
LEGACY_MIN_SCALE = "autoscaling.knative.dev/minScale"


@register("serving.knative.dev/*", "Service", "Configuration", "Revision")
def knative(chain: Chain) -> Plan:
    """One PodGroup per Revision, minMember = its ``autoscaling.knative.dev/min-scale``
    (default 1); priority inference."""
    top = chain.top
    revision = chain.find("serving.knative.dev", "Revision")
    plan = default_plan(chain, INFERENCE)
    plan.owner = revision if revision is not None else top
    plan.sources = [top] + ([revision] if revision is not None and revision is not top else [])
    plan.sources.append(chain.pod)
    plan.kind_name, plan.kind_group = str(top.get("kind")), "serving.knative.dev"
    values = {
        **annotations_of(dig(top, "spec", "template") or {}),
        **annotations_of(plan.owner),
    }
    raw = values.get(MIN_SCALE, values.get(LEGACY_MIN_SCALE))
    plan.min_member = max(1, count(plan.owner, f"annotation {MIN_SCALE}", raw, 1))
    return plan
