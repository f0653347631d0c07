"""Hierarchical fair-share division, one resource and one sibling set at a time.

``divide_level`` is KAI's ``setResourceShare`` for one set of siblings and one resource;
``divide`` runs it top-down over a whole tree for gpu, cpu and memory independently: top-level
queues divide the total capacity, every queue's children divide that queue's fair share.

For a sibling set with amount ``T`` of one resource:

1. *Deserved.* Each queue gets ``min(deserved, requestable)`` where deserved ``-1`` means
   ``T`` and requestable = ``min(limit, requested)`` (``requested`` if the limit is ``-1``).
   This phase is **not** capped by ``T``: oversubscribed quotas give shares summing above the
   capacity (KAI behaviour, kept). If nothing remains, stop.
2. *Over quota*, strict priority buckets, highest ``priority`` first, each bucket only getting
   what the buckets above could not absorb. Within a bucket, rounds: the queues still below
   their requestable amount ("unsatisfied") share the amount left at the start of the round
   (frozen for the round) in proportion to ``s_q = max(0, w' + k (w' - U))`` where ``w'`` is
   the queue's weight over the total weight of the unsatisfied queues and ``U`` its normalised
   historical usage (time-based fairshare; ``U = 0`` makes ``s_q`` proportional to the weight,
   whatever ``k``). A queue whose remaining request fits its share takes exactly that; any
   other gets ``floor(share)`` (whole units only, in every resource's raw unit) and records
   the fractional rest as a *leftover*. Weight-0 queues get nothing. Another round runs only
   when some queue asked for less than its share and something remains.
3. *Leftovers*, right after each bucket's rounds: the bucket's queues with a leftover, largest
   leftover first (ties: older queue, then name), each get ``min(1, remaining)`` once.

Deviations from KAI, all documented in docs/design/fairshare.md:

- iteration order is ``(creation_rank, name)`` instead of Go map order;
- comparisons use the tolerance ``EPS`` (float drift of fractional GPUs);
- a phase-3 grant is also capped by the queue's remaining requestable amount, so a fair share
  never exceeds ``min(limit, requested)``; KAI can overshoot a fractional request by < 1;
- a negative weight counts as 0 (KAI only allows ``-1`` with an unlimited quota, where phase 1
  already satisfies or exhausts the level, so the weight is never read);
- a negative amount (other schedulers' pods exceeding a node) is divided as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kai.scheduler.fairshare.queue_index import QueueIndex
from kai.scheduler.fairshare.resources import (
    EPS,
    RESOURCE_INDEXES,
    ResourcesLike,
    Vector,
    to_mapping,
    to_vector,
)
from kai.scheduler.snapshot import MANAGED_RESOURCES, UNLIMITED, QueueResource, QueueSpec


@dataclass(frozen=True, slots=True)
class ShareInput:
    """One queue's figures for one resource in one sibling set.

    ``deserved`` (-1 = the whole amount of the level), ``limit`` (-1 = none), ``weight``
    (overQuotaWeight), ``requested`` (allocated + pending, rolled up over the queue's
    subtree), ``usage`` (normalised historical usage, 0 without time-based fairshare).
    """

    name: str
    deserved: float
    limit: float
    weight: float
    priority: int
    creation_rank: float
    requested: float
    usage: float = 0.0

    @property
    def requestable(self) -> float:
        """What the queue may be given at most: ``min(limit, requested)``."""
        if self.limit == UNLIMITED:
            return self.requested
        return min(self.limit, self.requested)


def divide_level(
    queues: Sequence[ShareInput], amount: float, k_value: float = 1.0
) -> dict[str, float]:
    """Fair share of each sibling for one resource, dividing ``amount``. Pure and deterministic."""
    ordered = sorted(queues, key=lambda q: (q.creation_rank, q.name))
    names = [q.name for q in ordered]
    if len(set(names)) != len(names):
        raise ValueError(f"divide_level: duplicate queue names in {sorted(names)!r}")
    fair = [0.0] * len(ordered)
    _divide_sorted(ordered, max(0.0, amount), max(0.0, k_value), fair)
    return dict(zip(names, fair, strict=True))


def _divide_sorted(
    ordered: Sequence[ShareInput], amount: float, k: float, fair: list[float]
) -> float:
    """Fill ``fair`` (same order as ``ordered``); returns what is left undivided."""
    requestable = [q.requestable for q in ordered]
    remaining = amount
    for i, q in enumerate(ordered):  # phase 1: deserved
        deserved = amount if q.deserved == UNLIMITED else q.deserved
        give = max(0.0, min(deserved, requestable[i]))
        fair[i] += give
        remaining -= give
    if remaining <= EPS:
        return 0.0
    for priority in sorted({q.priority for q in ordered}, reverse=True):
        if remaining <= EPS:
            break
        bucket = [i for i, q in enumerate(ordered) if q.priority == priority]
        remaining, leftovers = _over_quota_rounds(ordered, bucket, requestable, fair, remaining, k)
        if remaining > EPS and leftovers:
            remaining = _hand_out_leftovers(ordered, leftovers, requestable, fair, remaining)
    return max(0.0, remaining)


def _over_quota_rounds(
    ordered: Sequence[ShareInput],
    bucket: list[int],
    requestable: list[float],
    fair: list[float],
    remaining: float,
    k: float,
) -> tuple[float, dict[int, float]]:
    """Phase 2 for one priority bucket; returns the amount left and the fractional leftovers."""
    leftovers: dict[int, float] = {}
    while True:
        unsatisfied = [i for i in bucket if requestable[i] - fair[i] > EPS]
        total_weight = sum(max(0.0, ordered[i].weight) for i in unsatisfied)
        if total_weight <= 0:
            break
        share_weights: dict[int, float] = {}
        for i in unsatisfied:
            w = max(0.0, ordered[i].weight) / total_weight
            share_weights[i] = max(0.0, w + k * (w - ordered[i].usage))
        weight_sum = sum(share_weights.values())
        if weight_sum <= 0:
            break
        offer = remaining  # frozen for the round
        another_round = False
        for i in unsatisfied:
            if remaining <= EPS:
                break
            if ordered[i].weight <= 0:
                continue
            wanted = requestable[i] - fair[i]
            share = offer * (share_weights[i] / weight_sum)  # KAI's operation order
            if wanted <= share + EPS:
                give = wanted
                leftovers.pop(i, None)
            else:
                give = float(math.floor(share + EPS))
                if share - give > EPS:
                    leftovers[i] = share - give
                # KAI keeps a leftover recorded in an earlier round when this round's share is
                # a whole number; so do we (the entry is only replaced or dropped).
            if give <= 0:
                continue
            fair[i] += give
            remaining -= give
            if wanted < share - EPS:
                another_round = True
        if not another_round or remaining <= EPS:
            break
    return remaining, leftovers


def _hand_out_leftovers(
    ordered: Sequence[ShareInput],
    leftovers: dict[int, float],
    requestable: list[float],
    fair: list[float],
    remaining: float,
) -> float:
    """Phase 3: largest leftover first (ties: older, then name) gets ``min(1, remaining)``, once."""
    # Rounded so that float noise between equal shares does not decide over age.
    order = sorted(
        leftovers,
        key=lambda i: (-round(leftovers[i], 9), ordered[i].creation_rank, ordered[i].name),
    )
    for i in order:
        if remaining <= EPS:
            break
        give = min(1.0, remaining, requestable[i] - fair[i])
        if give <= 0:
            continue
        fair[i] += give
        remaining -= give
    return remaining


def queue_resource(spec: QueueSpec, resource: str) -> QueueResource:
    """The queue's quota/limit/weight for one resource (``QueueResource()`` defaults if absent)."""
    return spec.resources.get(resource) or QueueResource()


