"""Per-session queue state of the proportion plugin: fair shares, live accounting, capacity
policy and queue order. The rules themselves live in
``capacity.py``, ``queue_order.py`` and ``reclaim.py``; this class holds the state and exposes them
as methods.

Built once per session from the snapshot; fair shares are computed in the constructor and never
change during the session (KAI recomputes them only at the next session). ``allocated`` and
``allocated_non_preemptible`` change live through ``on_allocate`` / ``on_deallocate``, which
the session calls for every virtual allocate, pipeline, evict and undo, rolled up to every
ancestor in O(depth). ``requested`` is fixed for the session, as in KAI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kai.scheduler.fairshare.capacity import (
    NON_PREEMPTIBLE_OVER_QUOTA,
    OVER_LIMIT,
    non_preemptible_over_quota,
    over_limit,
)
from kai.scheduler.fairshare.division import divide_tree, queue_resource
from kai.scheduler.fairshare.queue_index import QueueIndex
from kai.scheduler.fairshare.queue_order import QueueOrderKey
from kai.scheduler.fairshare.reclaim import (
    ReclaimVerdict,
    VictimLike,
    judge_reclaim,
    saturation_ratio,
)
from kai.scheduler.fairshare.resources import (
    EPS,
    RESOURCE_INDEXES,
    ZERO,
    ResourcesLike,
    Vector,
    leq_unlimited,
    to_mapping,
    to_vector,
)
from kai.scheduler.result import QueueShare, Reason
from kai.scheduler.snapshot import MANAGED_RESOURCES, UNLIMITED, QueueSpec

#: KAI's penalty factor for allocations in a resource whose allocatable share is 0
NO_SHARE_DRF_MULTIPLIER = 1000.0

__all__ = ["NON_PREEMPTIBLE_OVER_QUOTA", "OVER_LIMIT", "Proportion", "QueueFigures"]


class Proportion:
    """Queue state of one session. See the package docstring for the contract."""

    __slots__ = (
        "_alloc",
        "_alloc_np",
        "_allocatable",
        "_deserved",
        "_fair",
        "_limit",
        "_requested",
        "enabled",
        "k_value",
        "reclaimer_saturation_multiplier",
        "total_capacity",
        "tree",
    )

    def __init__(
        self,
        queues: Sequence[QueueSpec],
        total_capacity: ResourcesLike,
        leaf_requested: Mapping[str, ResourcesLike],
        leaf_allocated: Mapping[str, ResourcesLike],
        leaf_allocated_non_preemptible: Mapping[str, ResourcesLike],
        k_value: float = 1.0,
        enabled: bool = True,
        reclaimer_saturation_multiplier: float = 1.0,
    ) -> None:
        self.tree = QueueIndex(queues)
        self.enabled = enabled
        self.total_capacity: Vector = to_vector(total_capacity)
        self.k_value = max(0.0, float(k_value))
        # KAI forces multipliers below 1 to 1 (with a warning at plugin start).
        self.reclaimer_saturation_multiplier = max(1.0, float(reclaimer_saturation_multiplier))
        tree = self.tree
        self._requested: list[Vector] = tree.roll_up(leaf_requested, "requested")
        alloc = tree.roll_up(leaf_allocated, "allocated")
        alloc_np = tree.roll_up(leaf_allocated_non_preemptible, "allocated non-preemptible")
        self._alloc: list[float] = [x for v in alloc for x in v]
        self._alloc_np: list[float] = [x for v in alloc_np for x in v]
        params = [[queue_resource(s, r) for r in MANAGED_RESOURCES] for s in tree.specs]
        self._deserved: list[Vector] = [(p[0].quota, p[1].quota, p[2].quota) for p in params]
        self._limit: list[Vector] = [(p[0].limit, p[1].limit, p[2].limit) for p in params]
        self._fair: list[Vector] = divide_tree(
            tree, self.total_capacity, self._requested, self.k_value
        )
        self._allocatable: list[Vector] = [
            _allocatable(self._deserved[i], self._fair[i], self._limit[i]) for i in range(len(tree))
        ]

    # ------------------------------------------------------------------ structure
    @property
    def names(self) -> tuple[str, ...]:
        """Queue names in (creation_rank, name) order."""
        return self.tree.names

    def is_leaf(self, name: str) -> bool:
        return self.tree.is_leaf(name)

    def parent(self, name: str) -> str | None:
        p = self.tree.parents[self.tree.lookup(name)]
        return None if p < 0 else self.tree.names[p]

    def children(self, name: str) -> list[str]:
        return [self.tree.names[c] for c in self.tree.children[self.tree.lookup(name)]]

    def top_level(self) -> list[str]:
        return [self.tree.names[i] for i in self.tree.top]

    def path(self, name: str) -> list[str]:
        """From the top-level queue down to ``name``."""
        return self.tree.path(name)

    def ancestors(self, name: str) -> list[str]:
        """``name``, its parent, ..., its top-level queue."""
        names = self.tree.names
        return [names[i] for i in self.tree.ancestors[self.tree.lookup(name)]]

    # ------------------------------------------------------------------ figures (vectors)
    # By name, as below, or by the queue's index in ``tree`` (``tree.lookup(name)``) with the
    # ``*_at`` methods, which the fair-share rules use in their loops. Vectors are
    # ``(gpu, cpu, memory)``; -1 in a quota, limit or share means unlimited.
    def fair_share(self, name: str) -> Vector:
        return self._fair[self.tree.lookup(name)]

    def deserved(self, name: str) -> Vector:
        return self._deserved[self.tree.lookup(name)]

    def limit(self, name: str) -> Vector:
        return self._limit[self.tree.lookup(name)]

    def requested(self, name: str) -> Vector:
        return self._requested[self.tree.lookup(name)]

    def allocatable_share(self, name: str) -> Vector:
        """``min(limit, max(deserved, fairShare))``; the limit (maybe -1) when deserved is -1."""
        return self._allocatable[self.tree.lookup(name)]

    def allocated(self, name: str) -> Vector:
        return self.allocated_at(self.tree.lookup(name))

    def allocated_non_preemptible(self, name: str) -> Vector:
        return self.allocated_non_preemptible_at(self.tree.lookup(name))

    def saturation(self, name: str, extra: ResourcesLike | None = None) -> Vector:
        """Per resource, (allocated + extra) / fair share: the ratio reclaim's saturation rule
        compares (fair share 0: infinite when something is allocated, else 0; unlimited: 0)."""
        i = self.tree.lookup(name)
        alloc = self.allocated_at(i)
        if extra is not None:
            e = to_vector(extra)
            alloc = (alloc[0] + e[0], alloc[1] + e[1], alloc[2] + e[2])
        fair = self._fair[i]
        return (
            saturation_ratio(alloc[0], fair[0]),
            saturation_ratio(alloc[1], fair[1]),
            saturation_ratio(alloc[2], fair[2]),
        )

    def figures(self, name: str, resource: str) -> QueueFigures:
        """Every figure of one queue in one resource (``"gpu"``, ``"cpu"`` or ``"memory"``)."""
        i = self.tree.lookup(name)
        try:
            k = MANAGED_RESOURCES.index(resource)
        except ValueError:
            raise ValueError(
                f"queue '{name}': unknown resource {resource!r}, expected one of "
                f"{', '.join(MANAGED_RESOURCES)}"
            ) from None
        return QueueFigures(
            quota=self._deserved[i][k],
            limit=self._limit[i][k],
            fair_share=self._fair[i][k],
            allocatable_share=self._allocatable[i][k],
            requested=self._requested[i][k],
            allocated=self._alloc[3 * i + k],
            allocated_non_preemptible=self._alloc_np[3 * i + k],
        )

    # by queue index (``tree.lookup(name)``)
    def fair_share_at(self, i: int) -> Vector:
        return self._fair[i]

    def deserved_at(self, i: int) -> Vector:
        return self._deserved[i]

    def limit_at(self, i: int) -> Vector:
        return self._limit[i]

    def allocatable_share_at(self, i: int) -> Vector:
        return self._allocatable[i]

    def allocated_at(self, i: int) -> Vector:
        b = 3 * i
        alloc = self._alloc
        return (alloc[b], alloc[b + 1], alloc[b + 2])

    def allocated_non_preemptible_at(self, i: int) -> Vector:
        b = 3 * i
        alloc_np = self._alloc_np
        return (alloc_np[b], alloc_np[b + 1], alloc_np[b + 2])

    def dominant_share(self, name: str, extra: ResourcesLike | None = None) -> float:
        """Max over resources of (allocated + extra) / allocatable share (KAI's queue order)."""
        i = self.tree.lookup(name)
        alloc = self.allocated_at(i)
        if extra is not None:
            e = to_vector(extra)
            alloc = (alloc[0] + e[0], alloc[1] + e[1], alloc[2] + e[2])
        return self._dominant(i, alloc)

    def queue_shares(self) -> dict[str, QueueShare]:
        """Per-queue figures for the session result (in (creation_rank, name) order)."""
        return {
            name: QueueShare(
                fair_share=to_mapping(self._fair[i]),
                allocated=to_mapping(self.allocated_at(i)),
                requested=to_mapping(self._requested[i]),
                allocated_non_preemptible=to_mapping(self.allocated_non_preemptible_at(i)),
            )
            for i, name in enumerate(self.tree.names)
        }

    # ------------------------------------------------------------------ live accounting
    def on_allocate(self, queue: str, resources: ResourcesLike, preemptible: bool) -> None:
        """A task of a job in ``queue`` took ``resources`` (allocate or pipeline, or undo of an
        eviction). Adds to allocated (and non-preemptible allocated) of the queue and every
        ancestor."""
        self._account(queue, to_vector(resources), preemptible, 1.0)

    def on_deallocate(self, queue: str, resources: ResourcesLike, preemptible: bool) -> None:
        """The reverse of ``on_allocate`` (evict, or undo of an allocate/pipeline)."""
        self._account(queue, to_vector(resources), preemptible, -1.0)

    def _account(self, queue: str, v: Vector, preemptible: bool, sign: float) -> None:
        g, c, m = v[0] * sign, v[1] * sign, v[2] * sign
        alloc = self._alloc
        alloc_np = self._alloc_np
        for q in self.tree.ancestors[self.tree.lookup(queue)]:
            b = 3 * q
            alloc[b] += g
            alloc[b + 1] += c
            alloc[b + 2] += m
            if not preemptible:
                alloc_np[b] += g
                alloc_np[b + 1] += c
                alloc_np[b + 2] += m

    def clone(self) -> Proportion:
        """An independent copy of the live state (allocated figures); the immutable session
        figures (tree, quotas, fair shares, requested) are shared. O(number of queues)."""
        c = object.__new__(Proportion)
        for attr in Proportion.__slots__:
            setattr(c, attr, getattr(self, attr))
        c._alloc = self._alloc.copy()
        c._alloc_np = self._alloc_np.copy()
        return c

    def save_state(self) -> tuple[list[float], list[float]]:
        """A checkpoint of the live state, for ``restore_state``."""
        return self._alloc.copy(), self._alloc_np.copy()

    def state_key(self) -> tuple[float, ...]:
        """The live state (allocated and non-preemptible allocated of every queue) as a hashable
        value: answers computed from this Proportion may be cached under it."""
        return (*self._alloc, *self._alloc_np)

    def restore_state(self, state: tuple[list[float], list[float]]) -> None:
        alloc, alloc_np = state
        if len(alloc) != len(self._alloc) or len(alloc_np) != len(self._alloc_np):
            raise ValueError("restore_state: the state was saved from a different queue tree")
        self._alloc = alloc.copy()
        self._alloc_np = alloc_np.copy()

    # ------------------------------------------------------------------ capacity policy
    def check_job_capacity(
        self, queue: str, request: ResourcesLike, preemptible: bool
    ) -> Reason | None:
        """May a job (or the set of its tasks about to be allocated) asking ``request`` enter
        ``queue``? ``None`` = yes. Otherwise the first violation, checked at the queue
        and every ancestor: OverLimit first (``limit < allocated + request`` for a resource
        with non-zero request and limit != -1), then, for non-preemptible jobs,
        NonPreemptibleOverQuota (``deserved < allocatedNonPreemptible + request``, deserved !=
        -1)."""
        if not self.enabled:
            return None
        r = to_vector(request)
        i = self.tree.lookup(queue)
        return over_limit(self, i, r) or (
            None if preemptible else non_preemptible_over_quota(self, i, r)
        )

    def check_non_preemptible_quota(
        self, queue: str, request: ResourcesLike, preemptible: bool
    ) -> Reason | None:
        """Only the non-preemptible quota rule (what preempt checks before searching)."""
        if not self.enabled or preemptible:
            return None
        return non_preemptible_over_quota(self, self.tree.lookup(queue), to_vector(request))

    # ------------------------------------------------------------------ queue order
    def compare_queues(
        self,
        q1: str,
        q2: str,
        job_request1: ResourcesLike | None = None,
        job_request2: ResourcesLike | None = None,
        victims1: ResourcesLike | None = None,
        victims2: ResourcesLike | None = None,
    ) -> int:
        """Order of two sibling queues for scheduling: -1 = ``q1`` first, 1 = ``q2`` first,
        0 = same queue (rules in ``queue_order.py``). ``job_request*`` = the init request of
        each queue's best job (what it would allocate next); ``victims*`` = total resources of
        victims already chosen from each queue's subtree (victim mode: treated as removed in
        the dominant-share rule). For the victim order the caller negates the result."""
        return self.order_key(q1, job_request1, victims1).compare(
            self.order_key(q2, job_request2, victims2)
        )

    def order_key(
        self,
        queue: str,
        job_request: ResourcesLike | None = None,
        victims: ResourcesLike | None = None,
    ) -> QueueOrderKey:
        """The precomputed order facts of ``queue`` with its candidate job; keys of siblings
        compare with ``<`` / ``.compare``. Valid until the queue's allocation changes."""
        i = self.tree.lookup(queue)
        spec = self.tree.specs[i]
        a_ = self._allocatable[i]
        if not self.enabled:
            return QueueOrderKey(i, False, False, False, spec.priority, False, 0.0, 0.0, a_)
        job = _vector_or_zero(job_request)
        b = 3 * i
        alloc = self._alloc
        a0, a1, a2 = alloc[b], alloc[b + 1], alloc[b + 2]
        f = self._fair[i]
        over = f[0] < a0 - EPS and f[1] < a1 - EPS and f[2] < a2 - EPS
        w0, w1, w2 = a0 + job[0], a1 + job[1], a2 + job[2]
        d = self._deserved[i]
        starved = (
            (d[0] == UNLIMITED or w0 <= d[0] + EPS)
            and (d[1] == UNLIMITED or w1 <= d[1] + EPS)
            and (d[2] == UNLIMITED or w2 <= d[2] + EPS)
        )
        zero = (a_[0] == 0 and w0 > EPS) or (a_[1] == 0 and w1 > EPS) or (a_[2] == 0 and w2 > EPS)
        if victims is not None:
            v = to_vector(victims)
            with_job = self._dominant(i, (w0 - v[0], w1 - v[1], w2 - v[2]))
        else:
            with_job = self._dominant(i, (w0, w1, w2))
        without = self._dominant(i, (a0, a1, a2))
        return QueueOrderKey(i, True, over, starved, spec.priority, zero, with_job, without, a_)

    def _dominant(self, i: int, alloc: Sequence[float]) -> float:
        share = 0.0
        a = self._allocatable[i]
        for k in RESOURCE_INDEXES:
            allocatable = self.total_capacity[k] if a[k] == UNLIMITED else a[k]
            if allocatable == 0:
                share = max(share, alloc[k] * NO_SHARE_DRF_MULTIPLIER)
            else:
                share = max(share, alloc[k] / allocatable)
        return share

    # ------------------------------------------------------------------ reclaim
    def can_reclaim(self, queue: str, job_request: ResourcesLike, preemptible: bool) -> bool:
        """The reclaim gate: allocated + request <= fair share in every resource, and for a
        non-preemptible job allocatedNonPreemptible + request <= deserved. False when the
        proportion plugin is disabled (KAI: no plugin answers, so no reclaim)."""
        if not self.enabled:
            return False
        i = self.tree.lookup(queue)
        r = to_vector(job_request)
        alloc = self.allocated_at(i)
        fair = self._fair[i]
        if not all(leq_unlimited(alloc[k] + r[k], fair[k]) for k in RESOURCE_INDEXES):
            return False
        if preemptible:
            return True
        alloc_np = self.allocated_non_preemptible_at(i)
        des = self._deserved[i]
        return all(leq_unlimited(alloc_np[k] + r[k], des[k]) for k in RESOURCE_INDEXES)

    def reclaim_is_fair(
        self,
        reclaimer_queue: str,
        reclaimer_request: ResourcesLike,
        victims: Sequence[VictimLike],
        reclaimer_preemptible: bool = True,
    ) -> bool:
        """Scenario validation of reclaim; see ``reclaim.ReclaimJudge``."""
        return judge_reclaim(
            self, reclaimer_queue, reclaimer_request, victims, reclaimer_preemptible, explain=False
        ).ok

    def judge_reclaim(
        self,
        reclaimer_queue: str,
        reclaimer_request: ResourcesLike,
        victims: Sequence[VictimLike],
        reclaimer_preemptible: bool = True,
    ) -> ReclaimVerdict:
        """Like ``reclaim_is_fair`` with the reason as a message."""
        return judge_reclaim(
            self, reclaimer_queue, reclaimer_request, victims, reclaimer_preemptible
        )


@dataclass(frozen=True)
class QueueFigures:
    """One queue's figures in one resource (``Proportion.figures``); -1 = unlimited."""

    quota: float  # KAI's deserved
    limit: float
    fair_share: float
    allocatable_share: float  # min(limit, max(quota, fair share)); the limit when quota is -1
    requested: float
    allocated: float
    allocated_non_preemptible: float


def _vector_or_zero(resources: ResourcesLike | None) -> Vector:
    if resources is None:
        return ZERO
    if type(resources) is tuple and len(resources) == 3:
        return resources
    return to_vector(resources)


def _allocatable(deserved: Vector, fair: Vector, limit: Vector) -> Vector:
    out = []
    for k in RESOURCE_INDEXES:
        if deserved[k] == UNLIMITED:
            out.append(limit[k])
            continue
        value = max(deserved[k], fair[k])
        if limit[k] != UNLIMITED:
            value = min(limit[k], value)
        out.append(value)
    return (out[0], out[1], out[2])
