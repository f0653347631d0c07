"""Worked examples of the fair-share division, numbers computed by hand.

Notation in comments: T = amount of the level; phase 1 gives min(deserved, requestable);
phase 2 shares the rest by weight in whole units (leftovers recorded); phase 3 hands out
min(1, remaining) per leftover, largest first, ties by age then name.
"""

from __future__ import annotations

import pytest

from kai.scheduler.fairshare import ShareInput, divide, divide_level
from kai.scheduler.snapshot import QueueResource, QueueSpec

BIG = 100.0


def s(
    name: str,
    *,
    deserved: float = 0,
    limit: float = -1,
    weight: float = 1,
    priority: int = 100,
    rank: float = 0,
    requested: float = BIG,
    usage: float = 0.0,
) -> ShareInput:
    return ShareInput(name, deserved, limit, weight, priority, rank, requested, usage)


# ---------------------------------------------------------------------------- phase 1


def test_phase1_is_not_capped_by_capacity() -> None:
    # deserved 8 + 8 over T = 10: both keep their quota, the sum exceeds the capacity
    shares = divide_level([s("a", deserved=8), s("b", deserved=8, rank=1)], 10)
    assert shares == {"a": 8, "b": 8}


def test_phase1_is_capped_by_request() -> None:
    # a: min(8, 3) = 3; the other 7 go to b in phase 2
    shares = divide_level([s("a", deserved=8, requested=3), s("b", rank=1)], 10)
    assert shares == {"a": 3, "b": 7}


def test_phase1_is_capped_by_limit_below_quota() -> None:
    # requestable = min(limit 3, request 10) = 3 < deserved 5
    assert divide_level([s("a", deserved=5, limit=3, requested=10)], 10) == {"a": 3}


def test_unlimited_quota_takes_the_whole_level_up_to_request() -> None:
    # a: deserved -1 = T = 10, capped by its request 4; b gets the remaining 6 over quota
    shares = divide_level([s("a", deserved=-1, requested=4), s("b", rank=1)], 10)
    assert shares == {"a": 4, "b": 6}


def test_unlimited_quota_with_big_request_oversubscribes_with_other_quotas() -> None:
    # a: min(T=10, 30) = 10, b: min(2, 100) = 2 -> 12 > 10, nothing left for phase 2
    shares = divide_level([s("a", deserved=-1, requested=30), s("b", deserved=2, rank=1)], 10)
    assert shares == {"a": 10, "b": 2}


def test_zero_request_gets_nothing_even_with_quota() -> None:
    assert divide_level([s("a", deserved=4, requested=0), s("b", rank=1)], 10) == {
        "a": 0,
        "b": 10,
    }


# ---------------------------------------------------------------------------- phase 2 and 3


def test_equal_weights_floor_then_leftover_to_the_oldest() -> None:
    # 10 / 3 = 3.33 each -> 3 each, leftovers 0.33 each, 1 left -> oldest (rank 0)
    shares = divide_level([s("a"), s("b", rank=1), s("c", rank=2)], 10)
    assert shares == {"a": 4, "b": 3, "c": 3}


def test_leftover_tie_goes_to_the_older_queue_whatever_its_name() -> None:
    shares = divide_level([s("a", rank=2), s("b", rank=1), s("c", rank=0)], 10)
    assert shares == {"a": 3, "b": 3, "c": 4}


def test_leftover_tie_with_equal_age_goes_by_name() -> None:
    shares = divide_level([s("zeta"), s("alpha"), s("mid")], 10)
    assert shares == {"alpha": 4, "mid": 3, "zeta": 3}


def test_weights_are_proportional() -> None:
    # phase 1: 2 + 2; 4 left, weights 1:3 -> 1 and 3
    shares = divide_level(
        [s("a", deserved=2, requested=6), s("b", deserved=2, weight=3, requested=6, rank=1)], 8
    )
    assert shares == {"a": 3, "b": 5}


