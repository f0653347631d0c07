"""The stability replay: would the next cycle's allocate keep a victim search's result?

A victim search (:mod:`kai.scheduler.victims`) is only worth committing when the job it made
room for gets that room in the next cycle. Evicted and moved tasks are recreated pending then,
and allocate re-places them in its own order; if that order hands the room back to a victim,
the same evictions repeat every cycle. :func:`replay_places` answers the question by replaying
that allocate inside the session and undoing everything afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.statement import Statement
from kai.scheduler.victims import pending_request, sum_vectors

if TYPE_CHECKING:
    from kai.scheduler.session import Session


#: jobs the replay may try before giving up on the job it checks (then: assume it is not placed)
REPLAY_LIMIT = 256


def replay_places(
    session: Session,
    involved: list[TaskInfo],
    must_place: list[TaskInfo],
    keys: dict[str, tuple[tuple[object, ...], Vector]] | None = None,
    pending: list[JobInfo] | None = None,
) -> bool:
    """Would the next cycle's allocate place every task of ``must_place``?

    Evicted and moved tasks are recreated pending in the next cycle, and the job that needed the
    room is pending again: allocate re-places them in its own order. If that order gives the room
    back to a victim (a moved task going back where it was; an evicted job whose queue sorts
    first because another job heads the reclaimer's queue), the job does not get it, and the same
    evictions repeat every cycle — a loop. This replays that allocate: ``involved`` tasks
    unplaced, every ready pending job in scheduling order, but — as in KAI's victim simulation —
    only the job and its victims are placed; the others are popped and skipped, they only shape
    the order (room they would take goes to a more deserving job, which is progress, not a
    loop). It stops once every ``must_place`` task is placed or the job owning one of them was
    tried and failed, and leaves the session exactly as it found it.

    ``keys`` caches the order keys of jobs the replay does not change and ``pending`` lists the
    session's ready pending jobs (both valid until the cluster changes). After ``REPLAY_LIMIT``
    victim jobs were tried first, the answer is no.
    """

    from kai.scheduler.gang import tasks_to_allocate
    from kai.scheduler.job_queue import JobsOrderByQueues
    from kai.scheduler.ordering import job_order_key
    from kai.scheduler.snapshot import TaskStatus
    from kai.scheduler.topology_placement import constrained, place_tasks

    saved = [(t, t.status, t.node, t.gpu_groups) for t in involved]
    for task in involved:
        session.set_placement(task, TaskStatus.PENDING, -1, ())
    replay = Statement(session, "replay")
    engine = session.engine
    proportion = session.proportion
    requests: dict[str, Vector] = {}
    owners = {id(t.job) for t in must_place}
    changed = {id(t.job) for t in involved}
    cache = keys if keys is not None else {}

    def key(job: JobInfo) -> tuple[object, ...]:
        if id(job) not in changed and job.uid in cache:
            order_key, request = cache[job.uid]
        else:
            order_key = job_order_key(job)
            request = pending_request(session, tasks_to_allocate(job))
            if id(job) not in changed:
                cache[job.uid] = (order_key, request)
        requests[job.uid] = request
        return order_key

    def place(job: JobInfo, tasks: list[TaskInfo]) -> bool:
        capacity = sum_vectors(session.capacity_vector(t.spec) for t in tasks)
        if proportion.check_job_capacity(job.queue, capacity, job.preemptible) is not None:
            return False
        cp = replay.checkpoint()
        if constrained(job) and place_tasks(session, job, tasks, replay) is not None:
            return False
        for task in tasks:
            if task.node >= 0:
                continue
            choice = engine.choose(task)
            if choice is None:
                replay.rollback(cp)
                return False
            replay.allocate(task, choice.node, choice.gpu_groups)
        if not job.gang_satisfied:
            replay.rollback(cp)
            return False
        return True

    try:
        jobs = _replay_jobs(session, pending, involved)
        order = JobsOrderByQueues(
            session.queue_tree.roots,
            jobs,
            proportion.order_key,
            key,
            lambda job: requests[job.uid],
        )
        contenders = set(changed)  # the job and its victims; everybody else only orders
        tried = 0
        while (job := order.pop()) is not None:
            if id(job) not in contenders:
                continue  # unrelated jobs are popped but not placed (see above)
            tasks = tasks_to_allocate(job)
            if not tasks:
                continue
            if id(job) not in owners:
                tried += 1
                if tried > REPLAY_LIMIT:
                    return False
            if place(job, tasks):
                if all(t.node >= 0 for t in must_place):
                    return True
                if job.pending > 0:
                    order.push(job)
            elif id(job) in owners:
                return False
        return all(t.node >= 0 for t in must_place)
    finally:
        replay.discard()
        for task, status, node, groups in reversed(saved):
            session.set_placement(task, status, node, groups)


def pending_jobs(session: Session) -> list[JobInfo]:
    return [j for j in session.jobs if j.pending > 0 and j.queue_ok and j.ready]


def _replay_jobs(
    session: Session, pending: list[JobInfo] | None, involved: list[TaskInfo]
) -> list[JobInfo]:
    if pending is None:
        return pending_jobs(session)
    jobs = {id(j): j for j in pending if j.pending > 0}
    for task in involved:
        job = task.job
        if job.pending > 0 and job.queue_ok and job.ready:
            jobs[id(job)] = job
    return list(jobs.values())
