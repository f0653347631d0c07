"""The allocate action.

Jobs are popped best-first from :class:`JobsOrderByQueues`. For each job: the tasks to place next
(:func:`tasks_to_allocate`), then :func:`~kai.scheduler.job_placement.place_job` in ``ALLOCATE``
mode inside a statement (capacity check, topology or per-task placement, gang check). Any task
that fits nowhere rolls the whole attempt back and records why. A gang that would bind only
partly while some member waits for releasing resources is pipelined whole. A job with pending
tasks left is pushed back and competes again, so elastic jobs grow one task at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.gang import tasks_to_allocate
from kai.scheduler.job_placement import PlaceMode, place_job
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.jobs import JobInfo, TaskInfo, unreachable_sets
from kai.scheduler.result import Reason
from kai.scheduler.statement import Statement

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "allocate"
NOT_READY = "NotReady"


def allocate(session: Session) -> None:
    candidates: list[JobInfo] = []
    for job in session.jobs:
        if job.pending == 0 or not job.queue_ok:
            continue
        if not job.ready:
            session.set_reason(job, _not_ready(job))
            continue
        candidates.append(job)
    requests: dict[str, Vector] = {}
    job_order = session.registry.job_order

    def key(job: JobInfo) -> tuple[object, ...]:
        requests.pop(job.uid, None)  # the job changed: its next request is computed again
        return job_order(job)

    def request(job: JobInfo) -> Vector:
        # only needed for a leaf's best job, so computed lazily
        found = requests.get(job.uid)
        if found is None:
            found = requests[job.uid] = _request(session, tasks_to_allocate(job))
        return found

    order = JobsOrderByQueues(
        session.queue_tree.roots,
        candidates,
        session.proportion.order_key,
        key,
        request,
        session.config.queue_depth_per_action.get(ACTION),
    )
    while (popped := order.pop()) is not None:
        tasks = tasks_to_allocate(popped)
        if not tasks:
            continue
        if _allocate_job(session, popped, tasks) and popped.pending > 0:
            order.push(popped)


def _request(session: Session, tasks: list[TaskInfo]) -> Vector:
    gpu = cpu = memory = 0.0
    for task in tasks:
        vec = session.pending_queue_vector(task.spec)
        gpu += vec[0]
        cpu += vec[1]
        memory += vec[2]
    return (gpu, cpu, memory)


def _allocate_job(session: Session, job: JobInfo, tasks: list[TaskInfo]) -> bool:
    statement = Statement(session, ACTION)
    failure = place_job(session, job, tasks, statement, PlaceMode.ALLOCATE)
    if failure is not None:  # the statement is back where it started: empty
        session.set_reason(job, failure)
        return False
    statement.commit()
    session.clear_reasons(job)
    return True


def _not_ready(job: JobInfo) -> Reason:
    unreachable = unreachable_sets(job.root)
    if unreachable:
        group = unreachable[0]
        where = f"subgroup {group.name!r}" if group.name else "the job's root"
        return Reason(
            NOT_READY,
            f"job {job.name!r} can never be satisfied: {where} has minSubGroup "
            f"{group.threshold} but only {len(group.children)} child subgroup"
            f"{'' if len(group.children) == 1 else 's'}; it stays pending until its subgroups "
            "are fixed",
            {
                "subgroup": group.name or None,
                "minSubGroup": group.threshold,
                "children": len(group.children),
            },
        )
    parts = [
        f"{ps.name or 'default'}: {ps.alive} of {ps.min_available}"
        for ps in job.podsets.values()
        if ps.alive < ps.min_available
    ]
    detail = ", ".join(parts) if parts else "too few subgroups can reach their minimum"
    return Reason(
        NOT_READY,
        f"job {job.name!r} has fewer schedulable tasks than its gang minimum ({detail})",
    )