def divide_tree(
    tree: QueueIndex,
    total_capacity: Vector,
    requested: Sequence[Vector],
    k_value: float = 1.0,
    usage: Sequence[Vector] | None = None,
) -> list[Vector]:
    """Fair shares by queue index for the whole tree (all three resources); see ``divide``."""
    k = max(0.0, k_value)
    n = len(tree)
    fair = [[0.0, 0.0, 0.0] for _ in range(n)]
    if usage is None:
        usage = [to_vector(spec.usage) for spec in tree.specs]
    params = [[queue_resource(spec, r) for r in MANAGED_RESOURCES] for spec in tree.specs]
    for parent, siblings in tree.levels():
        for r in RESOURCE_INDEXES:
            amount = total_capacity[r] if parent < 0 else fair[parent][r]
            inputs = [
                ShareInput(
                    name=tree.names[i],
                    deserved=params[i][r].quota,
                    limit=params[i][r].limit,
                    weight=params[i][r].over_quota_weight,
                    priority=tree.specs[i].priority,
                    creation_rank=tree.specs[i].creation_rank,
                    requested=requested[i][r],
                    usage=usage[i][r],
                )
                for i in siblings
            ]
            shares = [0.0] * len(inputs)
            # siblings are already in (creation_rank, name) order
            _divide_sorted(inputs, max(0.0, amount), k, shares)
            for j, i in enumerate(siblings):
                fair[i][r] = shares[j]
    return [(f[0], f[1], f[2]) for f in fair]


def divide(
    queues: Sequence[QueueSpec],
    total_capacity: ResourcesLike,
    requested: Mapping[str, ResourcesLike],
    k_value: float = 1.0,
    usage: Mapping[str, ResourcesLike] | None = None,
) -> dict[str, dict[str, float]]:
    """Fair share of every queue for gpu, cpu and memory. Pure and deterministic.

    - ``queues``: the whole tree (``QueueSpec``: quota = deserved, limit, overQuotaWeight per
      resource, priority, creation_rank; a resource missing from ``resources`` takes
      ``QueueResource()`` defaults). Input order does not matter.
    - ``total_capacity``: per resource, what the top-level queues divide.
    - ``requested``: per queue, allocated + pending **already rolled up** over its subtree
      (use ``QueueIndex.roll_up`` on leaf figures); missing queues request nothing.
    - ``usage``: per queue normalised historical usage; default ``QueueSpec.usage``.
    - ``k_value``: KAI ``kValue`` (clamped at >= 0).

    Returns ``{queue: {"gpu": .., "cpu": .., "memory": ..}}``.
    """
    tree = QueueIndex(queues)
    for name in requested:
        tree.lookup(name)
    req = [to_vector(requested.get(name, (0.0, 0.0, 0.0))) for name in tree.names]
    use = None
    if usage is not None:
        for name in usage:
            tree.lookup(name)
        use = [to_vector(usage.get(name, (0.0, 0.0, 0.0))) for name in tree.names]
    shares = divide_tree(tree, to_vector(total_capacity), req, k_value, use)
    return {name: to_mapping(shares[i]) for i, name in enumerate(tree.names)}
