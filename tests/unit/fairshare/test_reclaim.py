"""Reclaim rules: the gate, both strategies judged between the siblings just
below the lowest common ancestor, chunk-by-chunk subtraction, the saturation check with its
multiplier and non-preemptible reclaimers. Figures are GPUs unless stated; cpu and memory have
unlimited quotas and nothing requested, so they are never involved.
"""

from __future__ import annotations

import pytest

from kai.scheduler.fairshare import Proportion, VictimChunk, victim_chunks
from kai.scheduler.snapshot import QueueResource, QueueSpec

Triple = tuple[float, float, float]


def q(
    name: str,
    parent: str | None,
    quota: float,
    weight: float = 1,
    limit: float = -1,
    *,
    rank: float = 0,
    cpu: tuple[float, float, float] = (-1, -1, 1),
) -> QueueSpec:
    return QueueSpec(
        name=name,
        parent=parent,
        creation_rank=rank,
        resources={
            "gpu": QueueResource(quota, limit, weight),
            "cpu": QueueResource(*cpu),
            "memory": QueueResource(-1, -1, 1),
        },
    )


def g(x: float) -> Triple:
    return (x, 0, 0)


def flat(*, v_alloc: float = 8, multiplier: float = 1.0) -> Proportion:
    """r and v, quota 2 each, 8 GPUs, both requesting 6 -> fair share 4 each."""
    return Proportion(
        [q("r", None, 2, rank=0), q("v", None, 2, rank=1)],
        (8, 0, 0),
        {"r": g(6), "v": g(max(6, v_alloc))},
        {"v": g(v_alloc)},
        {},
        reclaimer_saturation_multiplier=multiplier,
    )


# ---------------------------------------------------------------------------- gate


def test_gate_allocated_plus_request_within_fair_share() -> None:
    p = flat()
    assert p.fair_share("r")[0] == 4
    assert p.can_reclaim("r", g(4), True)
    assert not p.can_reclaim("r", g(4.5), True)
    p.on_allocate("r", g(1), True)
    assert not p.can_reclaim("r", g(4), True)


def test_gate_non_preemptible_within_deserved() -> None:
    p = flat()
    assert p.can_reclaim("r", g(2), False)
    assert not p.can_reclaim("r", g(3), False)  # within fair share 4, above quota 2
    assert p.can_reclaim("r", g(3), True)


def test_gate_checks_every_resource() -> None:
    queues = [q("r", None, 2, cpu=(1000, -1, 0)), q("v", None, 2, rank=1)]
    p = Proportion(queues, (8, 1000, 0), {"r": (2, 1000, 0)}, {}, {})
    assert p.fair_share("r") == (2, 1000, 0)
    assert p.can_reclaim("r", (2, 1000, 0), True)
    assert not p.can_reclaim("r", (2, 1001, 0), True)


# ---------------------------------------------------------------------------- strategies


def test_maintain_fair_share_allows_taking_from_a_queue_above_its_share() -> None:
    p = flat(v_alloc=8)
    assert p.reclaim_is_fair("r", g(2), [("v", g(2))])
    # chunk by chunk: 8 > 4, 7 > 4, 6 > 4, 5 > 4 -> four single GPUs are fine
    assert p.reclaim_is_fair("r", g(4), [("v", g(1))] * 4)


def test_maintain_fair_share_stops_at_the_victim_share() -> None:
    p = flat(v_alloc=8)
    # the fifth GPU would be taken while v holds 4 = its allocatable share; the reclaimer
    # (0 + 5 > quota 2) cannot invoke the quota guarantee either
    verdict = p.judge_reclaim("r", g(5), [("v", g(1))] * 5)
    assert not verdict.ok
    assert "'v'" in verdict.message


def test_a_gang_chunk_is_judged_once_before_it_is_subtracted() -> None:
    p = flat(v_alloc=5)
    p.on_allocate("r", g(1), True)  # r: 1 + 2 > quota 2, so only MaintainFairShare can apply
    # two elastic GPUs: 5 > 4 then 4 > 4 fails; one gang core of 2: 5 > 4 passes
    assert not p.reclaim_is_fair("r", g(2), victim_chunks("v", [g(1), g(1), g(1)], 1)[:2])
    assert p.reclaim_is_fair("r", g(2), [VictimChunk("v", g(2))])


def guarantee_setup() -> Proportion:
    # r quota 3 asks 3; v quota 1, weight 1 asks 10: fair r 3, v 1 + 4 = 5; v holds 5
    return Proportion(
        [q("r", None, 3, rank=0), q("v", None, 1, rank=1)],
        (8, 0, 0),
        {"r": g(3), "v": g(10)},
        {"v": g(5)},
        {},
    )


