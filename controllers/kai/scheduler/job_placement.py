"""Placing one job's tasks: the single path used by allocate, the victim search and the
stability replay.

:func:`place_job` runs the job-level capacity check of the fair-share package, places the tasks
through the topology placer when the job carries a topology constraint and through the
placement engine otherwise (every choice through the session's plugin registry), and checks
the gang. The mode says how a placed task is recorded and how much is explained:

========== ================================================ =============================
mode       a task that fits now / only after releases        on failure
========== ================================================ =============================
ALLOCATE   allocated / pipelined; a gang that would bind      a reason with the per-filter
           only partly is pipelined whole                     node counts
SIMULATE   pipelined / pipelined (a victim-search probe:     ``NO_FIT`` (no explanation)
           the preemptor never binds in the same session)
REPLAY     allocated / allocated (the next cycle's            ``NO_FIT``
           allocate, as the stability check replays it)
========== ================================================ =============================

On failure the statement is back where it was on entry; on success its new operations hold
the job's placements (to commit, roll back or keep, as the caller decides).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.gang import must_pipeline_whole_gang
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.result import Reason
from kai.scheduler.topology_placement import constrained, place_tasks

if TYPE_CHECKING:
    from kai.scheduler.session import Session
    from kai.scheduler.statement import Statement

__all__ = ["NO_FIT", "POD_SCHEDULING_ERRORS", "PlaceMode", "job_capacity", "place_job"]

POD_SCHEDULING_ERRORS = "PodSchedulingErrors"


class PlaceMode(Enum):
    ALLOCATE = "allocate"
    SIMULATE = "simulate"  # a probe of the victim search
    REPLAY = "replay"  # the stability replay of the next cycle's allocate


#: the failure of a probe (SIMULATE and REPLAY do not pay for an explanation)
NO_FIT = Reason(POD_SCHEDULING_ERRORS, "the job's tasks do not fit")


def job_capacity(session: Session, tasks: list[TaskInfo]) -> Vector:
    """What ``tasks`` count in the job-level capacity check."""
    gpu = cpu = memory = 0.0
    for task in tasks:
        vec = session.capacity_vector(task.spec)
        gpu += vec[0]
        cpu += vec[1]
        memory += vec[2]
    return (gpu, cpu, memory)


def place_job(
    session: Session,
    job: JobInfo,
    tasks: list[TaskInfo],
    statement: Statement,
    mode: PlaceMode,
    capacity: Vector | None = None,
) -> Reason | None:
    """Place ``tasks`` of ``job`` through ``statement``; None on success, else why not.
    ``capacity``: ``job_capacity(session, tasks)`` when the caller keeps it."""
    if capacity is None:
        capacity = job_capacity(session, tasks)
    refusal = session.proportion.check_job_capacity(job.queue, capacity, job.preemptible)
    if refusal is not None:
        return refusal
    checkpoint = statement.checkpoint()
    if constrained(job):
        failure = place_tasks(session, job, tasks, statement)
        if failure is not None:
            return failure  # the topology placer left the statement as it was
        if mode is PlaceMode.SIMULATE:
            statement.convert_allocated_to_pipelined(job)
    engine = session.engine
    for placed, task in enumerate(tasks):
        if task.node >= 0:  # placed above under its topology constraint
            continue
        choice = engine.choose(task)
        if choice is None:
            reason = NO_FIT
            if mode is PlaceMode.ALLOCATE:
                reason = _no_fit(job, tasks, placed, task, engine.explain(task))
            statement.rollback(checkpoint)
            return reason
        if mode is PlaceMode.REPLAY or (mode is PlaceMode.ALLOCATE and choice.fits_now):
            statement.allocate(task, choice.node, choice.gpu_groups)
        else:
            statement.pipeline(task, choice.node, choice.gpu_groups)
    if not job.gang_satisfied:
        statement.rollback(checkpoint)
        if mode is not PlaceMode.ALLOCATE:
            return NO_FIT
        return Reason(
            POD_SCHEDULING_ERRORS,
            f"job {job.name!r} cannot reach its gang minimum with its pending tasks",
        )
    if mode is PlaceMode.ALLOCATE and must_pipeline_whole_gang(job):
        statement.convert_allocated_to_pipelined(job)
    return None


def _no_fit(
    job: JobInfo, tasks: list[TaskInfo], placed: int, task: TaskInfo, detail: str
) -> Reason:
    if len(tasks) == 1:
        head = f"task {task.name!r} of job {job.name!r} does not fit"
    else:
        head = (
            f"{len(tasks)} tasks of job {job.name!r} must be placed together; {placed} fit before "
            f"task {task.name!r}, which does not"
        )
    return Reason(
        POD_SCHEDULING_ERRORS,
        f"{head}: {detail}",
        {"task": task.uid, "tasks_to_place": len(tasks), "placed_before_failure": placed},
    )
