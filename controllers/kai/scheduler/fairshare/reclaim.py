"""Reclaim fairness between queues: may these victims be taken for that job?

One judge, :class:`ReclaimJudge`, validates reclaim scenarios against the queue state *as it
was when the job's solution search started* (KAI clones the queues at ``OnJobSolutionStart``):
build it on ``Proportion.clone()`` then, and judge every scenario of that job with it while the
live object follows the simulated evictions. Its rules work chunk by chunk on a
:class:`FairSet` (what step 1 below left of the victim side): ``grow`` adds one chunk to a set
judged fair before, in O(queues); ``judge`` and ``verdict`` fold the same step over a whole
victim list from the empty set (``verdict`` with the refusal as a message, as
``judge_reclaim`` and ``Proportion.judge_reclaim`` show it). There is no second
implementation: the from-scratch formulation lives in the tests as an oracle.

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


DISABLED = "queue fairness (proportion) is disabled: no reclaim"
FAIR = "reclaim keeps every queue within the fairness rules"


@dataclass(frozen=True)
class FairSet:
    """What step 1 of the judgement left of a victim set judged fair, so that the set grown by
    one chunk is judged from it in O(queues) instead of O(set) (reclaim's victim search judges
    each candidate with every unit taken before it).

    ``last``: the highest victim queue index in the set (-1: empty). ``remaining``: per queue on
    a victim's ancestor chain, its allocation minus the chunks taken below it. ``involved``:
    per such queue, the resources its chunks take. ``tails``: per victim-side queue, the queue
    and vector of its chunk judged last (the judge's order: by victim queue index, then in
    the order given). A chunk of a queue below ``last`` lands in the middle of that order; it
    is judged without starting over only when the set is ``exact``: leaf victim queues only,
    non-negative amounts, per resource every amount a multiple of 1/d (d a power of two) and
    every partial sum below 2**53 / d, so that the remaining amounts do not depend on the
    order of the subtractions and, the strategy check being monotone in what remains, the
    chunks of one victim side all pass iff the one judged last does."""

    last: int
    remaining: dict[int, list[float]]
    involved: dict[int, set[int]]
    tails: dict[int, tuple[int, Vector]]
    exact: bool = field(default=True, compare=False)
    #: per resource, while ``exact``: the largest denominator (a power of two) of the amounts
    #: met, the largest allocated amount met (rounded up), the sum of the chunks (rounded up)
    denominators: tuple[int, int, int] = field(default=(1, 1, 1), compare=False)
    allocated_bound: tuple[int, int, int] = field(default=(0, 0, 0), compare=False)
    taken_bound: tuple[int, int, int] = field(default=(0, 0, 0), compare=False)
    #: the chunks of the set, newest first, as nested pairs (previous chain, chunk); None: empty
    chain: _Chain = field(default=None, compare=False, repr=False)

    def chunks(self) -> list[VictimChunk]:
        """The set's chunks in the order they were added."""
        out: list[VictimChunk] = []
        link = self.chain
        while link is not None:
            link, chunk = link
            out.append(chunk)
        out.reverse()
        return out


_Chain = tuple["_Chain", VictimChunk] | None

EMPTY_FAIR_SET = FairSet(-1, {}, {}, {})


class _NotGrowable(Exception):
    """A chunk out of queue order in a set that is not exact: judge the grown set afresh."""


class _Growing:
    """A ``FairSet`` being built, changed in place (a fold, or one growth of a copy)."""

    __slots__ = (
        "alloc_b",
        "chain",
        "dens",
        "exact",
        "involved",
        "last",
        "remaining",
        "tails",
        "taken_b",
    )

    def __init__(self, base: FairSet, exact: bool) -> None:
        self.last = base.last
        self.remaining = {k: list(x) for k, x in base.remaining.items()}
        self.involved = {k: set(x) for k, x in base.involved.items()}
        self.tails = dict(base.tails)
        self.exact = exact and base.exact
        self.dens = base.denominators
        self.alloc_b = base.allocated_bound
        self.taken_b = base.taken_bound
        self.chain: _Chain = base.chain

    def freeze(self) -> FairSet:
        return FairSet(
            self.last,
            self.remaining,
            self.involved,
            self.tails,
            self.exact,
            self.dens,
            self.alloc_b,
            self.taken_b,
            self.chain,
        )


