"""Queue order among siblings, one rule at a time.

Queues are built with over-quota weight 0 and requested = quota, so their fair share and
allocatable share equal their quota; allocated figures are set directly.
"""

from __future__ import annotations

import functools
import heapq

import pytest

from kai.scheduler.fairshare import Proportion
from kai.scheduler.snapshot import QueueResource, QueueSpec

Triple = tuple[float, float, float]
CAPACITY: Triple = (100, 1_000_000, 1e12)


def q(name: str, quota: Triple, *, priority: int = 100, rank: float = 0) -> QueueSpec:
    return QueueSpec(
        name=name,
        parent=None,
        priority=priority,
        creation_rank=rank,
        resources={
            r: QueueResource(quota=quota[i], limit=-1, over_quota_weight=0)
            for i, r in enumerate(("gpu", "cpu", "memory"))
        },
    )


def two(
    a_quota: Triple = (4, 4000, 4e9),
    b_quota: Triple = (4, 4000, 4e9),
    *,
    a_alloc: Triple = (0, 0, 0),
    b_alloc: Triple = (0, 0, 0),
    a_priority: int = 100,
    b_priority: int = 100,
    enabled: bool = True,
) -> Proportion:
    queues = [
        q("a", a_quota, priority=a_priority, rank=0),
        q("b", b_quota, priority=b_priority, rank=1),
    ]
    requested = {
        "a": tuple(max(x, 0) for x in a_quota),
        "b": tuple(max(x, 0) for x in b_quota),
    }
    return Proportion(queues, CAPACITY, requested, {"a": a_alloc, "b": b_alloc}, {}, 1.0, enabled)


def both_ways(p: Proportion, job_a: Triple = (0, 0, 0), job_b: Triple = (0, 0, 0)) -> int:
    """compare(a, b), checking antisymmetry on the way."""
    ab = p.compare_queues("a", "b", job_a, job_b)
    ba = p.compare_queues("b", "a", job_b, job_a)
    assert ab == -ba
    return ab


def test_fair_shares_equal_quota_in_this_setup() -> None:
    p = two()
    assert p.fair_share("a") == (4, 4000, 4e9)
    assert p.allocatable_share("a") == (4, 4000, 4e9)


# 1. over-utilized last -------------------------------------------------------------------


def test_over_utilized_in_every_resource_goes_last_despite_priority() -> None:
    p = two(a_alloc=(5, 5000, 5e9), b_alloc=(8, 0, 0), a_priority=200)
    assert both_ways(p) == 1


def test_over_in_some_resources_only_is_not_over_utilized() -> None:
    # a over in gpu and cpu but not memory: rule 1 ties, neither starved, priority decides
    p = two(a_alloc=(5, 5000, 1e9), b_alloc=(5, 0, 0), a_priority=200)
    assert both_ways(p) == -1


# 2. starved first ------------------------------------------------------------------------


def test_starved_with_the_job_goes_first_despite_priority() -> None:
    p = two(a_alloc=(1, 0, 0), b_alloc=(1, 0, 0), a_priority=200)
    # a with its job: 1 + 4 > 4 (not starved); b: 1 + 3 <= 4 (starved)
    assert both_ways(p, job_a=(4, 0, 0), job_b=(3, 0, 0)) == 1
    # both starved: priority decides
    assert both_ways(p, job_a=(3, 0, 0), job_b=(3, 0, 0)) == -1


def test_unlimited_quota_is_always_starved() -> None:
    p = two(a_quota=(-1, -1, -1), a_alloc=(50, 0, 0), b_alloc=(1, 0, 0), b_priority=200)
    assert both_ways(p, job_a=(10, 0, 0), job_b=(4, 0, 0)) == -1


# 3. priority -----------------------------------------------------------------------------


def test_higher_priority_first() -> None:
    p = two(a_priority=50, b_priority=60)
    assert both_ways(p) == 1


# 4. zero allocatable share ----------------------------------------------------------------


def test_allocating_a_resource_with_zero_allocatable_share_goes_last() -> None:
    # a has no gpu share; a tiny gpu job still sends it behind b, whose dominant share (3)
    # is far higher than a's would be (0.01 * 1000 = 10 -> not what decides here)
    p = two(a_quota=(0, 4000, 4e9), b_alloc=(12, 0, 0))
    assert both_ways(p, job_a=(0.001, 0, 0), job_b=(1, 0, 0)) == 1
    # without gpu in the job, a is fine and goes first (lower dominant share)
    assert both_ways(p, job_a=(0, 1, 0), job_b=(1, 0, 0)) == -1


# 5. dominant resource share with the job ---------------------------------------------------


def test_lower_dominant_share_with_the_job_first() -> None:
    # neither starved (jobs exceed quota); a: (1 + 4) / 4 = 1.25, b: (2 + 4) / 4 = 1.5
    p = two(a_alloc=(1, 0, 0), b_alloc=(2, 0, 0))
    assert both_ways(p, job_a=(4, 0, 0), job_b=(4, 0, 0)) == -1
    # a bigger job turns it around: a (1 + 7) / 4 = 2 > 1.5
    assert both_ways(p, job_a=(7, 0, 0), job_b=(4, 0, 0)) == 1


def test_dominant_share_takes_the_max_over_resources() -> None:
    # a: gpu 1/4, cpu 3900+1000 / 4000 = 1.225 -> 1.225 ; b: gpu (2 + 4) / 4 = 1.5
    p = two(a_alloc=(1, 3900, 0), b_alloc=(2, 0, 0))
    assert both_ways(p, job_a=(0, 1000, 0), job_b=(4, 0, 0)) == -1


