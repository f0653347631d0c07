"""Reclaim fairness between queues: may these victims be taken for that job?

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
from dataclasses import dataclass, field
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


def saturation_ratio(allocated: float, fair: float) -> float:
    """allocated / fair share as the saturation rule reads it (fair 0: infinite when something
    is allocated, else 0; unlimited: 0)."""
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
                ratio_r = saturation_ratio(mine[k], fair_r[k])
                ratio_s = saturation_ratio(theirs[k], fair_s[k])
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


#: multiples of 1/d (d a power of two) below 2**53/d in magnitude are exact floats, and so are
#: their sums and differences within that bound
_EXACT_LIMIT = 2**53


@dataclass(frozen=True)
class FairSet:
    """Step 1 of ``judge_reclaim`` done for a victim set judged fair, kept so that the set
    grown by one chunk is judged in O(queues) instead of O(set) (reclaim's second pass judges
    each candidate with every unit taken before it).

    ``last``: the highest victim queue index in the set (-1: empty). ``tails``: per victim-side
    queue, the queue and vector of its chunk judged last (the judge's iteration order: by
    victim queue, then in order). A chunk of a queue below ``last`` lands in the middle of
    that order; it is judged without starting over only when the set is ``exact``: leaf victim
    queues only, non-negative integer vectors and sums below 2**53, so that the remaining
    amounts do not depend on the order of the subtractions and, the strategy check being
    monotone in what remains, the chunks of one victim side all pass iff the one judged last
    does (see ``grow_fair_set``)."""

    last: int
    remaining: dict[int, list[float]]
    involved: dict[int, set[int]]
    tails: dict[int, tuple[int, Vector]]
    exact: bool = field(default=True, compare=False)
    #: bounds while ``exact``: the largest allocated amount met, the sum of chunk maxima
    #: per resource: the largest denominator (a power of two) of the amounts met, the largest
    #: allocated amount met (rounded up) and the sum of the chunks (rounded up)
    denominators: tuple[int, int, int] = field(default=(1, 1, 1), compare=False)
    allocated_bound: tuple[int, int, int] = field(default=(0, 0, 0), compare=False)
    taken_bound: tuple[int, int, int] = field(default=(0, 0, 0), compare=False)


EMPTY_FAIR_SET = FairSet(-1, {}, {}, {})


class NotGrowable(Exception):
    """``grow_fair_set`` cannot judge this chunk from the base: judge the set from scratch."""


def can_grow(p: Proportion, base: FairSet, victim_queue: str) -> bool:
    """Might ``grow_fair_set`` add a chunk of ``victim_queue`` to ``base``? (If not, or if it
    raises ``NotGrowable``, judge the grown set from scratch with ``fair_set``.)"""
    vq = p.tree.lookup(victim_queue)
    return vq >= base.last or (base.exact and not p.tree.children[vq])


def grow_fair_set(
    p: Proportion,
    reclaimer_queue: str,
    reclaimer_request: ResourcesLike,
    base: FairSet,
    victim: VictimLike,
    reclaimer_preemptible: bool = True,
) -> FairSet | None:
    """``base`` (a fair set) with ``victim`` added, or None if that set is not fair: the
    verdict ``judge_reclaim`` gives the base's chunks with ``victim`` added (check
    ``can_grow`` first). Exact: in order, the queue sums are the same subtractions in the
    same order; out of order, every amount involved is an exact integer."""
    if not p.enabled:
        return None
    return _grow(p, reclaimer_queue, reclaimer_request, base, victim, reclaimer_preemptible)


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
    chunks = list(map(_normalise, victims))
    lookup = p.tree.lookup
    chunks.sort(key=lambda c: lookup(c.queue))  # stable: each queue keeps its chunk order
    if not chunks:
        rq = lookup(reclaimer_queue)
        req = to_vector(reclaimer_request)
        if not _saturation(p, rq, req, {}, {}, reclaimer_preemptible, False).ok:
            return None
        return EMPTY_FAIR_SET
    state: FairSet | None = EMPTY_FAIR_SET
    for i, chunk in enumerate(chunks):
        assert state is not None
        saturation = i == len(chunks) - 1  # judged once, on the whole set
        state = _grow(
            p, reclaimer_queue, reclaimer_request, state, chunk, reclaimer_preemptible, saturation
        )
        if state is None:
            return None
    return state


def _grow(
    p: Proportion,
    reclaimer_queue: str,
    reclaimer_request: ResourcesLike,
    base: FairSet,
    victim: VictimLike,
    reclaimer_preemptible: bool,
    saturation: bool = True,
) -> FairSet | None:
    tree = p.tree
    chunk = _normalise(victim)
    vq = tree.lookup(chunk.queue)
    v = to_vector(chunk.resources)
    in_order = vq >= base.last
    leaf = not tree.children[vq]
    if not in_order and not (base.exact and leaf):
        raise NotGrowable("the chunk's queue comes before the set's last queue")
    remaining = {k: list(x) for k, x in base.remaining.items()}
    involved = {k: set(x) for k, x in base.involved.items()}
    tails = dict(base.tails)
    rq = tree.lookup(reclaimer_queue)
    req = to_vector(reclaimer_request)
    ancestors = tree.ancestors[vq]
    exact = base.exact and leaf and min(v) >= 0
    dens, alloc_b, taken_b = base.denominators, base.allocated_bound, base.taken_bound
    if exact:
        dens, taken_b = _widen(dens, taken_b, v, add=True)
        for a in ancestors:
            if a not in remaining:
                dens, alloc_b = _widen(dens, alloc_b, p.allocated_at(a), add=False)
        exact = all((alloc_b[k] + taken_b[k]) * dens[k] < _EXACT_LIMIT for k in RESOURCE_INDEXES)
    if in_order:
        if not _take(p, rq, req, remaining, involved, tails, base.last, vq, v):
            return None
    else:
        if not exact:
            raise NotGrowable("a chunk out of queue order needs exact integer amounts")
        side_r, side_v = _leveled(p, rq, vq)
        mine = involved.get(vq, set()) | _involved(v)
        involved[vq] = mine
        tail = tails.get(side_v)
        if tail is None or vq >= tail[0]:
            tails[side_v] = tail = (vq, v)
        _subtract(p, remaining, involved, ancestors, v, mine)
        # what the side keeps before its chunk judged last: the least any of its checks sees
        left = remaining[side_v]
        last_v = tail[1]
        before_last = (left[0] + last_v[0], left[1] + last_v[1], left[2] + last_v[2])
        if not _fits_strategy(p, req, side_r, side_v, before_last):
            return None
    if (
        saturation
        and not _saturation(p, rq, req, remaining, involved, reclaimer_preemptible, False).ok
    ):
        return None
    return FairSet(max(vq, base.last), remaining, involved, tails, exact, dens, alloc_b, taken_b)


def _widen(
    dens: tuple[int, int, int], bound: tuple[int, int, int], v: Vector, add: bool
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Denominators and bound (summed if ``add``, else the maximum) with the amounts ``v``."""
    new_dens = list(dens)
    new_bound = list(bound)
    for k in RESOURCE_INDEXES:
        x = v[k]
        if not math.isfinite(x):
            return (_EXACT_LIMIT, _EXACT_LIMIT, _EXACT_LIMIT), _triple(new_bound)
        den = x.as_integer_ratio()[1]
        if den > new_dens[k]:
            new_dens[k] = den
        size = math.ceil(abs(x))
        new_bound[k] = new_bound[k] + size if add else max(new_bound[k], size)
    return (new_dens[0], new_dens[1], new_dens[2]), _triple(new_bound)