class ReclaimJudge:
    """The reclaim fairness judge for one reclaimer side: may victims be taken for a job of
    ``reclaimer_queue`` (preemptible or not) asking ``reclaimer_request``? Judge against the
    queue state as it was when the job's search started (``Proportion.clone()`` then).

    One rule set, applied chunk by chunk (module docstring): ``judge`` folds it over a victim
    list from the empty set, ``grow`` adds one chunk to a set judged fair before; both give
    the same verdict on the same chunks, ``grow`` in O(queues). ``verdict`` is ``judge`` with
    the refusal as a message."""

    __slots__ = ("_req", "_rq", "preemptible", "proportion", "reclaimer_queue")

    def __init__(
        self,
        p: Proportion,
        reclaimer_queue: str,
        reclaimer_request: ResourcesLike,
        reclaimer_preemptible: bool = True,
    ) -> None:
        self.proportion = p
        self.reclaimer_queue = reclaimer_queue
        self.preemptible = reclaimer_preemptible
        self._rq = p.tree.lookup(reclaimer_queue)
        self._req = to_vector(reclaimer_request)

    def verdict(self, victims: Sequence[VictimLike], *, explain: bool = True) -> ReclaimVerdict:
        """Is taking ``victims`` fair? ``explain=False``: the same verdict, empty message."""
        if not self.proportion.enabled:
            return ReclaimVerdict(False, DISABLED)
        found = self._fold(victims, explain, track_exact=False)
        if isinstance(found, ReclaimVerdict):
            return found
        return ReclaimVerdict(True, FAIR if explain else "")

    def judge(self, victims: Sequence[VictimLike]) -> FairSet | None:
        """``victims`` as a ``FairSet`` (None: not fair), ready to be grown."""
        if not self.proportion.enabled:
            return None
        found = self._fold(victims, False, track_exact=True)
        return found if isinstance(found, FairSet) else None

    def grow(self, base: FairSet, victim: VictimLike) -> FairSet | None:
        """``base`` (a set judged fair for this side) with ``victim`` added, or None if that
        set is not fair. A chunk of a queue at or after the set's last queue is the last step
        of the fold, the same subtractions in the same order; one of an earlier queue is judged
        from the base when the set stays exact (see ``FairSet``), else the grown set is judged
        from its chunks."""
        p = self.proportion
        if not p.enabled:
            return None
        chunk = _normalise(victim)
        vq = p.tree.lookup(chunk.queue)
        if vq >= base.last or (base.exact and not p.tree.children[vq]):
            state = _Growing(base, exact=True)
            try:
                refusal = self._add(state, chunk, vq, explain=False)
            except _NotGrowable:
                return self.judge([*base.chunks(), chunk])
            if refusal is not None or self._saturation(state, explain=False) is not None:
                return None
            return state.freeze()
        return self.judge([*base.chunks(), chunk])

    # ------------------------------------------------------------------ the rules
    def _fold(
        self, victims: Sequence[VictimLike], explain: bool, track_exact: bool
    ) -> FairSet | ReclaimVerdict:
        lookup = self.proportion.tree.lookup
        keyed = sorted(  # stable: each queue keeps its chunks' order
            ((lookup(c.queue), c) for c in map(_normalise, victims)), key=lambda pair: pair[0]
        )
        state = _Growing(EMPTY_FAIR_SET, exact=track_exact)
        for vq, chunk in keyed:
            refusal = self._add(state, chunk, vq, explain)
            if refusal is not None:
                return refusal
        refusal = self._saturation(state, explain)
        if refusal is not None:
            return refusal
        return state.freeze()

    def _add(
        self, state: _Growing, chunk: VictimChunk, vq: int, explain: bool
    ) -> ReclaimVerdict | None:
        """Step 1 for one more chunk of queue ``vq``: in place; a refusal, or None."""
        p = self.proportion
        v = to_vector(chunk.resources)
        ancestors = p.tree.ancestors[vq]
        remaining = state.remaining
        in_order = vq >= state.last
        if state.exact:
            self._widen_exact(state, vq, v, ancestors)
        side_r, side_v = _leveled(p, self._rq, vq)
        involved = state.involved
        if in_order:
            # a victim queue's involved resources are its own chunks' from the start of the
            # queue's group on (dropping what lower queues added if it is their ancestor)
            mine = involved[vq] | _involved(v) if vq == state.last else _involved(v)
            involved[vq] = mine
            left = remaining.get(side_v)
            if left is None:
                left = remaining[side_v] = list(p.allocated_at(side_v))
            if not self._fits_strategy(side_r, side_v, left):
                return self._refusal(chunk, vq, v, side_r, side_v, left) if explain else _REFUSED
            state.tails[side_v] = (vq, v)
            _subtract(p, remaining, involved, ancestors, v, mine)
        else:
            if not state.exact:
                raise _NotGrowable
            mine = involved.get(vq, set()) | _involved(v)
            involved[vq] = mine
            tail = state.tails.get(side_v)
            if tail is None or vq >= tail[0]:
                state.tails[side_v] = tail = (vq, v)
            _subtract(p, remaining, involved, ancestors, v, mine)
            # what the side keeps before its chunk judged last: the least any check sees
            left = remaining[side_v]
            last_v = tail[1]
            before_last = (left[0] + last_v[0], left[1] + last_v[1], left[2] + last_v[2])
            if not self._fits_strategy(side_r, side_v, before_last):
                return _REFUSED
        state.last = max(vq, state.last)
        state.chain = (state.chain, chunk)
        return None

    def _widen_exact(self, state: _Growing, vq: int, v: Vector, ancestors: Sequence[int]) -> None:
        """Keep ``state.exact`` true only while the amounts stay exact (see ``FairSet``)."""
        p = self.proportion
        if p.tree.children[vq] or min(v) < 0:
            state.exact = False
            return
        dens, taken_b = _widen(state.dens, state.taken_b, v, add=True)
        alloc_b = state.alloc_b
        for a in ancestors:
            if a not in state.remaining:
                dens, alloc_b = _widen(dens, alloc_b, p.allocated_at(a), add=False)
        state.dens, state.alloc_b, state.taken_b = dens, alloc_b, taken_b
        state.exact = all(
            (alloc_b[k] + taken_b[k]) * dens[k] < _EXACT_LIMIT for k in RESOURCE_INDEXES
        )

    def _fits_strategy(self, side_r: int, side_v: int, left: Sequence[float]) -> bool:
        p = self.proportion
        # MaintainFairShare: the victim side is above its allocatable share somewhere.
        if not all_leq_unlimited(left, p.allocatable_share_at(side_v)):
            return True
        # GuaranteeDeservedQuota: the reclaimer side stays within quota, the victim side is
        # above its own.
        alloc_r = p.allocated_at(side_r)
        req = self._req
        with_job = (alloc_r[0] + req[0], alloc_r[1] + req[1], alloc_r[2] + req[2])
        return all_leq_unlimited(with_job, p.deserved_at(side_r)) and not all_leq_unlimited(
            left, p.deserved_at(side_v)
        )

    def _refusal(
        self,
        chunk: VictimChunk,
        vq: int,
        v: Vector,
        side_r: int,
        side_v: int,
        left: Sequence[float],
    ) -> ReclaimVerdict:
        p = self.proportion
        names = p.tree.names
        what = "an elastic extra task" if chunk.elastic_extra else "a gang"
        return ReclaimVerdict(
            False,
            f"queue '{names[side_v]}' may not lose {what} of queue '{names[vq]}' "
            f"({_vec_text(v)}) to queue '{names[side_r]}': it would keep only "
            f"{_vec_text(left)} before the loss, which is not above its allocatable "
            f"share ({_vec_text(p.allocatable_share_at(side_v))}), and the reclaimer side is "
            f"not within its quota while the victim side is above its own",
        )

    def _saturation(self, state: _Growing, explain: bool) -> ReclaimVerdict | None:
        """Step 2 on what step 1 left of the victim side: a refusal, or None."""
        p = self.proportion
        tree = p.tree
        names = tree.names
        req = self._req
        remaining = state.remaining
        involved = state.involved
        req_involved = _involved(req)
        mult = p.reclaimer_saturation_multiplier
        for level in tree.ancestors[self._rq]:
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
                            f"queue '{names[level]}' would be more saturated in "
                            f"{resource_name(k)} than queue '{names[sib]}' it takes from: "
                            f"allocated/fair share {ratio_r:.4g} (x{mult:g}) vs {ratio_s:.4g}",
                        )
            if not self.preemptible:
                alloc_np = p.allocated_non_preemptible_at(level)
                with_job = (alloc_np[0] + req[0], alloc_np[1] + req[1], alloc_np[2] + req[2])
                if not all_leq_unlimited(with_job, p.deserved_at(level)):
                    if not explain:
                        return _REFUSED
                    return ReclaimVerdict(
                        False,
                        f"non-preemptible job would take queue '{names[level]}' over its "
                        f"quota: non-preemptible allocated with the job {_vec_text(with_job)}, "
                        f"quota {_vec_text(p.deserved_at(level))}",
                    )
        return None


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
    (``ReclaimJudge(...).verdict``.) ``explain=False``: the same verdict, empty message."""
    if not p.enabled:
        return ReclaimVerdict(False, DISABLED)
    judge = ReclaimJudge(p, reclaimer_queue, reclaimer_request, reclaimer_preemptible)
    return judge.verdict(victims, explain=explain)


#: multiples of 1/d (d a power of two) below 2**53/d in magnitude are exact floats, and so are
#: their sums and differences within that bound
_EXACT_LIMIT = 2**53


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
        new_dens[k] = max(new_dens[k], den)
        size = math.ceil(abs(x))
        new_bound[k] = new_bound[k] + size if add else max(new_bound[k], size)
    return (new_dens[0], new_dens[1], new_dens[2]), _triple(new_bound)


def _triple(b: list[int]) -> tuple[int, int, int]:
    return (b[0], b[1], b[2])


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
        rem = remaining.get(a)
        if rem is None:
            rem = remaining[a] = list(p.allocated_at(a))
        rem[0] -= v[0]
        rem[1] -= v[1]
        rem[2] -= v[2]
        involved.setdefault(a, set()).update(mine)
