"""The caches that make a full victim-action cycle cheap answer exactly what a fresh computation
answers: the stability replay's kept allocate order, and skipping key updates for popped jobs
that are not placed."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from generate_cluster import generate, to_snapshot
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.ordering import job_order_key
from kai.scheduler.replay import ReplayOrder
from kai.scheduler.session import Session
from kai.scheduler.snapshot import Snapshot, TaskStatus


def _entries(order: ReplayOrder) -> dict[str, list[tuple[object, ...]]]:
    return {
        leaf: [(key, job.uid) for key, _, job in entries]
        for leaf, entries in order.refresh().items()
        if entries
    }


def test_kept_replay_order_matches_a_fresh_one_after_changes() -> None:
    session = Session(to_snapshot(generate(40, seed=5)))
    kept = ReplayOrder(session)
    assert _entries(kept) == _entries(ReplayOrder(session))
    rng = random.Random(11)
    pending = [t for j in session.jobs for t in j.tasks if t.status is TaskStatus.PENDING]
    running = [t for j in session.jobs for t in j.tasks if t.status is TaskStatus.RUNNING]
    assert pending and running
    for round_ in range(6):
        # place some pending tasks (jobs leave the order or change key), evict some running
        # ones (their jobs may join it), and check the kept order after each round
        for task in rng.sample(pending, min(15, len(pending))):
            if task.status is TaskStatus.PENDING:
                session.set_placement(task, TaskStatus.PIPELINED, rng.randrange(40), ())
        for task in rng.sample(running, min(10, len(running))):
            if task.status is TaskStatus.RUNNING:
                session.set_placement(task, TaskStatus.PENDING, -1, ())
        fresh = _entries(ReplayOrder(session))
        assert _entries(kept) == fresh, f"round {round_}"
        for entries in fresh.values():
            assert entries == sorted(entries)


def test_kept_request_follows_the_job_version() -> None:
    session = Session(to_snapshot(generate(20, seed=2)))
    order = ReplayOrder(session)
    job = next(j for j in session.jobs if j.pending > 1)
    before = order.request(job)
    task = next(t for t in job.tasks if t.status is TaskStatus.PENDING)
    session.set_placement(task, TaskStatus.PIPELINED, 0, ())
    assert order.request(job) == ReplayOrder(session).request(job)
    session.set_placement(task, TaskStatus.PENDING, -1, ())
    assert order.request(job) == before


def test_popping_unplaced_jobs_keeps_the_same_order() -> None:
    session = Session(to_snapshot(generate(60, seed=4)))
    jobs = [j for j in session.jobs if j.pending > 0 and j.queue_ok and j.ready]
    kept = ReplayOrder(session)

    def popped(placing: bool) -> list[str]:
        order = JobsOrderByQueues(
            session.queue_tree.roots,
            jobs,
            session.proportion.order_key,
            job_order_key,
            kept.request,
        )
        out: list[str] = []
        while (job := (order.pop(lambda _: False) if placing else order.pop())) is not None:
            out.append(job.uid)
        return out

    plain = popped(False)
    assert len(plain) == len(jobs)
    assert popped(True) == plain


def _search(snapshot: Snapshot) -> list[tuple[bool, bool]]:
    """(could_fit, the search found a prefix) for every pending job, over all victims."""
    from kai.scheduler.actions.eviction_common import Context
    from kai.scheduler.gang import tasks_to_allocate
    from kai.scheduler.statement import Statement

    session = Session(snapshot)
    context = Context(session)
    out: list[tuple[bool, bool]] = []
    for job in [j for j in session.jobs if j.pending > 0]:
        tasks = tasks_to_allocate(job)
        victims = [u for v in context.preemptible_jobs() if v is not job for u in context.units(v)]
        candidates = context.candidates(("test", job.uid), tasks, lambda v=victims: v)
        statement = Statement(session, "test")
        solver = context.solver(statement, job, tasks, "test")
        found = solver.smallest_prefix(context.ordered(candidates))
        statement.discard()
        out.append((context.could_fit(tasks, candidates), found is not None))
    return out


def test_could_fit_refuses_only_searches_that_fail() -> None:
    from bench_reclaim import block, build

    # one non-preemptible task on every node: no node can be emptied for a whole-node task
    blocked = _search(block(build(64, task_gpus=1), gangs=2))
    assert blocked == [(False, False), (False, False)]
    # without the blockers the gang finds its victims, and the condition lets it search
    assert _search(build(64, task_gpus=1)) == [(True, True)]


def test_a_commit_clears_what_reads_the_cluster_and_job_entries_follow_versions() -> None:
    """The session's search cache: one owner, one rule (see ``kai.scheduler.search_cache``)."""
    from kai.scheduler.actions.eviction_common import Context
    from kai.scheduler.gang import tasks_to_allocate
    from kai.scheduler.statement import Statement
    from kai.scheduler.victims import next_request

    session = Session(to_snapshot(generate(40, seed=5)))
    cache = session.search_cache
    context = Context(session)
    job = next(j for j in session.jobs if j.pending > 0 and j.queue_ok)
    tasks = tasks_to_allocate(job)
    victim = context.preemptible_jobs()[0]
    units = context.units(victim)
    candidates = context.candidates(("test", job.queue), tasks, lambda: list(units))
    # keys are stable ids: the search description and the placement classes, no id()
    assert candidates.key[0] == ("test", job.queue)
    assert context.candidates(("test", job.queue), tasks, list) is not candidates
    assert context.candidates(("test", job.queue), tasks, list).units is candidates.units
    room = context.room_with(candidates)
    request = next_request(session, job)
    assert cache.candidates and cache.room_with and cache.gpu_room is not None
    # a search that rolls back changes no answer: entries stay
    statement = Statement(session, "test")
    statement.evict(units[0].tasks[0], "probe")
    statement.discard()
    assert context.room_with(candidates) == room and cache.candidates
    # a commit clears every entry that reads the cluster
    statement.evict(units[0].tasks[0], "for good")
    statement.commit()
    assert not cache.candidates and not cache.reachable and not cache.room_with
    assert cache.gpu_room is None and not cache.victim_orders and not cache.verdicts
    assert not cache.probes
    # per-job entries carry the job's version: the moved job's units are cut again, the
    # request of an unchanged job is kept
    assert context.units(victim) is not units
    assert cache.units[(victim.uid, False)][0] == victim.version
    assert cache.next_requests[job.uid] == (job.version, request)
    assert next_request(session, job) is request


