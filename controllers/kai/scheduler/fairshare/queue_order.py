"""Queue order among siblings as precomputed keys.

A heap of sibling queues compares the same (queue, best job) pair many times, so the per-queue
facts every rule needs are computed once into a ``QueueOrderKey``; comparing two keys is then a
handful of scalar comparisons. ``Proportion.compare_queues`` is the same comparison for callers
that prefer a comparator.

Rules, first decisive wins (-1 = left first):

1. not over-utilized first (over-utilized: fairShare < allocated in *every* resource);
2. starved first (allocated + job <= deserved in every resource, -1 = infinite);
3. higher priority first;
4. a queue that would allocate a resource whose allocatable share is 0 goes last;
5. lower dominant resource share with the job (minus victims) first;
6. lower dominant resource share without the job first;
7. the queue whose allocatable share is dominated (<= everywhere, < somewhere) first;
8. older (creation_rank) first, then name. KAI's last rule prefers the right-hand queue on
   equal creation times; the name makes this a proper tie-break.

With the proportion plugin disabled only rule 8 applies. Rule 7 is a partial order, so the
comparison is not always transitive (neither is KAI's); it is antisymmetric.
"""

from __future__ import annotations

from kai.scheduler.fairshare.resources import EPS, Vector, all_leq_unlimited


class QueueOrderKey:
    """Order facts of one queue with its candidate job. Sorts with ``<`` (heapq, sorted).

    A plain slotted class rather than a frozen dataclass: keys are built in hot loops.
    """

    __slots__ = (
        "allocatable",
        "enabled",
        "index",
        "over_utilized",
        "priority",
        "share_with_job",
        "share_without_job",
        "starved",
        "zero_share_violation",
    )

    def __init__(  # noqa: PLR0917  a slotted record built positionally on the hot path
        self,
        index: int,
        enabled: bool,
        over_utilized: bool,
        starved: bool,
        priority: int,
        zero_share_violation: bool,
        share_with_job: float,
        share_without_job: float,
        allocatable: Vector,
    ) -> None:
        self.index = index  # position in (creation_rank, name) order
        self.enabled = enabled
        self.over_utilized = over_utilized
        self.starved = starved
        self.priority = priority
        self.zero_share_violation = zero_share_violation
        self.share_with_job = share_with_job
        self.share_without_job = share_without_job
        self.allocatable = allocatable

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"QueueOrderKey({fields})"

    def compare(self, other: QueueOrderKey) -> int:  # noqa: PLR0911  one return per KAI rule
        """-1 if ``self`` goes first, 1 if ``other`` does, 0 for the same queue."""
        if self.index == other.index:
            return 0
        if self.enabled and other.enabled:
            if self.over_utilized != other.over_utilized:
                return 1 if self.over_utilized else -1
            if self.starved != other.starved:
                return -1 if self.starved else 1
            if self.priority != other.priority:
                return -1 if self.priority > other.priority else 1
            if self.zero_share_violation != other.zero_share_violation:
                return 1 if self.zero_share_violation else -1
            diff = self.share_with_job - other.share_with_job
            if diff > EPS or diff < -EPS:
                return -1 if diff < 0 else 1
            diff = self.share_without_job - other.share_without_job
            if diff > EPS or diff < -EPS:
                return -1 if diff < 0 else 1
            mine_le = all_leq_unlimited(self.allocatable, other.allocatable)
            theirs_le = all_leq_unlimited(other.allocatable, self.allocatable)
            if mine_le != theirs_le:
                return -1 if mine_le else 1
        return -1 if self.index < other.index else 1

    def __lt__(self, other: QueueOrderKey) -> bool:
        return self.compare(other) < 0