def _triple(b: list[int]) -> tuple[int, int, int]:
    return (b[0], b[1], b[2])


def _take(
    p: Proportion,
    rq: int,
    req: Vector,
    remaining: dict[int, list[float]],
    involved: dict[int, set[int]],
    tails: dict[int, tuple[int, Vector]],
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
        remaining[side_v] = list(p.allocated_at(side_v))
    if not _fits_strategy(p, req, side_r, side_v, remaining[side_v]):
        return False
    tails[side_v] = (vq, v)
    _subtract(p, remaining, involved, p.tree.ancestors[vq], v, mine)
    return True


def _subtract(
    p: Proportion,
    remaining: dict[int, list[float]],
    involved: dict[int, set[int]],
    ancestors: Sequence[int],
    v: Vector,
    mine: set[int],
) -> None:
    """Take chunk ``v`` off every queue of ``ancestors`` (starting from its allocation the
    first time) and mark the chunk's resources as involved there; in place."""
    for a in ancestors:
        if a not in remaining:
            remaining[a] = list(p.allocated_at(a))
        rem = remaining[a]
        rem[0] -= v[0]
        rem[1] -= v[1]
        rem[2] -= v[2]
        involved.setdefault(a, set()).update(mine)


def _fits_strategy(
    p: Proportion, req: Vector, side_r: int, side_v: int, left: Sequence[float]
) -> bool:
    # MaintainFairShare: the victim side is above its allocatable share somewhere.
    if not all_leq_unlimited(left, p.allocatable_share_at(side_v)):
        return True
    # GuaranteeDeservedQuota: the reclaimer side stays within quota, the victim side is above.
    alloc_r = p.allocated_at(side_r)
    with_job = (alloc_r[0] + req[0], alloc_r[1] + req[1], alloc_r[2] + req[2])
    return all_leq_unlimited(with_job, p.deserved_at(side_r)) and not all_leq_unlimited(
        left, p.deserved_at(side_v)
    )