def test_largest_leftover_beats_age() -> None:
    # phase 1: 2 + 2; 7 left, weights 1:4 -> 1.4 and 5.6 -> 1 and 5, leftovers .4 and .6;
    # the last unit goes to b (largest leftover) although a is older
    shares = divide_level(
        [
            s("a", deserved=2, weight=1, requested=10, rank=0),
            s("b", deserved=2, weight=4, requested=10, rank=1),
        ],
        11,
    )
    assert shares == {"a": 3, "b": 8}


def test_rounds_repeat_when_a_queue_asks_for_less_than_its_share() -> None:
    # round 1: share 3.33; a takes its 1 (asked less -> another round), b, c take 3 each
    # (leftovers .33); 3 left. Round 2: b, c share 1.5 -> 1 each, leftovers now .5 each;
    # 1 left -> b (older).
    shares = divide_level([s("a", requested=1), s("b", rank=1), s("c", rank=2)], 10)
    assert shares == {"a": 1, "b": 5, "c": 4}


def test_leftovers_are_handed_out_one_unit_each_once() -> None:
    # 4 queues, T = 7: share 1.75 -> 1 each, leftovers .75 each; 3 units left -> the three
    # oldest get one each, the youngest none
    shares = divide_level([s(n, rank=r) for r, n in enumerate("abcd")], 7)
    assert shares == {"a": 2, "b": 2, "c": 2, "d": 1}


def test_fractional_leftover_is_given_as_a_fraction() -> None:
    # phase 1: 3; 0.5 left: share 0.5 < wanted 2 -> floor 0, leftover 0.5 -> phase 3 gives 0.5
    assert divide_level([s("a", deserved=3, requested=5)], 3.5) == {"a": 3.5}


def test_fractional_request_is_met_exactly() -> None:
    # phase 1: 3; 2 left, wanted 1.5 <= 2 -> 1.5
    assert divide_level([s("a", deserved=3, requested=4.5)], 5) == {"a": 4.5}


def test_share_below_one_unit_goes_through_leftovers() -> None:
    # KAI: T = 5, two priority-2 queues quota 2, weight 2, request 5; one priority-1 queue
    # quota 1 request 0. Phase 1: 2, 2, 0; 1 left: shares 0.5 -> floor 0, leftovers .5 each
    # -> the older gets the unit.
    shares = divide_level(
        [
            s("q1", deserved=2, weight=2, requested=5, priority=2, rank=0),
            s("q2", deserved=2, weight=2, requested=5, priority=2, rank=1),
            s("q3", deserved=1, weight=2, requested=0, priority=1, rank=2),
        ],
        5,
    )
    assert shares == {"q1": 3, "q2": 2, "q3": 0}


def test_phase3_grant_is_capped_by_the_remaining_request() -> None:
    # Deviation from KAI (documented): T = 4.6, a requests 2.5, b 10: shares 2.3 -> 2 each,
    # leftovers .3 each, 0.6 left. a (older) may only take 0.5 more (KAI would give 0.6 and
    # exceed the request); b gets the last 0.1.
    shares = divide_level([s("a", requested=2.5), s("b", requested=10, rank=1)], 4.6)
    assert shares["a"] == pytest.approx(2.5)
    assert shares["b"] == pytest.approx(2.1)


# ---------------------------------------------------------------------------- priorities


def test_priority_buckets_are_strict() -> None:
    # phase 1: 2 + 2; the 2 left all go to the higher bucket although the lower has weight 100
    shares = divide_level(
        [
            s("hi", deserved=2, priority=200, rank=1),
            s("lo", deserved=2, weight=100, priority=100, rank=0),
        ],
        6,
    )
    assert shares == {"hi": 4, "lo": 2}


def test_lower_bucket_gets_what_the_higher_cannot_absorb() -> None:
    shares = divide_level([s("hi", priority=200, requested=3), s("lo", rank=1)], 10)
    assert shares == {"hi": 3, "lo": 7}


def test_priority_does_not_change_phase1() -> None:
    shares = divide_level(
        [s("a", deserved=2, priority=1), s("b", deserved=2, priority=2, rank=1)], 4
    )
    assert shares == {"a": 2, "b": 2}


