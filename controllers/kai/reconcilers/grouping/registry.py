"""The groupers, keyed by the top owner's apiVersion and kind (exact version first, then any
version of the group), and :func:`plan_for`, which picks one for a pod's owner chain."""

from __future__ import annotations

from collections.abc import Callable

from kai.reconcilers.grouping.base import TRAIN, Chain, Plan, group_of

Grouper = Callable[[Chain], Plan]

#: (group, version or "*", kind) -> grouper
REGISTRY: dict[tuple[str, str, str], Grouper] = {}


def register(api_version: str, *kinds: str) -> Callable[[Grouper], Grouper]:
    """Register a grouper for ``kinds`` of ``api_version`` (``group/*`` = every version)."""
    group, _, version = api_version.rpartition("/")

    def add(grouper: Grouper) -> Grouper:
        for kind in kinds:
            REGISTRY[(group, version, kind)] = grouper
        return grouper

    return add


def lookup(api_version: str, kind: str) -> Grouper | None:
    group, _, version = api_version.rpartition("/")
    return REGISTRY.get((group, version, kind)) or REGISTRY.get((group, "*", kind))


def default_plan(chain: Chain, default_priority: str = TRAIN) -> Plan:
    """One PodGroup for the whole top owner, minMember 1."""
    top = chain.top
    return Plan(
        owner=top,
        default_priority=default_priority,
        kind_name=str(top.get("kind") or "Pod"),
        kind_group=group_of(top),
        sources=[top, chain.pod] if top is not chain.pod else [chain.pod],
    )


def plan_for(chain: Chain) -> Plan:
    """How the chain's pod is grouped, by its top owner's grouper."""
    top = chain.top
    grouper = lookup(str(top.get("apiVersion") or "v1"), str(top.get("kind") or "Pod"))
    if grouper is not None:
        return grouper(chain)
    plan = default_plan(chain)
    plan.unknown_kind = f"{top.get('apiVersion')}/{top.get('kind')}"
    return plan


def skip_top_owner(chain: Chain) -> Plan:
    """Group by the next owner down (the pod itself at the bottom), the skipped owner's
    labels and annotations still counting first."""
    top = chain.top
    inner = chain.below(top)
    plan = plan_for(inner)
    plan.sources = [top, *(plan.sources or [inner.top, chain.pod])]
    return plan
