"""Hypothesis properties of reclaim, preempt and consolidation over random clusters and queue
trees (issue 4):

- no preemption cycles: over 20 full cycles (all five actions, the scenario format's update
  rules) no cluster state comes back after evictions happened in between, and the last cycles
  are quiet;
- non-preemptible jobs are never victims of reclaim, preempt or consolidation (neither evicted
  nor moved);
- after a reclaim, the reclaimer's side is not more saturated (allocated / fair share, GPUs) than
  a sibling it took from, at the level where their queue paths diverge;
- no over-eviction: the GPUs evicted for a reclaimer exceed what it needs by less than one
  victim job's worth.

Example counts are modest so the module runs in seconds.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.scheduler.errors import IMPLEMENTED_ACTIONS
from kai.scheduler.result import SessionResult
from kai.scheduler.session import run_session
from kai.scheduler.snapshot import (
    GpuRequest,
    JobSpec,
    NodeSpec,
    QueueResource,
    QueueSpec,
    SchedulerConfig,
    Snapshot,
    TaskSpec,
    TaskStatus,
)

NOW = 1_000_000.0
FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def _queue(name: str, parent: str | None, quota: float, weight: float, rank: int) -> QueueSpec:
    return QueueSpec(
        name=name,
        parent=parent,
        creation_rank=rank,
        resources={
            "gpu": QueueResource(quota=quota, limit=-1, over_quota_weight=weight),
            "cpu": QueueResource(quota=-1, limit=-1, over_quota_weight=1),
            "memory": QueueResource(quota=-1, limit=-1, over_quota_weight=1),
        },
    )


def _task(uid: str, job: str, gpus: int, node: str | None) -> TaskSpec:
    return TaskSpec(
        uid=uid,
        name=uid,
        job=job,
        status=TaskStatus.RUNNING if node else TaskStatus.PENDING,
        cpu_millis=100,
        memory_bytes=1_000_000,
        gpu=GpuRequest(whole=gpus),
        node=node,
    )


@st.composite
def clusters(draw: st.DrawFn, pending_jobs: tuple[int, int] = (1, 3)) -> Snapshot:
    """1-4 nodes of 2/4/8 GPUs, a queue tree of one to three levels, running jobs (single tasks,
    gangs and elastic jobs) filling part of the nodes, and pending jobs."""
    nodes = [
        NodeSpec(f"n{i}", 100_000, 10**12, draw(st.sampled_from([2, 4, 8])), 100, 110)
        for i in range(draw(st.integers(1, 4)))
    ]
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    rank = 0
    for t in range(draw(st.integers(2, 3))):
        top = f"q{t}"
        queues.append(
            _queue(top, None, draw(st.integers(0, 4)), draw(st.sampled_from([0, 1, 2])), rank)
        )
        rank += 1
        if draw(st.booleans()):
            for c in range(2):
                child = f"{top}c{c}"
                quota = draw(st.integers(0, 3))
                queues.append(_queue(child, top, quota, draw(st.sampled_from([0, 1, 2])), rank))
                rank += 1
                if draw(st.integers(0, 3)) == 0:  # sometimes a third level
                    for g in range(2):
                        leaf = f"{child}g{g}"
                        quota = draw(st.integers(0, 2))
                        weight = draw(st.sampled_from([0, 1, 2]))
                        queues.append(_queue(leaf, child, quota, weight, rank))
                        rank += 1
                        leaves.append(leaf)
                else:
                    leaves.append(child)
        else:
            leaves.append(top)
    jobs: list[JobSpec] = []
    age = 0

    def new_job(tasks: list[TaskSpec], elastic: bool) -> None:
        nonlocal age
        age += 1
        uid = tasks[0].job
        priority = draw(st.sampled_from([50, 75, 100]))
        preemptible = priority < 100 if draw(st.integers(0, 4)) else priority >= 100
        minimum = 1 if elastic and len(tasks) > 1 else len(tasks)
        jobs.append(
            JobSpec(
                uid=uid,
                name=uid,
                queue=draw(st.sampled_from(leaves)),
                priority=priority,
                preemptible=preemptible,
                created_at=NOW - 60 * age * draw(st.integers(1, 3)),
                tasks=tasks,
                min_available=minimum,
            )
        )

    counter = 0
    for node in nodes:
        free = node.gpus
        while free > 0 and draw(st.integers(0, 5)) > 0:
            size = draw(st.integers(1, min(2, free)))
            width = draw(st.integers(1, max(1, free // size)))
            counter += 1
            job = f"r{counter}"
            tasks = [_task(f"{job}-{k}", job, size, node.name) for k in range(width)]
            free -= size * width
            new_job(tasks, elastic=draw(st.booleans()))
    for p in range(draw(st.integers(*pending_jobs))):
        job = f"p{p}"
        size = draw(st.integers(1, 2))
        tasks = [_task(f"{job}-{k}", job, size, None) for k in range(draw(st.integers(1, 3)))]
        new_job(tasks, elastic=False)
    config = SchedulerConfig(
        allow_consolidating_reclaim=draw(st.booleans()),
        staleness_grace_period=60.0,
    )
    return Snapshot(now=NOW, nodes=nodes, queues=queues, jobs=jobs, config=config)


def _advance(snapshot: Snapshot, result: SessionResult) -> Snapshot:
    """The update rules of the scenario format's rounds mode."""
    jobs = []
    for job in snapshot.jobs:
        tasks = []
        for task in job.tasks:
            out = result.tasks[task.uid]
            if out.status is TaskStatus.BINDING:
                tasks.append(replace(task, status=TaskStatus.RUNNING, node=out.node))
            elif out.status in (TaskStatus.PIPELINED, TaskStatus.RELEASING):
                tasks.append(replace(task, status=TaskStatus.PENDING, node=None, gpu_groups=()))
            else:
                tasks.append(replace(task, status=out.status, node=out.node))
        jobs.append(replace(job, tasks=tasks))
    return replace(snapshot, jobs=jobs)


