"""The reclaim action: a pending job takes resources back from
preemptible jobs of *other* queues.

Gate: the job's leaf queue, with the job, stays within its fair share (and a non-preemptible
job within its quota) — ``Proportion.can_reclaim``, checked on the live accounting when the job
is popped, so the reclaimers of one queue stop at its fair share. Victims: preemptible jobs of
other queues, minus those protected by ``reclaimMinRuntime`` (they may lose extras only). Each
candidate unit is accepted only if the whole set so far is still fair
(``fairshare.ReclaimJudge`` against the queue state cloned when the job's search starts);
since a refused unit's queue side can only get less over-served, its later units are skipped.
The smallest accepted victim prefix that lets the job fit is then trimmed to what the job needs;
with ``allowConsolidatingReclaim`` victims that can be re-placed elsewhere are moved instead of
evicted and left out of the final fairness check.
"""

from __future__ import annotations

from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING

from kai.scheduler.actions.eviction_common import Context, note, run_jobs
from kai.scheduler.fairshare.reclaim import EMPTY_FAIR_SET, FairSet, ReclaimJudge, VictimChunk
from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.plugins.min_runtime import reclaim_protected
from kai.scheduler.statement import Statement
from kai.scheduler.victims import (
    EXTRA,
    VictimUnit,
    gpus_needed,
)

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTION = "reclaim"
_LIKENESS = attrgetter("likeness")
RECLAIM_FAILED = "ReclaimFailed"


def reclaim(session: Session) -> None:
    if not session.config.proportion:
        return  # no proportion plugin: nothing decides what is fair, KAI reclaims nothing
    run_jobs(session, ACTION, _attempt)


def chunks(units: list[VictimUnit]) -> list[VictimChunk]:
    return [VictimChunk(u.queue, u.resources, u.kind == EXTRA) for u in units]


def _attempt(
    session: Session, job: JobInfo, tasks: list[TaskInfo], request: Vector, context: Context
) -> bool:
    proportion = session.proportion
    if not proportion.can_reclaim(job.queue, request, job.preemptible):
        return True
    statement = Statement(session, ACTION)
    solver = context.solver(statement, job, tasks, f"reclaimed for job {job.name!r}")
    if context.fits_as_is(solver):
        return False  # fits without anybody leaving: allocate places it

    def build() -> list[VictimUnit]:
        # the same for every reclaimer of this queue (the job itself is of this queue)
        units: list[VictimUnit] = []
        for victim in context.preemptible_jobs():
            if victim is job or victim.queue == job.queue:
                continue
            protected = context.memo(
                ("reclaim-protected", job.queue, victim.uid),
                partial(reclaim_protected, session, job, victim),
            )
            units.extend(context.units(victim, extras_only=protected))
        return units

    candidates = context.candidates((ACTION, job.queue), tasks, build)
    if not candidates:
        return True
    if context.room_with(candidates) < gpus_needed(tasks) - 1e-9:
        return True
    if not context.could_fit(tasks, candidates):
        # what the search below would find: no prefix of the candidates makes room
        statement.discard()
        _note_failed(session, job)
        return True
    # judged against the queues as they are when the search starts (KAI's clone)
    judge = ReclaimJudge(proportion.clone(), job.queue, request, job.preemptible)
    verdicts = context.verdicts((proportion.state_key(), job.queue, request, job.preemptible))

    def fair(units: list[VictimUnit]) -> bool:
        key = tuple(map(_LIKENESS, units))
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = judge.judge(chunks(units)) is not None
            verdicts[key] = verdict
        return verdict

    # the acceptors' sets, judged fair: a set grown by one unit is judged from its base in
    # O(queues) (the same verdict, see ``ReclaimJudge.grow``)
    grown_sets: dict[tuple[object, ...], FairSet] = {(): EMPTY_FAIR_SET}

    def fair_with(unit: VictimUnit, taken: list[VictimUnit]) -> bool:
        base_key = tuple(map(_LIKENESS, taken))
        key = (*base_key, unit.likeness)
        verdict = verdicts.get(key)
        if verdict is not None:
            return verdict
        chunk = VictimChunk(unit.queue, unit.resources, unit.kind == EXTRA)
        base = grown_sets.get(base_key)
        # a base is missing when ``taken`` was judged as a whole by ``fair`` only
        grown = judge.judge([*chunks(taken), chunk]) if base is None else judge.grow(base, chunk)
        if grown is not None:
            grown_sets[key] = grown
        verdicts[key] = verdict = grown is not None
        return verdict

    # First try: every unit that is fair on its own, then the trimmed set must be fair as a
    # whole. If it is not, search again accepting a unit only while the set taken so far stays
    # fair (a stricter but always consistent budget per victim queue).
    for accept in (
        lambda unit, taken: fair_with(unit, []),
        fair_with,
    ):
        prefix = solver.smallest_prefix(context.ordered(candidates), accept)
        if prefix is None:
            break  # no room even with every unit that is fair on its own: a subset cannot do it
        solution = solver.apply(
            solver.minimise(prefix),
            move=session.config.allow_consolidating_reclaim,
            all_must_move=False,
            validate=lambda evicted, moved: fair(evicted),
        )
        if solution is not None:
            statement.commit()
            return False
    statement.discard()
    _note_failed(session, job)
    # a job of the same kind needing at least as much would meet the same victims and queues
    return True


def _note_failed(session: Session, job: JobInfo) -> None:
    note(
        session,
        job,
        RECLAIM_FAILED,
        f"job {job.name!r} cannot fit by reclaiming what other queues may fairly lose",
    )