def test_guarantee_deserved_quota_takes_from_a_queue_within_its_share() -> None:
    p = guarantee_setup()
    assert p.fair_share("v")[0] == 5
    # v is not above its allocatable share (5), but above quota 1, and r stays within quota 3
    assert p.reclaim_is_fair("r", g(2), [("v", g(2))])
    assert p.reclaim_is_fair("r", g(3), [("v", g(1))] * 3)


def test_guarantee_deserved_quota_needs_the_reclaimer_within_quota() -> None:
    p = guarantee_setup()
    p.on_allocate("r", g(2), True)
    assert not p.reclaim_is_fair("r", g(2), [("v", g(2))])  # 2 + 2 > 3


def test_guarantee_deserved_quota_needs_the_victim_above_its_quota() -> None:
    p = guarantee_setup()
    # v at 5: after four single GPUs it holds 1 = its quota; the fifth is refused
    assert p.reclaim_is_fair("r", g(3), [("v", g(1))] * 3)
    assert not p.reclaim_is_fair("r", g(3), [("v", g(1))] * 5)


# ---------------------------------------------------------------------------- hierarchy


def two_departments(*, v_alloc: float = 10, r2_alloc: float = 3) -> list[QueueSpec]:
    return [
        q("D1", None, 4, weight=0, rank=0),
        q("D2", None, 4, weight=0, rank=1),
        q("r", "D1", 2, rank=2),
        q("r2", "D1", 2, rank=3),
        q("v", "D2", 4, rank=4),
    ]


def hier(*, v_alloc: float = 10, r2_alloc: float = 3, multiplier: float = 1.0) -> Proportion:
    # fair: D1 4, D2 4 (weight 0: no over-quota); r 2, r2 2; v 4
    return Proportion(
        two_departments(),
        (20, 0, 0),
        {"r": g(2), "r2": g(r2_alloc), "v": g(v_alloc)},
        {"r2": g(r2_alloc), "v": g(v_alloc)},
        {},
        reclaimer_saturation_multiplier=multiplier,
    )


def test_strategies_are_judged_between_the_departments() -> None:
    p = hier(v_alloc=10)
    assert p.can_reclaim("r", g(2), True)
    # D2 holds 10 > its allocatable 4: fine, even though v itself is judged nowhere
    assert p.reclaim_is_fair("r", g(2), [("v", g(2))])


def test_victim_department_at_its_share_is_protected() -> None:
    p = hier(v_alloc=4)
    # D2 holds 4 = allocatable; D1 (3 + 2 = 5 > quota 4) cannot claim its quota either
    assert not p.reclaim_is_fair("r", g(2), [("v", g(2))])


def test_siblings_in_one_department_are_judged_against_each_other() -> None:
    # r2 holds 5 > its share 2 inside D1: r may take from it although D1 as a whole is over
    # its own share (D1 holds 5 > 4)
    p = hier(v_alloc=4, r2_alloc=5)
    assert p.reclaim_is_fair("r", g(2), [("r2", g(2))])


def test_saturation_compares_the_departments_with_the_multiplier() -> None:
    # after the reclaim D1 holds 3 + 2 = 5 of fair 4 (1.25); D2 keeps 8 of 4 (2.0)
    assert hier(v_alloc=10, multiplier=1.0).reclaim_is_fair("r", g(2), [("v", g(2))])
    assert hier(v_alloc=10, multiplier=1.5).reclaim_is_fair("r", g(2), [("v", g(2))])
    # 1.25 * 1.6 = 2.0 >= 2.0 -> refused
    verdict = hier(v_alloc=10, multiplier=1.6).judge_reclaim("r", g(2), [("v", g(2))])
    assert not verdict.ok and "saturated" in verdict.message


def test_saturation_refuses_leaving_the_reclaimer_more_saturated() -> None:
    # D2 holds 5 > 4 (MaintainFairShare passes) but keeps 3 (0.75) while D1 reaches 1.25
    assert not hier(v_alloc=5).reclaim_is_fair("r", g(2), [("v", g(2))])


def test_multiplier_below_one_is_forced_to_one() -> None:
    p = hier(v_alloc=10, multiplier=0.1)
    assert p.reclaimer_saturation_multiplier == 1.0