def _state(snapshot: Snapshot) -> tuple[tuple[str, str, str | None], ...]:
    return tuple((t.uid, t.status.value, t.node) for j in snapshot.jobs for t in j.tasks)


@FAST
@given(clusters())
def test_no_preemption_cycles_over_20_rounds(snapshot: Snapshot) -> None:
    seen: dict[tuple[tuple[str, str, str | None], ...], int] = {}
    evictions_at: list[int] = []
    quiet_tail = 0
    for round_no in range(20):
        state = _state(snapshot)
        if state in seen and any(seen[state] <= r < round_no for r in evictions_at):
            raise AssertionError(
                f"state of round {seen[state]} came back in round {round_no} after evictions"
            )
        seen[state] = round_no
        result = run_session(snapshot, IMPLEMENTED_ACTIONS)
        changed = bool(result.binds or result.pipelined or result.evictions)
        if result.evictions:
            evictions_at.append(round_no)
        quiet_tail = 0 if changed else quiet_tail + 1
        snapshot = _advance(snapshot, result)
    assert quiet_tail >= 3, f"still changing in the last cycles (evictions in {evictions_at})"


@FAST
@given(clusters())
def test_non_preemptible_jobs_are_never_victims(snapshot: Snapshot) -> None:
    result = run_session(snapshot, ["consolidation", "reclaim", "preempt"])
    protected = {t.uid for j in snapshot.jobs if not j.preemptible for t in j.tasks}
    evicted = {e.task for e in result.evictions}
    assert not evicted & protected
    for job in snapshot.jobs:
        if job.preemptible:
            continue
        for task in job.tasks:
            out = result.tasks[task.uid]
            if task.status is TaskStatus.RUNNING:
                assert (out.status, out.node) == (TaskStatus.RUNNING, task.node)


def _reclaim_once(snapshot: Snapshot) -> tuple[SessionResult, JobSpec | None]:
    result = run_session(snapshot, ["reclaim"])
    pending = [j for j in snapshot.jobs if any(t.node is None for t in j.tasks)]
    reclaimer = pending[0] if pending else None
    return result, reclaimer


def _path(queues: dict[str, QueueSpec], name: str) -> list[str]:
    out = [name]
    while queues[out[-1]].parent is not None:
        parent = queues[out[-1]].parent
        assert parent is not None
        out.append(parent)
    return out[::-1]


@FAST
@given(clusters(pending_jobs=(1, 1)))
def test_reclaimer_not_more_saturated_than_the_sibling_it_took_from(snapshot: Snapshot) -> None:
    result, reclaimer = _reclaim_once(snapshot)
    if reclaimer is None or not result.evictions:
        return
    queues = {q.name: q for q in snapshot.queues}
    owner = {t.uid: j.queue for j in snapshot.jobs for t in j.tasks}
    mine = _path(queues, reclaimer.queue)
    for eviction in result.evictions:
        theirs = _path(queues, owner[eviction.task])
        depth = 0
        while mine[depth] == theirs[depth]:
            depth += 1
        side_r, side_v = mine[depth], theirs[depth]
        share_r, share_v = result.queues[side_r], result.queues[side_v]
        fair_r, fair_v = share_r.fair_share["gpu"], share_v.fair_share["gpu"]
        alloc_r, alloc_v = share_r.allocated["gpu"], share_v.allocated["gpu"]
        ratio_r = alloc_r / fair_r if fair_r > 0 else (float("inf") if alloc_r > 0 else 0.0)
        ratio_v = alloc_v / fair_v if fair_v > 0 else (float("inf") if alloc_v > 0 else 0.0)
        assert ratio_r <= 1 + 1e-9 or fair_v <= 0 or ratio_r < ratio_v, (
            f"{side_r} at {alloc_r}/{fair_r} took from {side_v} at {alloc_v}/{fair_v}"
        )


@FAST
@given(clusters(pending_jobs=(1, 1)))
def test_no_over_eviction(snapshot: Snapshot) -> None:
    result, reclaimer = _reclaim_once(snapshot)
    if reclaimer is None or not result.evictions:
        return
    gpus = {t.uid: t.gpu.whole for j in snapshot.jobs for t in j.tasks}
    job_of = {t.uid: j.uid for j in snapshot.jobs for t in j.tasks}
    need = sum(
        gpus[t.uid] for t in reclaimer.tasks if result.tasks[t.uid].status is TaskStatus.PIPELINED
    )
    per_job: dict[str, int] = {}
    for eviction in result.evictions:
        per_job[job_of[eviction.task]] = per_job.get(job_of[eviction.task], 0) + gpus[eviction.task]
    evicted = sum(per_job.values())
    assert need > 0, "evictions without a placed reclaimer"
    assert evicted - need < max(per_job.values()) or evicted <= need, (
        f"evicted {evicted} GPUs ({per_job}) for a reclaimer needing {need}"
    )
