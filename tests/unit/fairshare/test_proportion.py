"""Proportion: roll-up, live accounting, capacity policy, clone/checkpoint."""

from __future__ import annotations

import pytest

from kai.scheduler.fairshare import NON_PREEMPTIBLE_OVER_QUOTA, OVER_LIMIT, Proportion
from kai.scheduler.snapshot import QueueResource, QueueSpec

Triple = tuple[float, float, float]
UNLIM: Triple = (-1, -1, 1)


def q(
    name: str,
    parent: str | None = None,
    *,
    gpu: Triple = UNLIM,
    cpu: Triple = UNLIM,
    memory: Triple = UNLIM,
    priority: int = 100,
    rank: float = 0,
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
    )


def tree() -> list[QueueSpec]:
    """dept (gpu quota 4, limit 6) > team-a (quota 2, limit 4), team-b (quota 2, limit -1)."""
    return [
        q("dept", gpu=(4, 6, 1)),
        q("team-a", "dept", gpu=(2, 4, 1), rank=1),
        q("team-b", "dept", gpu=(2, -1, 1), rank=2),
    ]


def prop(
    queues: list[QueueSpec] | None = None,
    *,
    capacity: Triple = (8, 64000, 256e9),
    requested: dict[str, Triple] | None = None,
    allocated: dict[str, Triple] | None = None,
    allocated_np: dict[str, Triple] | None = None,
    enabled: bool = True,
) -> Proportion:
    return Proportion(
        queues if queues is not None else tree(),
        capacity,
        requested or {},
        allocated or {},
        allocated_np or {},
        k_value=1.0,
        enabled=enabled,
    )


# ---------------------------------------------------------------------------- structure


def test_structure_helpers() -> None:
    p = prop()
    assert p.names == ("dept", "team-a", "team-b")
    assert p.is_leaf("team-a") and not p.is_leaf("dept")
    assert p.parent("team-a") == "dept" and p.parent("dept") is None
    assert p.children("dept") == ["team-a", "team-b"]
    assert p.top_level() == ["dept"]
    assert p.path("team-b") == ["dept", "team-b"]
    with pytest.raises(ValueError, match="'nope' does not exist"):
        p.path("nope")


def test_figures_roll_up_to_ancestors() -> None:
    p = prop(
        requested={"team-a": (3, 100, 0), "team-b": (2, 50, 0)},
        allocated={"team-a": (1, 100, 0), "team-b": (2, 0, 0)},
        allocated_np={"team-b": (1, 0, 0)},
    )
    assert p.requested("dept") == (5, 150, 0)
    assert p.allocated("dept") == (3, 100, 0)
    assert p.allocated_non_preemptible("dept") == (1, 0, 0)
    shares = p.queue_shares()
    assert list(shares) == ["dept", "team-a", "team-b"]
    assert shares["dept"].allocated == {"gpu": 3, "cpu": 100, "memory": 0}
    assert shares["team-a"].requested == {"gpu": 3, "cpu": 100, "memory": 0}


def test_fair_shares_are_computed_once_in_the_constructor() -> None:
    p = prop(requested={"team-a": (3, 0, 0), "team-b": (5, 0, 0)})
    # dept: min(4, 8) = 4, then over quota limited by 6 -> 6 of 8.
    # children of dept (T = 6): 2 + 2, 2 left, shares 1 each -> a 3 (= its request), b 3
    assert p.fair_share("dept")[0] == 6
    assert p.fair_share("team-a")[0] == 3
    assert p.fair_share("team-b")[0] == 3
    p.on_allocate("team-a", (3, 0, 0), True)
    assert p.fair_share("team-a")[0] == 3


def test_allocatable_share() -> None:
    queues = [
        q("a", gpu=(2, 5, 1), rank=0),  # max(2, fair) capped by 5
        q("b", gpu=(-1, 3, 1), rank=1),  # deserved -1 -> the limit
        q("c", gpu=(-1, -1, 1), rank=2),  # deserved -1, no limit -> -1 (unlimited)
    ]
    p = prop(queues, capacity=(20, 0, 0), requested={"a": (10, 0, 0)})
    assert p.allocatable_share("a")[0] == 5
    assert p.allocatable_share("b")[0] == 3
    assert p.allocatable_share("c")[0] == -1