def test_leftovers_of_a_bucket_are_handed_out_before_the_next_bucket() -> None:
    # bucket 200: shares 2.5 -> 2 each, leftovers .5; 1 unit left goes to h1 in phase 3 of
    # that bucket; nothing remains for the lower bucket
    shares = divide_level(
        [s("h1", priority=200), s("h2", priority=200, rank=1), s("low", rank=2)], 5
    )
    assert shares == {"h1": 3, "h2": 2, "low": 0}


# ---------------------------------------------------------------------------- weights, limits


def test_weight_zero_gets_no_over_quota_share() -> None:
    # a keeps min(quota 2, request); b takes what it asks (5); 3 stay undivided because only
    # a still wants more and its weight is 0
    shares = divide_level([s("a", deserved=2, weight=0), s("b", requested=5, rank=1)], 10)
    assert shares == {"a": 2, "b": 5}


def test_only_weight_zero_queues_leave_the_rest_undivided() -> None:
    assert divide_level([s("a", deserved=1, weight=0), s("b", weight=0, rank=1)], 10) == {
        "a": 1,
        "b": 0,
    }


def test_negative_weight_counts_as_zero() -> None:
    assert divide_level([s("a", weight=-1), s("b", rank=1, requested=4)], 10) == {
        "a": 0,
        "b": 4,
    }


def test_limit_caps_the_over_quota_share() -> None:
    # phase 1: 2 + 2; 8 left, shares 4: a may only take 3 more (limit 5, asks less ->
    # another round), b takes 4 = its remaining request; 1 left, nobody wants it
    shares = divide_level(
        [
            s("a", deserved=2, weight=2, requested=6, limit=5),
            s("b", deserved=2, weight=2, requested=6, rank=1),
        ],
        12,
    )
    assert shares == {"a": 5, "b": 6}


def test_limit_redistributes_to_others() -> None:
    # shares 5 each: a asks 2 (limit) -> another round gives b the 3 a left
    shares = divide_level([s("a", limit=2), s("b", rank=1)], 10)
    assert shares == {"a": 2, "b": 8}


# ---------------------------------------------------------------------------- time-based


def test_usage_shifts_the_over_quota_share() -> None:
    # w' = .5 each; s_a = .5 + 1 * (.5 - .5) = .5, s_b = .5 + .5 = 1 -> 10 * .5/1.5 = 3.33 -> 3
    # and 6.67 -> 6; the last unit goes to b (leftover .67 > .33)
    shares = divide_level([s("a", usage=0.5), s("b", rank=1)], 10, k_value=1.0)
    assert shares == {"a": 3, "b": 7}


def test_k_zero_ignores_usage() -> None:
    assert divide_level([s("a", usage=0.5), s("b", rank=1)], 10, k_value=0.0) == {
        "a": 5,
        "b": 5,
    }


@pytest.mark.parametrize("k", [0.0, 1.0, 3.0])
def test_without_usage_k_has_no_effect(k: float) -> None:
    shares = divide_level([s("a", weight=1), s("b", weight=3, rank=1)], 8, k_value=k)
    assert shares == {"a": 2, "b": 6}


def test_share_weight_is_clamped_at_zero_and_renormalised() -> None:
    # s_a = max(0, .5 + (.5 - 2)) = 0, s_b = 1: b takes all 10, a nothing (no leftover)
    shares = divide_level([s("a", usage=2.0), s("b", rank=1)], 10)
    assert shares == {"a": 0, "b": 10}


def test_heavy_usage_leftover_can_still_win_phase3() -> None:
    # s_a = .5 + (.5 - .9) = .1, s_b = 1: a 10 * .1/1.1 = .91 -> 0 (leftover .91),
    # b 9.09 -> 9 (leftover .09); 1 left -> a (largest leftover)
    shares = divide_level([s("a", usage=0.9), s("b", rank=1)], 10)
    assert shares == {"a": 1, "b": 9}