def test_saturation_only_checks_involved_resources() -> None:
    # D1 has no cpu share (quota 0, weight 0) yet holds cpu; D2 holds cpu within its share.
    # If cpu were compared, D1's ratio would be infinite. It is involved only when the
    # reclaimer asks for cpu or the victim loses cpu.
    queues = [
        q("D1", None, 4, weight=0, rank=0, cpu=(0, -1, 0)),
        q("D2", None, 4, weight=0, rank=1, cpu=(1000, -1, 0)),
        q("r", "D1", 2, rank=2),
        q("r2", "D1", 2, rank=3),
        q("v", "D2", 4, rank=4),
    ]
    p = Proportion(
        queues,
        (20, 2000, 0),
        {"r": (2, 0, 0), "r2": (3, 500, 0), "v": (10, 1000, 0)},
        {"r2": (3, 500, 0), "v": (10, 1000, 0)},
        {},
    )
    assert p.fair_share("D1")[1] == 0 and p.fair_share("D2")[1] == 1000
    assert p.reclaim_is_fair("r", (2, 0, 0), [("v", (2, 0, 0))])
    assert not p.reclaim_is_fair("r", (2, 100, 0), [("v", (2, 0, 0))])
    assert not p.reclaim_is_fair("r", (2, 0, 0), [("v", (2, 10, 0))])


# ---------------------------------------------------------------------------- non-preemptible


def test_non_preemptible_reclaimer_stays_within_quota_at_the_leaf() -> None:
    p = Proportion(
        two_departments(),
        (20, 0, 0),
        {"r": g(3), "r2": g(0), "v": g(10)},
        {"r": g(1), "v": g(10)},
        {"r": g(1)},
    )
    assert p.reclaim_is_fair("r", g(1), [("v", g(1))], reclaimer_preemptible=False)
    verdict = p.judge_reclaim("r", g(2), [("v", g(2))], reclaimer_preemptible=False)
    assert not verdict.ok and "'r'" in verdict.message
    assert p.reclaim_is_fair("r", g(2), [("v", g(2))], reclaimer_preemptible=True)


def test_non_preemptible_reclaimer_stays_within_quota_at_ancestors() -> None:
    # r: 0 + 2 <= 2, but D1: 3 (r2's non-preemptible jobs) + 2 > 4
    p = Proportion(
        two_departments(),
        (20, 0, 0),
        {"r": g(2), "r2": g(3), "v": g(10)},
        {"r2": g(3), "v": g(10)},
        {"r2": g(3)},
    )
    verdict = p.judge_reclaim("r", g(2), [("v", g(2))], reclaimer_preemptible=False)
    assert not verdict.ok and "'D1'" in verdict.message
    assert not p.can_reclaim("r", g(3), False)


# ---------------------------------------------------------------------------- chunks, misc


def test_victim_chunks_split_elastic_extras_from_the_core() -> None:
    chunks = victim_chunks("v", [g(1), g(2), g(3), g(4)], 2)
    assert [(c.resources, c.elastic_extra) for c in chunks] == [
        (g(3), True),
        (g(4), True),
        ((3.0, 0.0, 0.0), False),
    ]
    assert [c.resources for c in victim_chunks("v", [g(1), g(1)], 5)] == [(2.0, 0.0, 0.0)]
    assert victim_chunks("v", [], 0) == []


def test_victims_may_be_given_as_tuples_or_chunks() -> None:
    p = flat()
    assert p.reclaim_is_fair("r", g(2), [("v", g(1), True), VictimChunk("v", {"gpu": 1})])


def test_victims_in_several_queues_do_not_depend_on_list_order() -> None:
    queues = [q("r", None, 4, rank=0), q("a", None, 1, rank=1), q("b", None, 1, rank=2)]
    p = Proportion(queues, (9, 0, 0), {"r": g(4), "a": g(4), "b": g(5)}, {"a": g(4), "b": g(5)}, {})
    victims = [("a", g(1)), ("b", g(1)), ("b", g(2)), ("a", g(2))]
    first = p.judge_reclaim("r", g(4), victims)
    assert p.judge_reclaim("r", g(4), list(reversed(victims))).ok == first.ok


def test_unknown_queues_are_refused() -> None:
    with pytest.raises(ValueError, match="'nope' does not exist"):
        flat().reclaim_is_fair("r", g(1), [("nope", g(1))])


def test_disabled_proportion_never_reclaims() -> None:
    p = Proportion(
        [q("r", None, 2), q("v", None, 2, rank=1)], (8, 0, 0), {}, {"v": g(8)}, {}, enabled=False
    )
    assert not p.can_reclaim("r", g(1), True)
    verdict = p.judge_reclaim("r", g(1), [("v", g(1))])
    assert not verdict.ok and "disabled" in verdict.message