def test_public_read_api_by_name_resource_and_index() -> None:
    p = prop(
        requested={"team-a": (3, 0, 0), "team-b": (5, 0, 0)},
        allocated={"team-a": (2, 0, 0), "team-b": (1, 0, 0)},
        allocated_np={"team-a": (1, 0, 0)},
    )
    assert p.ancestors("team-a") == ["team-a", "dept"]
    assert p.ancestors("dept") == ["dept"]
    figures = p.figures("team-a", "gpu")
    assert (figures.quota, figures.limit, figures.fair_share) == (2, 4, 3)
    assert (figures.allocatable_share, figures.requested) == (3, 3)
    assert (figures.allocated, figures.allocated_non_preemptible) == (2, 1)
    assert p.figures("team-b", "cpu").limit == -1
    with pytest.raises(ValueError, match="queue 'team-a': unknown resource 'pods'"):
        p.figures("team-a", "pods")
    # the index methods read the same figures as the name methods
    for name in p.names:
        i = p.tree.lookup(name)
        assert p.fair_share_at(i) == p.fair_share(name)
        assert p.deserved_at(i) == p.deserved(name)
        assert p.limit_at(i) == p.limit(name)
        assert p.allocatable_share_at(i) == p.allocatable_share(name)
        assert p.allocated_at(i) == p.allocated(name)
        assert p.allocated_non_preemptible_at(i) == p.allocated_non_preemptible(name)


def test_saturation_is_allocated_over_fair_share() -> None:
    p = prop(
        queues=[q("a", gpu=(0, -1, 1)), q("b", gpu=(0, -1, 0), rank=1)],
        requested={"a": (4, 0, 0), "b": (2, 0, 0)},
        allocated={"a": (2, 0, 0), "b": (1, 0, 0)},
    )
    assert p.fair_share("a")[0] == 4 and p.fair_share("b")[0] == 0
    assert p.saturation("a")[0] == 0.5
    assert p.saturation("a", (2, 0, 0))[0] == 1.0
    assert p.saturation("b")[0] == float("inf")  # something allocated on a zero share
    assert p.saturation("a")[1] == 0.0  # cpu: unlimited share


# ---------------------------------------------------------------------------- accounting


def test_live_accounting_rolls_up_and_reverses() -> None:
    p = prop()
    p.on_allocate("team-a", (1, 500, 1e9), preemptible=True)
    p.on_allocate("team-a", {"gpu": 0.5, "cpu": 100, "pods": 1}, preemptible=False)
    assert p.allocated("team-a") == (1.5, 600, 1e9)
    assert p.allocated("dept") == (1.5, 600, 1e9)
    assert p.allocated_non_preemptible("dept") == (0.5, 100, 0)
    assert p.allocated("team-b") == (0, 0, 0)
    p.on_deallocate("team-a", (0.5, 100, 0), preemptible=False)
    p.on_deallocate("team-a", (1, 500, 1e9), preemptible=True)
    assert p.allocated("dept") == (0, 0, 0)
    assert p.allocated_non_preemptible("team-a") == (0, 0, 0)


def test_bad_resource_vector_is_refused() -> None:
    with pytest.raises(ValueError, match="3 entries"):
        prop().on_allocate("team-a", (1, 2), True)


def test_clone_is_independent() -> None:
    p = prop(allocated={"team-a": (1, 0, 0)})
    c = p.clone()
    c.on_allocate("team-a", (2, 0, 0), True)
    assert p.allocated("team-a") == (1, 0, 0)
    assert c.allocated("team-a") == (3, 0, 0)
    assert c.fair_share("dept") == p.fair_share("dept")


def test_save_and_restore_state() -> None:
    p = prop()
    state = p.save_state()
    p.on_allocate("team-b", (2, 0, 0), False)
    p.restore_state(state)
    assert p.allocated("dept") == (0, 0, 0)
    assert p.allocated_non_preemptible("team-b") == (0, 0, 0)
    with pytest.raises(ValueError, match="different queue tree"):
        p.restore_state(([0.0], [0.0]))


# ---------------------------------------------------------------------------- capacity policy


def test_over_limit_at_the_leaf() -> None:
    p = prop(allocated={"team-a": (3, 0, 0)})
    assert p.check_job_capacity("team-a", (1, 0, 0), True) is None  # 3 + 1 <= 4
    reason = p.check_job_capacity("team-a", (2, 0, 0), True)
    assert reason is not None and reason.code == OVER_LIMIT
    assert "team-a" in reason.message and "gpu" in reason.message
    assert reason.details == {
        "queue": "team-a",
        "resource": "gpu",
        "limit": 4,
        "allocated": 3,
        "requested": 2,
    }


