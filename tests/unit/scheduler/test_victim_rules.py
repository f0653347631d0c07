"""Rules of the victim search that the scenario format cannot express: min-runtime protection
(per queue, inherited, ``lca`` / ``queue`` resolution, scheduler defaults), preemption delay,
per-job staleness grace, and the units a victim job is cut into (elastic extras, surplus
subgroup members, the gang)."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, node, queue, statuses, task

from kai.scheduler.plugins.min_runtime import reclaim_min_runtime
from kai.scheduler.plugins.preemption_delay import PREEMPTION_DELAY_NOT_ELAPSED, delay_ends
from kai.scheduler.session import Session, run_session
from kai.scheduler.snapshot import QueueSpec, Snapshot, SubGroupSpec
from kai.scheduler.victims import CORE, EXTRA, MEMBER, job_units


def _preempt_case(**config: object) -> Snapshot:
    """One 2-GPU node held by two priority-50 jobs started 30 s ago; a priority-75 job waits."""
    running = [
        job("r0", [task("r0-0", status="Running", node_name="n0")], age=10),
        job("r1", [task("r1-0", status="Running", node_name="n0")], age=5),
    ]
    for j in running:
        j.last_start_time = -30.0
    pending = job("p0", [task("p0-0")], priority=75, age=1)
    return cluster([node("n0", gpus=2)], [*running, pending], None, **config)


def _with_queue(snap: Snapshot, **fields: object) -> Snapshot:
    snap.queues = [replace(q, **fields) for q in snap.queues]  # type: ignore[arg-type]
    return snap


# ------------------------------------------------------------------ min-runtime
def test_preempt_min_runtime_protects_a_recently_started_victim() -> None:
    snap = _with_queue(_preempt_case(), preempt_min_runtime=60.0)
    result = run_session(snap, ["preempt"])
    assert statuses(result)["p0-0"] == ("Pending", None)
    assert not result.evictions


def test_preempt_min_runtime_elapsed_allows_preemption() -> None:
    snap = _with_queue(_preempt_case(), preempt_min_runtime=20.0)
    result = run_session(snap, ["preempt"])
    assert statuses(result)["r1-0"] == ("Releasing", "n0")
    assert statuses(result)["p0-0"] == ("Pipelined", "n0")


def test_preempt_min_runtime_inherited_from_the_parent_queue() -> None:
    snap = _preempt_case()
    snap.queues = [
        replace(queue("top"), preempt_min_runtime=60.0),
        queue("q", parent="top"),
    ]
    assert not run_session(snap, ["preempt"]).evictions


def test_preempt_min_runtime_default_from_the_scheduler_config() -> None:
    assert not run_session(_preempt_case(default_preempt_min_runtime=60.0), ["preempt"]).evictions
    assert run_session(_preempt_case(default_preempt_min_runtime=10.0), ["preempt"]).evictions


def test_a_job_that_never_started_is_not_protected() -> None:
    snap = _with_queue(_preempt_case(), preempt_min_runtime=600.0)
    for j in snap.jobs:
        j.last_start_time = None
    assert run_session(snap, ["preempt"]).evictions


def test_protected_elastic_victim_loses_extras_but_never_its_gang() -> None:
    elastic = job(
        "e0",
        [task(f"e0-{i}", status="Running", node_name="n0") for i in range(4)],
        min_available=2,
        age=10,
    )
    elastic.last_start_time = -30.0
    two = job("p0", [task("p0-0", gpus=2)], priority=75, age=1)
    snap = _with_queue(cluster([node("n0", gpus=4)], [elastic, two]), preempt_min_runtime=60.0)
    got = statuses(run_session(snap, ["preempt"]))
    assert [got[f"e0-{i}"][0] for i in range(4)] == ["Running", "Running", "Releasing", "Releasing"]
    assert got["p0-0"] == ("Pipelined", "n0")
    three = job("p0", [task("p0-0", gpus=3)], priority=75, age=1)
    snap = _with_queue(cluster([node("n0", gpus=4)], [elastic, three]), preempt_min_runtime=60.0)
    assert not run_session(snap, ["preempt"]).evictions


def _resolution_tree() -> list[QueueSpec]:
    # o0 -> d0 -> {r, d1 -> v}: the victim's own leaf says 300 s, its department nothing, the
    # common ancestor d0 says 10 s.
    return [
        queue("o0"),
        replace(queue("d0", parent="o0"), reclaim_min_runtime=10.0),
        queue("r", parent="d0"),
        queue("d1", parent="d0"),
        replace(queue("v", parent="d1"), reclaim_min_runtime=300.0),
    ]


def test_reclaim_min_runtime_lca_resolution_starts_below_the_common_ancestor() -> None:
    snap = cluster([node("n0")], [job("j", [task("j-0")], queue_name="r")], _resolution_tree())
    session = Session(snap)
    # lca: one level below d0 towards the victim is d1 (nothing), then d0: 10 s
    assert reclaim_min_runtime(session, "r", "v") == 10.0


def test_reclaim_min_runtime_queue_resolution_starts_at_the_victim_leaf() -> None:
    snap = cluster(
        [node("n0")],
        [job("j", [task("j-0")], queue_name="r")],
        _resolution_tree(),
        reclaim_min_runtime_resolve="queue",
    )
    assert reclaim_min_runtime(Session(snap), "r", "v") == 300.0


def test_reclaim_min_runtime_across_top_level_trees_uses_the_victim_top_or_default() -> None:
    queues = [
        replace(queue("a"), reclaim_min_runtime=5.0),
        queue("b"),
        replace(queue("b1", parent="b"), reclaim_min_runtime=99.0),
    ]
    snap = cluster(
        [node("n0")],
        [job("j", [task("j-0")], queue_name="a")],
        queues,
        default_reclaim_min_runtime=42.0,
    )
    session = Session(snap)
    assert reclaim_min_runtime(session, "a", "b1") == 42.0  # b has none: the default
    assert reclaim_min_runtime(session, "b1", "a") == 5.0


# ------------------------------------------------------------------ preemption delay
def test_preemption_delay_keeps_a_young_job_from_evicting() -> None:
    snap = _preempt_case()
    pending = snap.jobs[-1]
    pending.preemption_delay = 300.0  # created 60 s ago
    result = run_session(snap, ["preempt", "reclaim", "consolidation"])
    assert not result.evictions
    assert [r.code for r in result.job_reasons["p0"]] == [PREEMPTION_DELAY_NOT_ELAPSED]


def test_preemption_delay_elapsed_and_reanchored_by_the_last_eviction() -> None:
    snap = _preempt_case()
    pending = snap.jobs[-1]
    pending.preemption_delay = 30.0  # created 60 s ago: elapsed
    assert run_session(snap, ["preempt"]).evictions
    pending.last_eviction_time = -10.0  # evicted 10 s ago: waits again until t = 20
    assert delay_ends(pending) == 20.0
    assert not run_session(snap, ["preempt"]).evictions


def test_preemption_delay_does_not_delay_allocate_and_non_positive_means_none() -> None:
    free = job("p", [task("p-0")], age=1)
    free.preemption_delay = 600.0
    result = run_session(cluster([node("n0")], [free]), ["allocate"])
    assert statuses(result)["p-0"] == ("Binding", "n0")
    free.preemption_delay = -5.0
    assert delay_ends(free) is None


# ------------------------------------------------------------------ staleness grace
def _stale(grace: float | None, stale_for: float, config_grace: float = 60.0) -> Snapshot:
    gang = job(
        "g",
        [task("g-0", status="Running", node_name="n0"), task("g-1"), task("g-2")],
        min_available=3,
    )
    gang.stale_since = -stale_for
    gang.staleness_grace_period = grace
    return cluster([node("n0", gpus=1)], [gang], staleness_grace_period=config_grace)


def _evicted(snap: Snapshot) -> bool:
    return statuses(run_session(snap, ["stalegangeviction"]))["g-0"][0] == "Releasing"


def test_staleness_grace_of_the_job_overrides_the_scheduler_default() -> None:
    assert _evicted(_stale(None, 120))
    assert not _evicted(_stale(300, 120))
    assert _evicted(_stale(0, 0, config_grace=60))


def test_negative_staleness_grace_never_evicts() -> None:
    assert not _evicted(_stale(-1, 10_000, config_grace=0))
    assert not _evicted(_stale(None, 10_000, config_grace=-1))


# ------------------------------------------------------------------ victim units
def test_units_of_a_job_with_subgroups_extras_then_surplus_member_then_gang() -> None:
    groups = [SubGroupSpec("a", None, 1), SubGroupSpec("b", None, 1)]
    tasks = [
        task("v-a0", status="Running", node_name="n0", subgroup="a"),
        task("v-a1", status="Running", node_name="n0", subgroup="a"),
        task("v-b0", status="Running", node_name="n0", subgroup="b"),
    ]
    victim = job("v", tasks, subgroups=groups, min_subgroup=1)
    session = Session(cluster([node("n0")], [victim]))
    units = job_units(session, session.jobs[0])
    assert [(u.kind, [t.uid for t in u.tasks]) for u in units] == [
        (EXTRA, ["v-a1"]),
        (MEMBER, ["v-b0"]),
        (CORE, ["v-a0"]),
    ]
    protected = job_units(session, session.jobs[0], extras_only=True)
    assert [u.kind for u in protected] == [EXTRA, MEMBER]


# ------------------------------------------------------------------ the stability replay
def _room_taker_case(u0_delayed: bool) -> Snapshot:
    """q0 (quota 0) holds both GPUs; q1's p0 may reclaim one. q2 (queue priority 200) has u0,
    which allocate would serve first next cycle; with a preemption delay u0 cannot reclaim now."""
    victims = [
        job("v0", [task("v0-0", status="Running", node_name="n0")], queue_name="q0", age=20),
        job("v1", [task("v1-0", status="Running", node_name="n0")], queue_name="q0", age=10),
    ]
    p0 = job("p0", [task("p0-0")], queue_name="q1", age=5)
    u0 = job("u0", [task("u0-0")], queue_name="q2", age=5)
    if u0_delayed:
        u0.preemption_delay = 3600.0
    queues = [
        queue("q0", gpu=(0, -1, 1), rank=0),
        queue("q1", gpu=(1, -1, 1), rank=1),
        queue("q2", gpu=(1, -1, 1), rank=2, priority=200),
    ]
    return cluster([node("n0", gpus=2)], [*victims, p0, u0], queues)


def test_room_taken_by_a_more_deserving_job_does_not_block_a_reclaim() -> None:
    # the next cycle's allocate would give v1's GPU to u0 first: that is progress, not a loop
    got = statuses(run_session(_room_taker_case(u0_delayed=True), ["reclaim"]))
    assert got["v1-0"] == ("Releasing", "n0")
    assert got["p0-0"] == ("Pipelined", "n0")
    assert got["u0-0"] == ("Pending", None)


def test_the_more_deserving_job_reclaims_first_when_it_may() -> None:
    got = statuses(run_session(_room_taker_case(u0_delayed=False), ["reclaim"]))
    assert got["u0-0"] == ("Pipelined", "n0")
    assert got["p0-0"] == ("Pipelined", "n0")
    assert {got["v0-0"][0], got["v1-0"][0]} == {"Releasing"}