def test_a_job_uid_given_twice_is_refused() -> None:
    import pytest

    from kai.scheduler.errors import SnapshotError

    snapshot = to_snapshot(generate(4, seed=1))
    doubled = Snapshot(**{**snapshot.__dict__, "jobs": [*snapshot.jobs, snapshot.jobs[0]]})
    with pytest.raises(SnapshotError, match=f"job '{snapshot.jobs[0].uid}' appears twice"):
        Session(doubled)


def _full_cycle(snapshot: Snapshot, memo: bool) -> tuple[dict[str, str], int]:
    """The decision digests of a five-action session on ``snapshot`` with the victim search's
    probe memo on or off, and how many probes the memo answered."""
    from digests import result_digests
    from kai.scheduler.errors import IMPLEMENTED_ACTIONS
    from kai.scheduler.session import run_session
    from kai.scheduler.victims import VictimSolver

    hits = 0
    real_key = VictimSolver._probe_key

    def probe_key(solver: VictimSolver, kind: str, units: object) -> tuple[object, ...] | None:
        nonlocal hits
        if not memo:
            return None
        key = real_key(solver, kind, units)  # type: ignore[arg-type]
        if key is not None and solver.probes is not None:
            hits += any(k[:3] == key for k in solver.probes)
        return key

    VictimSolver._probe_key = probe_key  # type: ignore[assignment,method-assign]
    try:
        result = run_session(snapshot, list(IMPLEMENTED_ACTIONS))
    finally:
        VictimSolver._probe_key = real_key  # type: ignore[method-assign]
    return result_digests(result), hits


def test_the_probe_memo_changes_no_decision() -> None:
    """Victim-search probes of jobs alike for placement, with the same units evicted, are
    answered from the search cache until the next commit (``SearchCache.probes``): every
    decision and reason of a full cycle must be the same with the memo off, on random clusters
    and under the settings that change what the victim actions do."""
    from dataclasses import replace

    answered = 0
    for seed, nodes, config in [
        (1, 48, {}),
        (2, 64, {}),
        (3, 40, {"allow_consolidating_reclaim": False}),
        (4, 56, {"max_consolidation_preemptees": 1}),
        (5, 48, {"max_consolidation_preemptees": -1, "placement_cpu": "spread"}),
        (6, 72, {"reclaim_min_runtime_resolve": "queue", "default_reclaim_min_runtime": 600.0}),
    ]:
        snapshot = to_snapshot(generate(nodes, seed=seed))
        snapshot = replace(snapshot, config=replace(snapshot.config, **config))
        with_memo, hits = _full_cycle(snapshot, memo=True)
        without, _ = _full_cycle(snapshot, memo=False)
        assert with_memo == without, f"seed {seed}, {config}"
        answered += hits
    assert answered > 100  # the memo was really used (else this test proves nothing)
