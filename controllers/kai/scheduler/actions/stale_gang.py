"""The stale-gang eviction action.

A job is stale when it has no succeeded task, at least one active task, and its gang is not
satisfied (a leaf PodSet below its minimum, honouring SubGroupSet thresholds). Once it has been
stale for its grace period — the job's ``staleness_grace_period`` when set, else the scheduler's
``staleness_grace_period``; negative = never; 0 = at once — all its tasks that hold resources
are evicted. Non-preemptible jobs are not exempt. ``stale_since`` absent means the job has been
stale for 0 seconds (it became stale in this cycle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.jobs import ACTIVE, JobInfo
from kai.scheduler.snapshot import ALLOCATED_STATUSES, TaskStatus
from kai.scheduler.statement import Statement

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "stalegangeviction"
#: tolerance on the grace comparison (times are floats in seconds)
_TIME_EPS = 1e-6


def grace_period(session: Session, job: JobInfo) -> float:
    own = job.spec.staleness_grace_period
    return session.config.staleness_grace_period if own is None else own


def is_stale(job: JobInfo) -> bool:
    if job.gang_satisfied:  # (the cheap test first: most jobs are not stale)
        return False
    if any(t.status is TaskStatus.SUCCEEDED for t in job.tasks):
        return False
    return any(t.status in ACTIVE for t in job.tasks)


def stale_for(session: Session, job: JobInfo) -> float:
    since = job.spec.stale_since
    return 0.0 if since is None else max(session.snapshot.now - since, 0.0)


def stale_gang_eviction(session: Session) -> None:
    for job in session.jobs:
        if not is_stale(job):
            continue
        grace = grace_period(session, job)
        if grace < 0 or stale_for(session, job) + _TIME_EPS < grace:
            continue
        statement = Statement(session, ACTION)
        message = (
            f"job {job.name!r} has been below its gang minimum for "
            f"{stale_for(session, job):g}s (grace period {grace:g}s)"
        )
        for task in job.tasks:
            if task.status in ALLOCATED_STATUSES and task.node >= 0:
                statement.evict(task, message)
        statement.commit()
