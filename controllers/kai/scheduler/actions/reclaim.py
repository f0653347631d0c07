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
victims that can be re-placed elsewhere are moved (pipelined on their new node) instead of
evicted, whatever ``allowConsolidatingReclaim`` says, as KAI does; the flag only decides whether
the moved victims are left out of the final fairness check (true) or counted in it (false).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING

from kai.scheduler.actions.eviction_common import Candidates, Context, note, run_jobs
from kai.scheduler.fairshare.reclaim import EMPTY_FAIR_SET, ReclaimJudge, VictimChunk
from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.plugins.min_runtime import is_protected, reclaim_min_runtime
from kai.scheduler.statement import Statement
from kai.scheduler.victims import EXTRA, VictimSolver, VictimUnit, gpus_needed

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
    if not session.proportion.can_reclaim(job.queue, request, job.preemptible):
        return True
    statement = Statement(session, ACTION)
    solver = context.solver(statement, job, tasks, f"reclaimed for job {job.name!r}")
    if context.fits_as_is(solver):
        return False  # fits without anybody leaving: allocate places it
    # the same for every reclaimer of this queue (the job itself is of this queue)
    build = partial(_candidate_units, session, job, context)
    candidates = context.candidates((ACTION, job.queue), tasks, build)
    if not candidates.units:
        return True
    if context.room_with(candidates) < gpus_needed(tasks) - 1e-9:
        return True
    if context.could_fit(tasks, candidates) and _search(
        session, solver, context, candidates, _Fairness(session, job, request)
    ):
        statement.commit()
        return False
    # (when it could not fit: what the search would find, no prefix of the candidates makes room)
    statement.discard()
    _note_failed(session, job)
    # a job of the same kind needing at least as much would meet the same victims and queues
    return True


def _candidate_units(session: Session, job: JobInfo, context: Context) -> list[VictimUnit]:
    """Every unit of preemptible jobs of other queues, protected ones offering extras only."""
    units: list[VictimUnit] = []
    queue, now = job.queue, session.snapshot.now
    # a function of the two queues and the queue tree: kept for the session
    runtimes = session.search_cache.reclaim_min_runtimes
    for victim in context.preemptible_jobs():
        if victim is job or victim.queue == queue:
            continue
        runtime = runtimes.get((queue, victim.queue))
        if runtime is None:
            runtime = reclaim_min_runtime(session, queue, victim.queue)
            runtimes[(queue, victim.queue)] = runtime
        protected = is_protected(victim, runtime, now)
        units.extend(context.units(victim, extras_only=protected))
    return units


def _search(
    session: Session,
    solver: VictimSolver,
    context: Context,
    candidates: Candidates,
    fairness: _Fairness,
) -> bool:
    """Find, apply and validate a fair victim set (the statement is left for the caller)."""
    # First try: every unit that is fair on its own, then the trimmed set must be fair as a
    # whole. If it is not, search again accepting a unit only while the set taken so far stays
    # fair (a stricter but always consistent budget per victim queue).
    tried: set[tuple[int, ...]] = set()  # the unit sets applied (in the same state) and failed
    for accept in (fairness.alone, fairness.with_unit):
        prefix = solver.smallest_prefix(context.ordered(candidates), accept)
        if prefix is None:
            return False  # no room even with every unit fair on its own: a subset cannot do it
        units = solver.minimise(prefix)
        serials = tuple([u.serial for u in units])
        if serials in tried and min(serials, default=0) >= 0:
            continue  # the second pass trimmed to the same set: the same failure
        tried.add(serials)
        solution = solver.apply(
            units,
            move=True,  # as KAI: a victim that fits elsewhere is re-placed, whatever the flag
            all_must_move=False,
            validate=_validator(session, fairness, units),
        )
        if solution is not None:
            return True
    return False


def _validator(
    session: Session, fairness: _Fairness, units: list[VictimUnit]
) -> Callable[[list[VictimUnit], list[VictimUnit]], bool]:
    """The final fairness check of a solution. As in KAI, ``allowConsolidatingReclaim`` decides
    only what it counts: with the flag, victims that were re-placed elsewhere (moved) are left
    out; without it, every unit taken counts, moved or evicted."""
    if session.config.allow_consolidating_reclaim:
        return lambda evicted, moved: fairness.of(evicted)
    return lambda evicted, moved: fairness.of(units)


class _Fairness:
    """Reclaim fairness of victim sets for one job, judged against the queues as they are when
    its search starts (KAI's clone) and memoised in the session's search cache under the
    judge's inputs (queue state, reclaimer queue, request, preemptibility) and the likeness of
    the units judged, in order: what a verdict depends on."""

    def __init__(self, session: Session, job: JobInfo, request: Vector) -> None:
        proportion = session.proportion
        key = (proportion.state_key(), job.queue, request, job.preemptible)
        cache = session.search_cache
        self.verdicts = cache.verdicts.setdefault(key, {})
        #: the sets judged fair, to judge a set grown by one unit from its base in O(queues)
        #: (the same verdict, see ``ReclaimJudge.grow``)
        self.fair_sets = cache.fair_sets.setdefault(key, {(): EMPTY_FAIR_SET})
        self.judge = ReclaimJudge(proportion.clone(), job.queue, request, job.preemptible)

    def of(self, units: list[VictimUnit]) -> bool:
        """Is taking ``units`` fair?"""
        key = tuple(map(_LIKENESS, units))
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.judge.judge(chunks(units)) is not None
            self.verdicts[key] = verdict
        return verdict

    def alone(self, unit: VictimUnit, taken: list[VictimUnit]) -> bool:
        """Is ``unit`` fair on its own (``taken`` ignored: the search's first pass)?"""
        return self.with_unit(unit, [])

    def with_unit(self, unit: VictimUnit, taken: list[VictimUnit]) -> bool:
        """Is ``taken`` plus ``unit`` fair?"""
        base_key = tuple(map(_LIKENESS, taken))
        key = (*base_key, unit.likeness)
        verdict = self.verdicts.get(key)
        if verdict is not None:
            return verdict
        chunk = VictimChunk(unit.queue, unit.resources, unit.kind == EXTRA)
        base = self.fair_sets.get(base_key)
        # a base is missing when ``taken`` was judged as a whole by ``of`` only
        if base is None:
            grown = self.judge.judge([*chunks(taken), chunk])
        else:
            grown = self.judge.grow(base, chunk)
        if grown is not None:
            self.fair_sets[key] = grown
        self.verdicts[key] = verdict = grown is not None
        return verdict


def _note_failed(session: Session, job: JobInfo) -> None:
    note(
        session,
        job,
        RECLAIM_FAILED,
        f"job {job.name!r} cannot fit by reclaiming what other queues may fairly lose",
    )