def test_victims_are_treated_as_removed() -> None:
    # neither starved (5 > 4, 4.5 > 4); victims do not count in the starved rule
    p = two(a_alloc=(4, 0, 0), b_alloc=(3.5, 0, 0))
    job = (1.0, 0.0, 0.0)
    assert p.compare_queues("a", "b", job, job) == 1  # 5/4 vs 4.5/4
    # with 2 GPUs of a's already chosen as victims: 3/4 vs 4.5/4
    assert p.compare_queues("a", "b", job, job, victims1=(2, 0, 0)) == -1
    assert p.compare_queues("b", "a", job, job, victims2=(2, 0, 0)) == 1


# 6. dominant share without the job --------------------------------------------------------


def test_dominant_share_without_the_job_breaks_ties() -> None:
    # with jobs: a (2 + 3) / 4 = 1.25 = b (3 + 2) / 4; without: a 0.5 < b 0.75
    p = two(a_alloc=(2, 0, 0), b_alloc=(3, 0, 0))
    assert both_ways(p, job_a=(3, 0, 0), job_b=(2, 0, 0)) == -1


# 7. dominated allocatable share first -------------------------------------------------------


def test_smaller_allocatable_share_first() -> None:
    p = two(a_quota=(6, 4000, 4e9), b_quota=(4, 4000, 4e9))
    assert both_ways(p) == 1  # b's share is dominated by a's: b first although younger


def test_incomparable_allocatable_shares_fall_back_to_age() -> None:
    p = two(a_quota=(6, 3000, 4e9), b_quota=(4, 4000, 4e9))
    assert both_ways(p) == -1


def test_unlimited_allocatable_share_dominates() -> None:
    p = two(a_quota=(-1, 4000, 4e9), b_quota=(4, 4000, 4e9))
    assert both_ways(p) == 1


# 8. age, then name -------------------------------------------------------------------------


def test_older_first_then_name() -> None:
    queues = [q("b", (1, 1, 1), rank=0), q("a", (1, 1, 1), rank=1), q("c", (1, 1, 1), rank=1)]
    p = Proportion(queues, CAPACITY, {}, {}, {}, 1.0, True)
    order = sorted(["a", "b", "c"], key=functools.cmp_to_key(p.compare_queues))
    assert order == ["b", "a", "c"]
    assert p.compare_queues("a", "a") == 0


def test_disabled_compares_only_by_age_and_name() -> None:
    p = two(a_alloc=(50, 50000, 50e9), b_priority=500, enabled=False)
    assert both_ways(p, job_a=(10, 0, 0)) == -1


# hierarchy ----------------------------------------------------------------------------------


def test_non_leaf_siblings_compare_by_rolled_up_figures() -> None:
    def dept(name: str, rank: float) -> QueueSpec:
        return QueueSpec(
            name,
            None,
            100,
            rank,
            {
                "gpu": QueueResource(4, -1, 0),
                "cpu": QueueResource(-1, -1, 0),
                "memory": QueueResource(-1, -1, 0),
            },
        )

    def team(name: str, parent: str, rank: float) -> QueueSpec:
        return QueueSpec(name, parent, 100, rank, {})

    queues = [dept("d1", 0), dept("d2", 1), team("t1", "d1", 2), team("t2", "d2", 3)]
    requested = {"t1": (10, 0, 0), "t2": (10, 0, 0)}
    p = Proportion(queues, (8, 0, 0), requested, {"t1": (3, 0, 0), "t2": (1, 0, 0)}, {}, 1.0)
    # d1 rolled up 3 + job 2 = 5 > 4 (not starved), d2 1 + 2 = 3 <= 4 (starved)
    assert p.compare_queues("d1", "d2", (2, 0, 0), (2, 0, 0)) == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_sorting_with_cmp_to_key_is_a_total_order(enabled: bool) -> None:
    queues = [
        q(f"q{i}", (i % 3, 1000 * (i % 2), 0), priority=100 + i % 2, rank=i % 4) for i in range(8)
    ]
    alloc = {f"q{i}": (i % 4, 300 * i, 0) for i in range(8)}
    p = Proportion(queues, CAPACITY, {}, alloc, {}, 1.0, enabled)
    names = [f"q{i}" for i in range(8)]
    first = sorted(names, key=functools.cmp_to_key(p.compare_queues))
    assert sorted(reversed(names), key=functools.cmp_to_key(p.compare_queues)) == first


def test_order_keys_work_in_a_heap() -> None:
    # a is over-utilized in everything, b starved, c neither but higher priority
    queues = [
        q("a", (1, 1, 1), rank=0),
        q("b", (4, 4000, 4e9), rank=1),
        q("c", (1, 1, 1), priority=200, rank=2),
    ]
    alloc = {"a": (2, 2, 2), "b": (1, 0, 0), "c": (1, 0, 0)}
    p = Proportion(queues, CAPACITY, {"a": (1, 1, 1), "b": (4, 4000, 4e9)}, alloc, {}, 1.0, True)
    heap = [p.order_key(name, (1, 0, 0)) for name in ("a", "c", "b")]
    heapq.heapify(heap)
    order = [p.names[heapq.heappop(heap).index] for _ in range(3)]
    assert order == ["b", "c", "a"]
    assert "starved=True" in repr(p.order_key("b", (1, 0, 0)))
