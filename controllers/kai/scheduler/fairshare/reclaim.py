"""Reclaim fairness between queues (KAI-FACTS §4.6): may these victims be taken for that job?

``judge_reclaim`` validates one reclaim scenario against the queue state *as it was when the
job's solution search started* (KAI clones the queues at ``OnJobSolutionStart``): call
``Proportion.clone()`` then, and judge every scenario of that job against the clone while the
live object follows the simulated evictions.

Victims come as *chunks*: KAI groups a victim job's evicted tasks into one chunk per elastic
extra task (tasks beyond ``minAvailable``, each on its own) and one chunk for the gang core;
``victim_chunks`` builds them. Moved (re-placed) tasks are left out by the caller when
consolidating reclaim is allowed.

Algorithm:

1. For each victim queue (in (creation_rank, name) order; KAI iterates a map) find the pair of
   sibling queues just below the lowest common ancestor of the reclaimer's and the victim's
   queues. Before each chunk is taken, one strategy must hold for that pair, where
   ``remaining`` starts at the victim-side sibling's allocated amount and shrinks chunk by
   chunk:

   - *MaintainFairShare*: remaining > allocatable share (min(limit, max(deserved, fair))) in
     at least one resource;
   - *GuaranteeDeservedQuota*: reclaimer-side sibling allocated + request <= deserved in every
     resource, and remaining > deserved in at least one resource.

   Then the chunk is subtracted from the victim queue and all its ancestors.
2. Saturation: at every level from the reclaimer's queue up to its top-level queue, the
   reclaimer-side queue (allocated after the losses above, plus the request) is compared with
   every sibling that lost resources, in each involved resource (those the reclaimer asks for
   or the sibling loses): fail when ``ratioR > 1 and siblingFair > 0 and ratioR * multiplier
   >= ratioS`` with ratio = allocated / fairShare (fair 0: infinite if allocated > 0, else 0).
   A non-preemptible reclaimer must also keep allocatedNonPreemptible + request <= deserved at
   every level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from kai.scheduler.fairshare.proportion import Proportion


@dataclass(frozen=True)
class VictimChunk:
    """Resources taken from a victim leaf queue in one piece.

    ``elastic_extra``: a single task above the victim job's minimum (else the gang core);
    it only changes the wording of a refusal.
    """

    queue: str
    resources: ResourcesLike
    elastic_extra: bool = False


VictimLike = VictimChunk | tuple[str, ResourcesLike] | tuple[str, ResourcesLike, bool]


@dataclass(frozen=True)
class ReclaimVerdict:
    ok: bool
    message: str


def victim_chunks(
    queue: str, task_resources: Sequence[ResourcesLike], min_available: int
) -> list[VictimChunk]:
    """KAI's chunking of one victim job: ``task_resources`` are the evicted tasks in the job's
    task order; those from index ``min_available`` on are elastic extras, one chunk each, and
    come first; the first ``min_available`` form the core chunk."""
    if min_available >= len(task_resources):
        core, extras = list(task_resources), []
    else:
        core, extras = list(task_resources[:min_available]), list(task_resources[min_available:])
    chunks = [VictimChunk(queue, to_vector(t), True) for t in extras]
    if core:
        total = [0.0, 0.0, 0.0]
        for t in core:
            v = to_vector(t)
            total = [total[0] + v[0], total[1] + v[1], total[2] + v[2]]
        chunks.append(VictimChunk(queue, (total[0], total[1], total[2]), False))
    return chunks


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
    """The two queues just below the lowest common ancestor (or the deepest common pair)."""
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


def judge_reclaim(
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
            remaining[side_v] = list(p._get(p._alloc, side_v))
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
                    f"share ({_vec_text(p._allocatable[side_v])}), and the reclaimer side is "
                    f"not within its quota while the victim side is above its own",
                )
            for a in ancestors:
                if a not in remaining:
                    remaining[a] = list(p._get(p._alloc, a))
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
            base = list(p._get(p._alloc, level))
        mine = (base[0] + req[0], base[1] + req[1], base[2] + req[2])
        fair_r = p._fair[level]
        for sib in sorted(remaining):
            if sib == level or tree.parents[sib] != tree.parents[level]:
                continue
            theirs = remaining[sib]
            fair_s = p._fair[sib]
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
            alloc_np = p._get(p._alloc_np, level)
            with_job = (alloc_np[0] + req[0], alloc_np[1] + req[1], alloc_np[2] + req[2])
            if not all_leq_unlimited(with_job, p._deserved[level]):
                if not explain:
                    return _REFUSED
                return ReclaimVerdict(
                    False,
                    f"non-preemptible job would take queue '{names[level]}' over its quota: "
                    f"non-preemptible allocated with the job {_vec_text(with_job)}, quota "
                    f"{_vec_text(p._deserved[level])}",
                )
    return ReclaimVerdict(
        True, "reclaim keeps every queue within the fairness rules" if explain else ""
    )


@dataclass(frozen=True)
class FairSet:
    """Step 1 of ``judge_reclaim`` done for a victim set judged fair, kept so that the set
    grown by one chunk is judged in O(queues) instead of O(set) (reclaim's second pass judges
    each candidate with every unit taken before it). ``last``: the highest victim queue index
    in the set (-1: empty); a chunk of a lower queue would come earlier in the judge's
    iteration order, so the grown set must then be judged from scratch (``fair_set``)."""

    last: int
    remaining: dict[int, list[float]]
    involved: dict[int, set[int]]


EMPTY_FAIR_SET = FairSet(-1, {}, {})


def can_grow(p: Proportion, base: FairSet, victim_queue: str) -> bool:
    """May ``grow_fair_set`` add a chunk of ``victim_queue`` to ``base``?"""
    return p.tree.lookup(victim_queue) >= base.last


def grow_fair_set(
    p: Proportion,
    reclaimer_queue: str,
    reclaimer_request: ResourcesLike,
    base: FairSet,
    victim: VictimLike,
    reclaimer_preemptible: bool = True,
) -> FairSet | None:
    """``base`` (a fair set) with ``victim`` added, or None if that set is not fair: the
    verdict ``judge_reclaim`` gives the base's chunks followed by ``victim`` (check
    ``can_grow`` first). Exact: the queue sums are the same subtractions in the same order."""
    if not p.enabled:
        return None
    chunk = _normalise(victim)
    vq = p.tree.lookup(chunk.queue)
    if vq < base.last:
        raise ValueError("grow_fair_set: the chunk's queue comes before the set's last queue")
    remaining = {k: list(v) for k, v in base.remaining.items()}
    involved = {k: set(v) for k, v in base.involved.items()}
    rq = p.tree.lookup(reclaimer_queue)
    req = to_vector(reclaimer_request)
    if not _take(p, rq, req, remaining, involved, base.last, vq, to_vector(chunk.resources)):
        return None
    if not _saturation(p, rq, req, remaining, involved, reclaimer_preemptible, False).ok:
        return None
    return FairSet(vq, remaining, involved)


def fair_set(
    p: Proportion,
    reclaimer_queue: str,
    reclaimer_request: ResourcesLike,
    victims: Sequence[VictimLike],
    reclaimer_preemptible: bool = True,
) -> FairSet | None:
    """``judge_reclaim``'s verdict on ``victims`` as a ``FairSet`` (None: not fair)."""
    if not p.enabled:
        return None
    tree = p.tree
    rq = tree.lookup(reclaimer_queue)
    req = to_vector(reclaimer_request)
    taken = [(tree.lookup(c.queue), to_vector(c.resources)) for c in map(_normalise, victims)]
    taken.sort(key=lambda item: item[0])  # stable: each queue keeps its own chunk order
    remaining: dict[int, list[float]] = {}
    involved: dict[int, set[int]] = {}
    last = -1
    for vq, v in taken:
        if not _take(p, rq, req, remaining, involved, last, vq, v):
            return None
        last = vq
    if not _saturation(p, rq, req, remaining, involved, reclaimer_preemptible, False).ok:
        return None
    return FairSet(last, remaining, involved)