def test_over_limit_at_an_ancestor() -> None:
    # team-b has no limit, but dept's limit 6 is reached with team-a's 4
    p = prop(allocated={"team-a": (4, 0, 0), "team-b": (1, 0, 0)})
    assert p.check_job_capacity("team-b", (1, 0, 0), True) is None
    reason = p.check_job_capacity("team-b", (2, 0, 0), True)
    assert reason is not None and reason.code == OVER_LIMIT
    assert reason.details["queue"] == "dept"


def test_zero_limit_refuses_any_non_zero_request_but_not_zero_requests() -> None:
    queues = [q("a", gpu=(0, 0, 1), cpu=(0, -1, 1))]
    p = prop(queues)
    assert p.check_job_capacity("a", (0, 1000, 0), True) is None
    reason = p.check_job_capacity("a", (0.1, 0, 0), True)
    assert reason is not None and reason.code == OVER_LIMIT


def test_limit_is_checked_per_resource() -> None:
    queues = [q("a", cpu=(0, 2000, 1))]
    p = prop(queues, allocated={"a": (0, 1500, 0)})
    reason = p.check_job_capacity("a", (4, 600, 0), True)
    assert reason is not None and reason.details["resource"] == "cpu"


def test_non_preemptible_over_quota_at_every_level() -> None:
    p = prop(allocated_np={"team-a": (2, 0, 0), "team-b": (1, 0, 0)})
    # team-b: 1 + 1 <= 2, dept: 3 + 1 <= 4
    assert p.check_job_capacity("team-b", (1, 0, 0), False) is None
    # preemptible jobs are not bound by quota
    assert p.check_job_capacity("team-b", (2, 0, 0), True) is None
    reason = p.check_job_capacity("team-b", (2, 0, 0), False)
    assert reason is not None and reason.code == NON_PREEMPTIBLE_OVER_QUOTA
    assert reason.details["queue"] == "team-b"
    # team-a may not: its own quota is full
    reason = p.check_job_capacity("team-a", (1, 0, 0), False)
    assert reason is not None and reason.details["queue"] == "team-a"


def test_non_preemptible_over_quota_at_the_ancestor_only() -> None:
    queues = [
        q("dept", gpu=(2, -1, 1)),
        q("team-a", "dept", gpu=(2, -1, 1), rank=1),
        q("team-b", "dept", gpu=(2, -1, 1), rank=2),
    ]
    p = prop(queues, allocated_np={"team-a": (2, 0, 0)})
    reason = p.check_job_capacity("team-b", (1, 0, 0), False)
    assert reason is not None and reason.details["queue"] == "dept"
    assert p.check_non_preemptible_quota("team-b", (1, 0, 0), False) == reason
    assert p.check_non_preemptible_quota("team-b", (1, 0, 0), True) is None


def test_unlimited_quota_never_limits_non_preemptible_jobs() -> None:
    p = prop([q("a")], allocated_np={"a": (100, 0, 0)})
    assert p.check_job_capacity("a", (100, 0, 0), False) is None


def test_over_limit_is_reported_before_non_preemptible_quota() -> None:
    queues = [q("a", gpu=(1, 2, 1))]
    p = prop(queues, allocated={"a": (2, 0, 0)}, allocated_np={"a": (1, 0, 0)})
    reason = p.check_job_capacity("a", (1, 0, 0), False)
    assert reason is not None and reason.code == OVER_LIMIT


def test_accumulated_fractions_do_not_break_an_exact_limit() -> None:
    p = prop([q("a", gpu=(0, 1, 1))])
    for _ in range(7):
        p.on_allocate("a", (0.1, 0, 0), True)
    assert p.check_job_capacity("a", (0.3, 0, 0), True) is None
    assert p.check_job_capacity("a", (0.31, 0, 0), True) is not None


def test_disabled_proportion_imposes_nothing() -> None:
    p = prop(allocated={"team-a": (10, 0, 0)}, allocated_np={"team-a": (10, 0, 0)}, enabled=False)
    assert p.check_job_capacity("team-a", (5, 0, 0), False) is None
    assert p.check_non_preemptible_quota("team-a", (5, 0, 0), False) is None
    assert p.can_reclaim("team-a", (0, 0, 0), True) is False