def test_negative_k_is_clamped_to_zero() -> None:
    assert divide_level([s("a", usage=0.5), s("b", rank=1)], 10, k_value=-2) == {
        "a": 5,
        "b": 5,
    }


# ---------------------------------------------------------------------------- edge cases


def test_nothing_to_divide() -> None:
    assert divide_level([s("a", deserved=2)], 0) == {"a": 2}  # phase 1 still gives quota
    assert divide_level([s("a")], 0) == {"a": 0}
    assert divide_level([], 10) == {}


def test_negative_amount_is_divided_as_zero() -> None:
    assert divide_level([s("a", deserved=-1, requested=5)], -3) == {"a": 0}


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        divide_level([s("a"), s("a", rank=1)], 10)


def test_memory_bytes_are_floored_in_raw_units() -> None:
    # 3 queues over 10 GB: floor applies to bytes, so at most 2 bytes are handed as leftovers
    t = 10_000_000_000.0
    shares = divide_level(
        [s("a", requested=t), s("b", requested=t, rank=1), s("c", requested=t, rank=2)], t
    )
    assert shares == {"a": 3_333_333_334, "b": 3_333_333_333, "c": 3_333_333_333}


# ---------------------------------------------------------------------------- trees


def q(
    name: str,
    parent: str | None = None,
    *,
    gpu: tuple[float, float, float] = (0, -1, 1),
    cpu: tuple[float, float, float] = (-1, -1, 1),
    memory: tuple[float, float, float] = (-1, -1, 1),
    priority: int = 100,
    rank: float = 0,
    usage: dict[str, float] | None = None,
) -> QueueSpec:
    return QueueSpec(
        name=name,
        parent=parent,
        priority=priority,
        creation_rank=rank,
        resources={
            "gpu": QueueResource(*gpu),
            "cpu": QueueResource(*cpu),
            "memory": QueueResource(*memory),
        },
        usage=usage or {},
    )


def test_three_level_tree_children_divide_the_parent_fair_share() -> None:
    # level 1: r (quota -1) takes min(16, 33) = 16.
    # level 2 (T = 16): A, B quota 4 each; 8 left, weights 1:3 -> 2 and 6 -> A 6, B 10.
    # level 3 under A (T = 6): a1 quota 2; 4 left, shares 2 each -> a1 4, a2 2.
    # level 3 under B (T = 10): b1 takes 10 of its 20.
    queues = [
        q("r", gpu=(-1, -1, 1)),
        q("A", "r", gpu=(4, -1, 1), rank=1),
        q("B", "r", gpu=(4, -1, 3), rank=2),
        q("a1", "A", gpu=(2, -1, 1), rank=3),
        q("a2", "A", gpu=(0, -1, 1), rank=4),
        q("b1", "B", gpu=(0, -1, 1), rank=5),
    ]
    requested = {
        "a1": (10, 0, 0),
        "a2": (3, 0, 0),
        "A": (13, 0, 0),
        "b1": (20, 0, 0),
        "B": (20, 0, 0),
        "r": (33, 0, 0),
    }
    shares = divide(queues, (16, 0, 0), requested)
    assert {n: v["gpu"] for n, v in shares.items()} == {
        "r": 16,
        "A": 6,
        "B": 10,
        "a1": 4,
        "a2": 2,
        "b1": 10,
    }


def test_child_unlimited_quota_means_the_parent_fair_share() -> None:
    # A gets quota 3 of 10 (b takes the other 7); a1 (quota -1) takes min(A's 3, 5) = 3
    queues = [
        q("A", gpu=(3, -1, 0)),
        q("B", gpu=(0, -1, 1), rank=1),
        q("a1", "A", gpu=(-1, -1, 1), rank=2),
    ]
    requested = {"A": (5, 0, 0), "a1": (5, 0, 0), "B": (100, 0, 0)}
    shares = divide(queues, {"gpu": 10}, requested)
    assert shares["A"]["gpu"] == 3
    assert shares["B"]["gpu"] == 7
    assert shares["a1"]["gpu"] == 3