def _take(
    p: Proportion,
    rq: int,
    req: Vector,
    remaining: dict[int, list[float]],
    involved: dict[int, set[int]],
    last: int,
    vq: int,
    v: Vector,
) -> bool:
    """Step 1 of ``judge_reclaim`` for one more chunk ``v`` of queue ``vq`` (>= ``last``, the
    queue of the chunk before): the strategy check, then the subtraction; in place."""
    side_r, side_v = _leveled(p, rq, vq)
    # judge_reclaim sets a victim queue's involved resources to its own chunks' at the start
    # of the queue's group (dropping what lower queues added if it is their ancestor)
    mine = involved[vq] | _involved(v) if vq == last else _involved(v)
    involved[vq] = mine
    if side_v not in remaining:
        remaining[side_v] = list(p._get(p._alloc, side_v))
    if not _fits_strategy(p, req, side_r, side_v, remaining[side_v]):
        return False
    ancestors = p.tree.ancestors[vq]
    for a in ancestors:
        if a not in remaining:
            remaining[a] = list(p._get(p._alloc, a))
        rem = remaining[a]
        rem[0] -= v[0]
        rem[1] -= v[1]
        rem[2] -= v[2]
    for a in ancestors:
        involved.setdefault(a, set()).update(mine)
    return True


def _fits_strategy(
    p: Proportion, req: Vector, side_r: int, side_v: int, left: Sequence[float]
) -> bool:
    # MaintainFairShare: the victim side is above its allocatable share somewhere.
    if not all_leq_unlimited(left, p._allocatable[side_v]):
        return True
    # GuaranteeDeservedQuota: the reclaimer side stays within quota, the victim side is above.
    alloc_r = p._get(p._alloc, side_r)
    with_job = (alloc_r[0] + req[0], alloc_r[1] + req[1], alloc_r[2] + req[2])
    return all_leq_unlimited(with_job, p._deserved[side_r]) and not all_leq_unlimited(
        left, p._deserved[side_v]
    )
