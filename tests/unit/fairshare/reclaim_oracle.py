"""The reclaim fairness rules written the plain way, for tests only: an oracle for
``kai.scheduler.fairshare.ReclaimJudge``.

This is the from-scratch judgement the scheduler used before the incremental judge became the
only one: for each victim queue in index order, each chunk in the given order, check a strategy
for the sibling pair below the lowest common ancestor on what the victim side still has, then
subtract the chunk along the victim's ancestors; then the saturation rule at every level of
the reclaimer. It reads only ``Proportion``'s public API. Kept verbatim (messages included) so
that the property tests can compare verdicts and refusal texts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kai.scheduler.fairshare import Proportion, ReclaimVerdict, VictimChunk
from kai.scheduler.fairshare.reclaim import VictimLike
from kai.scheduler.fairshare.resources import (
    EPS,
    RESOURCE_INDEXES,
    ResourcesLike,
    Vector,
    all_leq_unlimited,
    describe,
    resource_name,
    to_vector,
)
from kai.scheduler.snapshot import UNLIMITED

_REFUSED = ReclaimVerdict(False, "")


def _normalise(victim: VictimLike) -> VictimChunk:
    if isinstance(victim, VictimChunk):
        return victim
    if len(victim) == 2:
        return VictimChunk(victim[0], victim[1])
    return VictimChunk(victim[0], victim[1], bool(victim[2]))


def _involved(v: Vector) -> set[int]:
    return {k for k in RESOURCE_INDEXES if v[k] > 0}


def _leveled(p: Proportion, reclaimer: int, victim: int) -> tuple[int, int]:
    path_r = p.tree.ancestors[reclaimer][::-1]
    path_v = p.tree.ancestors[victim][::-1]
    pair = (path_r[0], path_v[0])
    for a, b in zip(path_r, path_v, strict=False):
        pair = (a, b)
        if a != b:
            break
    return pair


def _ratio(allocated: float, fair: float) -> float:
    if fair == UNLIMITED:
        return 0.0
    if fair == 0:
        return math.inf if allocated > EPS else 0.0
    return allocated / fair


def _vec_text(v: Sequence[float]) -> str:
    return ", ".join(f"{resource_name(k)} {describe(k, v[k])}" for k in RESOURCE_INDEXES)


def _fits_strategy(
    p: Proportion, req: Vector, side_r: int, side_v: int, left: Sequence[float]
) -> bool:
    if not all_leq_unlimited(left, p.allocatable_share_at(side_v)):
        return True
    alloc_r = p.allocated_at(side_r)
    with_job = (alloc_r[0] + req[0], alloc_r[1] + req[1], alloc_r[2] + req[2])
    return all_leq_unlimited(with_job, p.deserved_at(side_r)) and not all_leq_unlimited(
        left, p.deserved_at(side_v)
    )


def oracle_verdict(
    p: Proportion,
    reclaimer_queue: str,
    reclaimer_request: ResourcesLike,
    victims: Sequence[VictimLike],
    reclaimer_preemptible: bool = True,
    *,
    explain: bool = True,
) -> ReclaimVerdict:
    """Is taking ``victims`` for a job of ``reclaimer_queue`` asking ``reclaimer_request`` fair?

    ``explain=False``: the same verdict with an empty message (the searches only need ``ok``).
    """
    if not p.enabled:
        return ReclaimVerdict(False, "queue fairness (proportion) is disabled: no reclaim")
    tree = p.tree
    names = tree.names
    rq = tree.lookup(reclaimer_queue)
    req = to_vector(reclaimer_request)
    groups: dict[int, list[tuple[Vector, bool]]] = {}
    lookup = tree.lookup
    for victim in victims:
        chunk = victim if type(victim) is VictimChunk else _normalise(victim)
        resources = chunk.resources
        if type(resources) is not tuple or len(resources) != 3:
            resources = to_vector(resources)
        groups.setdefault(lookup(chunk.queue), []).append((resources, chunk.elastic_extra))

    remaining: dict[int, list[float]] = {}
    involved: dict[int, set[int]] = {}
    for vq in sorted(groups):
        side_r, side_v = _leveled(p, rq, vq)
        involved[vq] = set().union(*(_involved(v) for v, _ in groups[vq]))
        if side_v not in remaining:
            remaining[side_v] = list(p.allocated_at(side_v))
        left = remaining[side_v]
        ancestors = tree.ancestors[vq]
        for v, elastic in groups[vq]:
            if not _fits_strategy(p, req, side_r, side_v, left):
                if not explain:
                    return _REFUSED
                what = "an elastic extra task" if elastic else "a gang"
                return ReclaimVerdict(
                    False,
                    f"queue '{names[side_v]}' may not lose {what} of queue '{names[vq]}' "
                    f"({_vec_text(v)}) to queue '{names[side_r]}': it would keep only "
                    f"{_vec_text(left)} before the loss, which is not above its allocatable "
                    f"share ({_vec_text(p.allocatable_share_at(side_v))}), and the reclaimer "
                    f"side is not within its quota while the victim side is above its own",
                )
            for a in ancestors:
                if a not in remaining:
                    remaining[a] = list(p.allocated_at(a))
                rem = remaining[a]
                rem[0] -= v[0]
                rem[1] -= v[1]
                rem[2] -= v[2]
        # set union is idempotent: once per victim queue is the same as once per chunk
        mine_involved = involved[vq]
        for a in ancestors:
            involved.setdefault(a, set()).update(mine_involved)

    return _saturation(p, rq, req, remaining, involved, reclaimer_preemptible, explain)


def _saturation(
    p: Proportion,
    rq: int,
    req: Vector,
    remaining: dict[int, list[float]],
    involved: dict[int, set[int]],
    reclaimer_preemptible: bool,
    explain: bool,
) -> ReclaimVerdict:
    """Step 2 of ``judge_reclaim`` on what step 1 left of the victim side."""
    tree = p.tree
    names = tree.names
    req_involved = _involved(req)
    mult = p.reclaimer_saturation_multiplier
    for level in tree.ancestors[rq]:
        base = remaining.get(level)
        if base is None:
            base = list(p.allocated_at(level))
        mine = (base[0] + req[0], base[1] + req[1], base[2] + req[2])
        fair_r = p.fair_share_at(level)
        for sib in sorted(remaining):
            if sib == level or tree.parents[sib] != tree.parents[level]:
                continue
            theirs = remaining[sib]
            fair_s = p.fair_share_at(sib)
            for k in sorted(involved.get(sib, set()) | req_involved):
                if fair_r[k] == UNLIMITED and fair_s[k] == UNLIMITED:
                    continue
                ratio_r = _ratio(mine[k], fair_r[k])
                ratio_s = _ratio(theirs[k], fair_s[k])
                if ratio_r > 1 + EPS and fair_s[k] > 0 and ratio_r * mult >= ratio_s - EPS:
                    if not explain:
                        return _REFUSED
                    return ReclaimVerdict(
                        False,
                        f"queue '{names[level]}' would be more saturated in {resource_name(k)} "
                        f"than queue '{names[sib]}' it takes from: allocated/fair share "
                        f"{ratio_r:.4g} (x{mult:g}) vs {ratio_s:.4g}",
                    )
        if not reclaimer_preemptible:
            alloc_np = p.allocated_non_preemptible_at(level)
            with_job = (alloc_np[0] + req[0], alloc_np[1] + req[1], alloc_np[2] + req[2])
            if not all_leq_unlimited(with_job, p.deserved_at(level)):
                if not explain:
                    return _REFUSED
                return ReclaimVerdict(
                    False,
                    f"non-preemptible job would take queue '{names[level]}' over its quota: "
                    f"non-preemptible allocated with the job {_vec_text(with_job)}, quota "
                    f"{_vec_text(p.deserved_at(level))}",
                )
    return ReclaimVerdict(
        True, "reclaim keeps every queue within the fairness rules" if explain else ""
    )