def test_children_can_exceed_the_parent_through_phase1() -> None:
    # the parent's fair share is 4 but its children's quotas (3 + 3) are both requested
    queues = [q("P", gpu=(4, -1, 0)), q("c1", "P", gpu=(3, -1, 1)), q("c2", "P", gpu=(3, -1, 1))]
    requested = {"P": (6, 0, 0), "c1": (3, 0, 0), "c2": (3, 0, 0)}
    shares = divide(queues, (10, 0, 0), requested)
    assert shares["P"]["gpu"] == 4
    assert shares["c1"]["gpu"] + shares["c2"]["gpu"] == 6


def test_resources_are_divided_independently() -> None:
    queues = [
        q("a", gpu=(1, -1, 1), cpu=(1000, -1, 1), memory=(0, -1, 0)),
        q("b", gpu=(0, -1, 1), cpu=(0, -1, 3), memory=(0, -1, 1), rank=1),
    ]
    requested = {"a": (5, 8000, 10), "b": (5, 8000, 10)}
    shares = divide(queues, (4, 5000, 10), requested)
    # gpu: 1 + 0, 3 left by 1:1 -> 1.5 -> 1 each, leftovers -> a (older): a 3, b 1
    # cpu: 1000 + 0, 4000 left by 1:3 -> 1000 and 3000: a 2000, b 3000
    # memory: a has weight 0 -> b takes 10
    assert shares["a"] == {"gpu": 3, "cpu": 2000, "memory": 0}
    assert shares["b"] == {"gpu": 1, "cpu": 3000, "memory": 10}


def test_usage_comes_from_the_queue_spec_by_default() -> None:
    queues = [q("a", usage={"gpu": 0.5}), q("b", rank=1)]
    requested = {"a": (100, 0, 0), "b": (100, 0, 0)}
    assert divide(queues, (10, 0, 0), requested)["a"]["gpu"] == 3
    override = {"a": {"gpu": 0.0}}
    assert divide(queues, (10, 0, 0), requested, usage=override)["a"]["gpu"] == 5


def test_missing_resource_entry_uses_queue_resource_defaults() -> None:
    spec = QueueSpec(name="a", parent=None, resources={})
    shares = divide([spec], (4, 4, 4), {"a": (10, 10, 10)})
    # quota 0, limit -1, weight 1 -> everything over quota
    assert shares["a"] == {"gpu": 4, "cpu": 4, "memory": 4}


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([q("a", "nope")], "parent 'nope' does not exist"),
        ([q("a"), q("a", rank=1)], "duplicate"),
        ([q("a", "b"), q("b", "a")], "cycle"),
        ([q("a", "a")], "itself"),
    ],
)
def test_bad_trees_are_refused(queues: list[QueueSpec], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        divide(queues, (1, 1, 1), {})


def test_requested_for_an_unknown_queue_is_refused() -> None:
    with pytest.raises(ValueError, match="'ghost' does not exist"):
        divide([q("a")], (1, 1, 1), {"ghost": (1, 0, 0)})


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"gpu": QueueResource(-2, -1, 1)}, r"resources.gpu.quota: must be >= 0 or -1, got -2"),
        ({"cpu": QueueResource(0, float("nan"), 1)}, r"resources.cpu.limit"),
        ({"memory": QueueResource(0, -1, -0.5)}, r"resources.memory.over_quota_weight"),
        ({"pods": QueueResource(0, -1, 1)}, r"resources.pods: unknown resource"),
    ],
)
def test_bad_queue_values_are_refused(resources: dict[str, QueueResource], message: str) -> None:
    spec = QueueSpec(name="a", parent=None, resources=resources)
    with pytest.raises(ValueError, match=message):
        divide([spec], (1, 1, 1), {})


def test_bad_usage_is_refused() -> None:
    spec = QueueSpec(name="a", parent=None, usage={"gpu": float("inf")})
    with pytest.raises(ValueError, match=r"usage.gpu"):
        divide([spec], (1, 1, 1), {})
