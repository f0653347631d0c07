"""Capacity policy: may a job enter its queue?

Checked at the job's queue and every ancestor: first ``OverLimit`` over the whole chain
(``limit < allocated + request`` in a resource with a non-zero request and a limit), then, for
non-preemptible jobs, ``NonPreemptibleOverQuota`` (``deserved < allocatedNonPreemptible +
request`` where deserved is not -1). Comparisons allow ``EPS`` of float drift.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import CHECK_ORDER, EPS, Vector, describe, resource_name
from kai.scheduler.result import Reason
from kai.scheduler.snapshot import UNLIMITED

if TYPE_CHECKING:
    from kai.scheduler.fairshare.proportion import Proportion

OVER_LIMIT = "OverLimit"
NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"


def over_limit(p: Proportion, leaf: int, r: Vector) -> Reason | None:
    """First OverLimit violation on the chain from ``leaf`` up, resources in KAI's order."""
    for q in p.tree.ancestors[leaf]:
        lim = p.limit_at(q)
        for k in CHECK_ORDER:
            if lim[k] == UNLIMITED or r[k] == 0:
                continue
            have = p.allocated_at(q)[k]
            if lim[k] < have + r[k] - EPS:
                name = p.tree.names[q]
                return Reason(
                    code=OVER_LIMIT,
                    message=(
                        f"queue '{name}' would exceed its {resource_name(k)} limit: limit "
                        f"{describe(k, lim[k])}, allocated {describe(k, have)}, the job "
                        f"requests {describe(k, r[k])}"
                    ),
                    details=_details(p, q, k, r, limit=lim[k], allocated=have),
                )
    return None


def non_preemptible_over_quota(p: Proportion, leaf: int, r: Vector) -> Reason | None:
    """First NonPreemptibleOverQuota violation on the chain from ``leaf`` up."""
    for q in p.tree.ancestors[leaf]:
        des = p.deserved_at(q)
        for k in CHECK_ORDER:
            if des[k] == UNLIMITED or r[k] == 0:
                continue
            have = p.allocated_non_preemptible_at(q)[k]
            if des[k] < have + r[k] - EPS:
                name = p.tree.names[q]
                return Reason(
                    code=NON_PREEMPTIBLE_OVER_QUOTA,
                    message=(
                        f"non-preemptible job would take queue '{name}' over its "
                        f"{resource_name(k)} quota: quota {describe(k, des[k])}, allocated "
                        f"to non-preemptible jobs {describe(k, have)}, the job requests "
                        f"{describe(k, r[k])}"
                    ),
                    details=_details(p, q, k, r, quota=des[k], allocated_non_preemptible=have),
                )
    return None


def _details(p: Proportion, q: int, k: int, r: Vector, **figures: float) -> dict[str, object]:
    return {
        "queue": p.tree.names[q],
        "resource": resource_name(k),
        **figures,
        "requested": r[k],
    }
