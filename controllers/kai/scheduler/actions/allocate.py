"""The allocate action.

Jobs are popped best-first from :class:`JobsOrderByQueues`. For each job: the tasks to place next
(:func:`tasks_to_allocate`), the capacity check of the fair-share package for their sum, then
placement task by task inside a statement. Any task that fits nowhere rolls the whole attempt back
and records why. A gang that would bind only partly while some member waits for releasing
resources is pipelined whole. A job with pending tasks left is pushed back and competes again, so
elastic jobs grow one task at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.gang import must_pipeline_whole_gang, tasks_to_allocate
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.jobs import JobInfo, TaskInfo, unreachable_sets
from kai.scheduler.ordering import job_order_key
from kai.scheduler.result import Reason
from kai.scheduler.statement import Statement
from kai.scheduler.topology_placement import constrained, place_tasks

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "allocate"
POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
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

    def key(job: JobInfo) -> tuple[object, ...]:
        requests.pop(job.uid, None)  # the job changed: its next request is computed again
        return job_order_key(job)

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
    gpu = cpu = memory = 0.0
    for task in tasks:
        vec = session.capacity_vector(task.spec)
        gpu += vec[0]
        cpu += vec[1]
        memory += vec[2]
    refusal = session.proportion.check_job_capacity(job.queue, (gpu, cpu, memory), job.preemptible)
    if refusal is not None:
        session.set_reason(job, refusal)
        return False
    statement = Statement(session, ACTION)
    engine = session.engine
    if constrained(job):
        failure = place_tasks(session, job, tasks, statement)
        if failure is not None:
            statement.discard()
            session.set_reason(job, failure)
            return False
    for placed, task in enumerate(tasks):
        if task.node >= 0:  # placed above under its topology constraint
            continue
        choice = engine.choose(task)
        if choice is None:
            detail = engine.explain(task)
            statement.discard()
            session.set_reason(job, _no_fit(job, tasks, placed, task, detail))
            return False
        if choice.fits_now:
            statement.allocate(task, choice.node, choice.gpu_groups)
        else:
            statement.pipeline(task, choice.node, choice.gpu_groups)
    if not job.gang_satisfied:
        statement.discard()
        session.set_reason(
            job,
            Reason(
                POD_SCHEDULING_ERRORS,
                f"job {job.name!r} cannot reach its gang minimum with its pending tasks",
            ),
        )
        return False
    if must_pipeline_whole_gang(job):
        statement.convert_allocated_to_pipelined(job)
    statement.commit()
    session.clear_reasons(job)
    return True


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
