"""The job loop shared by reclaim, preempt and consolidation.

Pending, ready jobs outside their preemption delay are popped best-first from
:class:`JobsOrderByQueues` (the same order as allocate); for each, the action's ``attempt``
function runs the victim search in its own statement and commits it on success. Jobs that
already fit without evicting anybody are allocate's business and are skipped. Once a job found
nothing, later jobs of the same shape (queue, priority, preemptibility, topology, task classes)
are skipped in the same action: an unsuccessful search is the expensive case, and later
evictions only remove candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.gang import tasks_to_allocate
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.ordering import job_order_key
from kai.scheduler.result import Reason
from kai.scheduler.victims import pending_request, preemptor_candidates

if TYPE_CHECKING:
    from kai.scheduler.session import Session

Attempt = Callable[["Session", JobInfo, list[TaskInfo], Vector], None]


def run_jobs(
    session: Session,
    action: str,
    attempt: Attempt,
    skip: Callable[[JobInfo], bool] | None = None,
) -> None:
    jobs = preemptor_candidates(session, action, skip)
    if not jobs:
        return
    requests: dict[str, Vector] = {}

    def key(job: JobInfo) -> tuple[object, ...]:
        requests[job.uid] = pending_request(session, tasks_to_allocate(job))
        return job_order_key(job)

    order = JobsOrderByQueues(
        session.queue_tree.roots,
        jobs,
        session.proportion.order_key,
        key,
        lambda job: requests[job.uid],
        session.config.queue_depth_per_action.get(action),
    )
    failed: set[tuple[object, ...]] = set()
    while (job := order.pop()) is not None:
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        shape = _shape(session, job, tasks)
        if shape in failed:
            continue  # an identical job already found no victims in this action
        pending = job.pending
        attempt(session, job, tasks, pending_request(session, tasks))
        if job.pending == pending:
            failed.add(shape)


def _shape(session: Session, job: JobInfo, tasks: list[TaskInfo]) -> tuple[object, ...]:
    """What decides a victim search's outcome, up to the job's identity: its queue, priority,
    preemptibility, topology and delay-free tasks (request and constraints: the placement
    engine's equivalence class). KAI keeps the same kind of cache (scheduling signatures)."""
    engine = session.engine
    return (
        job.queue,
        job.priority,
        job.preemptible,
        repr(job.spec.topology),
        tuple(sorted((t.podset.name, engine.class_of(t).id) for t in tasks)),
    )


def note(session: Session, job: JobInfo, code: str, message: str) -> None:
    """Record why the action did nothing for ``job`` (kept next to allocate's own reason)."""
    reasons = session.job_reasons.setdefault(job.uid, [])
    if all(r.code != code for r in reasons):
        reasons.append(Reason(code, message))
