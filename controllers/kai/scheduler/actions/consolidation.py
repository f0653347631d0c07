"""The consolidation action: make room for a pending *preemptible* job by
moving running preemptible tasks (of any queue) to other nodes. Only tasks that come back when
evicted (``TaskSpec.movable``: their pod has a controller) are moved: live, a move is an
eviction whose pod its controller makes again on the room found for it.

Valid only when every moved task is re-placed (pipelined) elsewhere: nothing is finally
evicted. At most ``maxConsolidationPreemptees`` jobs move (-1: no cap; 0: the action is off);
the action is off under spread placement, where packing is not the goal. First filter: the
cluster's idle plus releasing GPUs must cover the job. Victim sets grow one unit at a time in
victim order (moving more is not monotone: a larger set may not re-place where a smaller one
does), each trimmed to what the job needs before it is tried.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from kai.scheduler.actions.eviction_common import Context, run_jobs
from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.statement import Statement
from kai.scheduler.victims import (
    VictimSolver,
    VictimUnit,
    gpus_needed,
)

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "consolidation"
#: victim units considered for one job (bounds the search)
MAX_TRIED_UNITS = 64
#: prefixes tried beyond the shortest one with room, when the moves of a shorter one fail
MOVE_TRIALS = 3


def enabled(session: Session) -> bool:
    config = session.config
    return config.max_consolidation_preemptees != 0 and "spread" not in (
        config.placement_gpu,
        config.placement_cpu,
    )


def consolidation(session: Session) -> None:
    if enabled(session):
        run_jobs(session, ACTION, _attempt, skip=lambda job: not job.preemptible)


def _attempt(
    session: Session, job: JobInfo, tasks: list[TaskInfo], request: Vector, context: Context
) -> bool:
    if context.gpu_room() < gpus_needed(tasks) - 1e-9:
        return True
    statement = Statement(session, ACTION)
    solver = context.solver(statement, job, tasks, f"moved to make room for {job.name!r}")
    if context.fits_as_is(solver):
        return False

    def build() -> list[VictimUnit]:
        units: list[VictimUnit] = []
        for victim in context.preemptible_jobs():
            if victim is not job:
                # live, a move is an eviction and the pod comes back from its controller: a
                # task without one (a bare pod) would be gone for good, so it never moves
                units.extend(
                    u for u in context.units(victim) if all(t.spec.movable for t in u.tasks)
                )
        return units

    # the same for every job not running anything itself (then it cannot be its own victim)
    key = (ACTION, job.uid if job.active > 0 else None)
    candidates = context.candidates(key, tasks, build)
    if not candidates.units or not context.could_fit(tasks, candidates):
        return True  # what the search would find: no prefix of the candidates makes room
    ordered = _capped(list(islice(context.ordered(candidates), MAX_TRIED_UNITS)), session)
    # the shortest prefix with room, then a few longer ones: moving more is not monotone
    prefix = solver.smallest_prefix(ordered)
    if prefix is None:
        return True
    for k in range(len(prefix), min(len(ordered), len(prefix) + MOVE_TRIALS) + 1):
        for victims in _trials(solver, ordered[:k]):
            solution = solver.apply(victims, move=True, all_must_move=True, validate=None)
            if solution is not None:
                statement.commit()
                return False
    statement.discard()
    return True  # a job of the same kind needing at least as much cannot be moved for either


def _capped(ordered: list[VictimUnit], session: Session) -> list[VictimUnit]:
    """The longest prefix that moves at most ``maxConsolidationPreemptees`` jobs."""
    cap = session.config.max_consolidation_preemptees
    if cap <= 0:
        return ordered
    seen: set[int] = set()
    for k, unit in enumerate(ordered):
        seen.add(id(unit.job))
        if len(seen) > cap:
            return ordered[:k]
    return ordered


def _trials(solver: VictimSolver, prefix: list[VictimUnit]) -> list[list[VictimUnit]]:
    trimmed = solver.minimise(prefix)
    return [trimmed] if len(trimmed) == len(prefix) else [trimmed, prefix]
