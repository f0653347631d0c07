"""The preempt action: inside one queue, a pending job evicts preemptible
jobs of strictly lower priority.

A non-preemptible preemptor must fit its queue's quota with its non-preemptible usage
(``NonPreemptibleOverQuota`` is the only capacity rule checked before the search, as in KAI;
limits are checked on every probe). Victims protected by ``preemptMinRuntime`` may only lose
their elastic extras. The smallest victim set is taken (see :mod:`kai.scheduler.victims`);
victims that can be re-placed are moved rather than evicted, whatever
``allowConsolidatingReclaim`` says (as KAI does: preempt's validation, min-runtime, does not
read which victims moved).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.actions.eviction_common import Context, run_jobs
from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.plugins.min_runtime import preempt_protected
from kai.scheduler.statement import Statement
from kai.scheduler.victims import (
    VictimUnit,
    gpus_needed,
)

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "preempt"


def preempt(session: Session) -> None:
    run_jobs(session, ACTION, _attempt)


def _attempt(
    session: Session, job: JobInfo, tasks: list[TaskInfo], request: Vector, context: Context
) -> bool:
    refusal = session.proportion.check_non_preemptible_quota(job.queue, request, job.preemptible)
    if refusal is not None:
        session.set_reason(job, refusal)
        return True
    statement = Statement(session, ACTION)
    solver = context.solver(statement, job, tasks, f"preempted by job {job.name!r}")
    if context.fits_as_is(solver):
        return False

    def build() -> list[VictimUnit]:
        # the same for every preemptor of this queue and priority (the job is not lower)
        units: list[VictimUnit] = []
        for victim in context.preemptible_in(job.queue):
            if victim is job or victim.priority >= job.priority:
                continue
            protected = preempt_protected(session, victim)
            units.extend(context.units(victim, extras_only=protected))
        return units

    candidates = context.candidates((ACTION, job.queue, job.priority), tasks, build)
    if not candidates.units:
        return True
    if context.room_with(candidates) < gpus_needed(tasks) - 1e-9:
        return True
    if not context.could_fit(tasks, candidates):
        return True  # what the search would find: no prefix of the candidates makes room
    prefix = solver.smallest_prefix(context.ordered(candidates))
    if prefix is None:
        return True
    solution = solver.apply(
        solver.minimise(prefix),
        move=True,  # as KAI: victims that fit elsewhere are re-placed, whatever the flag
        all_must_move=False,
        validate=None,
    )
    if solution is None:
        statement.discard()
        return True
    statement.commit()
    return False
