"""The job loop shared by reclaim, preempt and consolidation.

Pending, ready jobs outside their preemption delay are popped best-first from
:class:`JobsOrderByQueues` (the same order as allocate); for each, the action's ``attempt``
function runs the victim search in its own statement and commits it on success. Jobs that
already fit without evicting anybody are allocate's business and are skipped. Once a search
found nothing, later jobs of the same kind that are no smaller are skipped in the same action
(an unsuccessful search is the expensive case, and later evictions only remove candidates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, cast

import numpy as np

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.gang import tasks_to_allocate
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.resource_layout import GPU
from kai.scheduler.result import Reason
from kai.scheduler.statement import Statement
from kai.scheduler.victims import (
    EXTRA,
    UnitStream,
    VictimSolver,
    VictimUnit,
    gpu_room,
    job_units,
    next_request,
    order_units,
    preemptor_candidates,
    reachable,
    unit_gpus,
)

if TYPE_CHECKING:
    from kai.scheduler.fairshare.queue_order import QueueOrderKey
    from kai.scheduler.placement import EqClass, PlacementEngine
    from kai.scheduler.session import Session

_SERIAL = attrgetter("serial")

#: attempt(session, job, tasks, request, context) -> True when the search failed in a way every
#: job of the same kind and at least this large would fail too (it is then not repeated)
Attempt = Callable[["Session", JobInfo, list[TaskInfo], Vector, "Context"], bool]


@dataclass(frozen=True, eq=False)
class Candidates:
    """The victim units a search may take, with the stable key they are cached under (the
    search description and the tasks' placement classes); do not modify ``units``."""

    key: tuple[object, ...]
    units: list[VictimUnit]


class Context:
    """What the victim actions ask between two commits, answered through the session's search
    cache (``session.search_cache``, :mod:`kai.scheduler.search_cache`): victim units per job
    version, candidates and their order, fairness verdicts, fits-as-is, GPU room."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.cache = session.search_cache

    def preemptible_jobs(self) -> list[JobInfo]:
        """Jobs that may be victims at all: preemptible, in a known queue, allowed by the
        registry's victim checks, holding something (in session order)."""
        return self.cache.holders.all()

    def preemptible_in(self, queue: str) -> list[JobInfo]:
        """``preemptible_jobs`` of one queue (in session order)."""
        return self.cache.holders.in_queue(queue)

    def units(self, job: JobInfo, extras_only: bool = False) -> list[VictimUnit]:
        """``job_units``, cut again only when the job's placement changed (its version)."""
        key = (job.uid, extras_only)
        cached = self.cache.units.get(key)
        if cached is not None and cached[0] == job.version:
            return cached[1]
        units = job_units(self.session, job, extras_only)
        cache = self.cache
        likeness = cache.likeness
        for unit in units:
            alike = (unit.queue, unit.resources, unit.kind == EXTRA)
            unit.likeness = likeness.setdefault(alike, len(likeness))
            unit.serial = cache.unit_serials
            cache.unit_serials += 1
        cache.units[key] = (job.version, units)
        return units

    def ordered(self, candidates: Candidates) -> UnitStream:
        """``order_units(candidates)``, shared by every search that has the same candidate
        units (by serial number, in the same order) while the queues' allocations are the
        same: the order is a function of exactly those."""
        key = (self.session.proportion.state_key(), tuple(map(_SERIAL, candidates.units)))
        stream = self.cache.victim_orders.get(key)
        if stream is None:
            stream = UnitStream(order_units(self.session, candidates.units))
            self.cache.victim_orders[key] = stream
        return stream

    def fits_as_is(self, solver: VictimSolver) -> bool:
        """Does the solver's job fit without any victim (``solver.fits([])``)? Jobs alike for
        placement (see ``_placement_likeness``) get the same answer until the next commit
        (the solver's probe memo)."""
        return solver.fits([]) is not None

    def candidates(
        self, key: tuple[object, ...], tasks: list[TaskInfo], build: Callable[[], list[VictimUnit]]
    ) -> Candidates:
        """The victim units a search for ``tasks`` may take. ``build()`` lists them for every
        search described by ``key`` (the action's own description, e.g. the reclaimer's queue,
        in stable ids); the list is then cut to the units ``reachable`` from the tasks, which
        depends only on their placement classes. Both are kept until the next commit."""
        cache = self.cache
        units = cache.candidates.get(key)
        if units is None:
            units = build()
            cache.candidates[key] = units
        engine = self.session.engine
        classes = tuple(sorted({engine.class_of(t).id for t in tasks}))
        reachable_key = (key, classes)
        found = cache.reachable.get(reachable_key)
        if found is None:
            found = reachable(self.session, tasks, units)
            cache.reachable[reachable_key] = found
        return Candidates(reachable_key, found)

    def gpu_room(self) -> float:
        """``gpu_room(session)`` of the cluster as the last commit left it (searches roll back
        whatever they tried, so it changes only with a commit)."""
        if self.cache.gpu_room is None:
            self.cache.gpu_room = gpu_room(self.session)
        return self.cache.gpu_room

    def room_with(self, candidates: Candidates) -> float:
        """``gpu_room`` plus what ``candidates`` could free."""
        found = self.cache.room_with.get(candidates.key)
        if found is None:
            found = self.gpu_room() + sum(unit_gpus(u) for u in candidates.units)
            self.cache.room_with[candidates.key] = found
        return found

    def could_fit(self, tasks: list[TaskInfo], candidates: Candidates) -> bool:
        """A necessary condition for any set of ``candidates`` to make room for ``tasks``: with
        every candidate evicted (its resources become releasing on its node; a shared-GPU task
        counted as freeing its whole devices, an over-estimate), the nodes each task's
        placement class may use hold, resource by resource, enough copies of the task for all
        tasks of that class. False means no victim search can succeed (cheap: one numpy pass
        per class instead of a doubling of probes). Tasks on shared GPUs are not judged (their
        devices decide)."""
        freeable = self.cache.freeable.get(candidates.key)
        if freeable is None:
            nodes = self.session.nodes
            freeable = nodes.idle + nodes.releasing
            for unit in candidates.units:
                for task in unit.tasks:
                    freeable[task.node] += task.request
                    if task.gpu_groups:
                        freeable[task.node, GPU] += len(task.gpu_groups)
            self.cache.freeable[candidates.key] = freeable
        engine = self.session.engine
        counts: dict[int, tuple[EqClass, int]] = {}
        for task in tasks:
            if not task.is_shared:
                cls = engine.class_of(task)
                counts[cls.id] = (cls, counts[cls.id][1] + 1 if cls.id in counts else 1)
        for cls, count in counts.values():
            columns = cls.columns
            if len(columns) == 0:
                continue
            room = freeable[cls.static][:, columns]
            copies = np.floor((room + 1e-6) / cls.request[columns]).min(axis=1)
            if float(np.clip(copies, 0.0, None).sum()) < count:
                return False
        return True

    def solver(
        self, statement: Statement, job: JobInfo, tasks: list[TaskInfo], reason: str
    ) -> VictimSolver:
        solver = VictimSolver(self.session, statement, job, tasks, reason)
        solver.replay_order = self.cache.replay_order
        likeness = _placement_likeness(self.session, job, tasks)
        if likeness is not None:
            # probes of jobs alike for placement, with the same units evicted, get the same
            # answer until the next commit
            solver.probes = self.cache.probes
            solver.likeness = likeness
        return solver


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
    job_order = session.registry.job_order

    def key(job: JobInfo) -> tuple[object, ...]:
        requests[job.uid] = next_request(session, job)
        return job_order(job)

    # a queue's order key is a function of its request and the allocations, which only a
    # commit changes (searches roll back what they tried): shared until the next commit
    queue_keys = session.search_cache.queue_keys

    def queue_key(name: str, request: Vector) -> QueueOrderKey:
        found = queue_keys.get((name, request))
        if found is None:
            found = session.proportion.order_key(name, request)
            queue_keys[(name, request)] = found
        return found

    order = JobsOrderByQueues(
        session.queue_tree.roots,
        jobs,
        queue_key,
        key,
        lambda job: requests[job.uid],
        session.config.queue_depth_per_action.get(action),
    )
    context = Context(session)
    cache = session.search_cache
    failed: dict[tuple[object, ...], list[list[Vector]]] = {}
    # Most popped jobs change nothing: popped as not placed, the order keeps its queue keys
    # when the leaf's next job asks the same (the keys are then the same values); after a
    # commit the popped job's queue path is ordered again, as a plain pop would have had it.
    while (job := order.pop(_not_placing)) is not None:
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        kind, needs = _kind_of(session, job, tasks)
        if any(_at_least(needs, old) for old in failed.get(kind, ())):
            continue  # a job of the same kind, no larger, already found nothing
        pending, generation = job.pending, cache.generation
        hopeless = attempt(session, job, tasks, next_request(session, job), context)
        if cache.generation != generation:
            order.changed(job)
        if job.pending == pending and hopeless:  # (a commit cleared the search cache)
            failed.setdefault(kind, []).append(needs)


def _not_placing(job: JobInfo) -> bool:
    return False


def _placement_likeness(
    session: Session, job: JobInfo, tasks: list[TaskInfo]
) -> tuple[object, ...] | None:
    """What a placement attempt of ``tasks`` (``VictimSolver._place``) depends on besides the
    cluster, for the simple jobs where this is easy to state exactly: one PodSet, no topology
    constraint, no task filter (pod affinity) active in the session. Then it is the queue capacity
    check (queue, preemptibility, the tasks' requests), each task's placement class (which
    covers its request and node constraints) in order, and the gang counters. None for other
    jobs (not shared)."""
    from kai.scheduler.topology_placement import constrained

    if session.engine.per_task_filters or len(job.podsets) != 1 or constrained(job):
        return None
    (podset,) = job.podsets.values()
    engine = session.engine
    classes = tuple(engine.class_of(t).id for t in tasks)
    return (
        job.queue,
        job.preemptible,
        job.spec.min_subgroup,
        len(job.root.children),
        podset.active,
        podset.min_available,
        classes,
    )


Kind = tuple[tuple[object, ...], list[Vector]]


def _kind_of(session: Session, job: JobInfo, tasks: list[TaskInfo]) -> Kind:
    """``_kind`` of the job's next ``tasks``, kept per job version for the whole session (the
    three victim actions pop the same jobs)."""
    kinds = session.search_cache.search_kinds
    cached = kinds.get(job.uid)
    if cached is not None and cached[0] == job.version:
        return cast(Kind, cached[1])
    kind = _kind(session, job, tasks)
    kinds[job.uid] = (job.version, kind)
    return kind


def _kind(
    session: Session, job: JobInfo, tasks: list[TaskInfo]
) -> tuple[tuple[object, ...], list[Vector]]:
    """What decides a victim search apart from sizes (queue, priority, preemptibility,
    topology, each task's constraints), and the tasks' sizes, largest first. Like KAI's
    scheduling signatures, requests are left out of the kind: a job of the same kind whose every
    task is at least as large as a failed job's (task by task, largest first) fails too. With
    several constraint sets in one job, sizes must match exactly."""
    constraints = sorted({_constraints(session.engine, t) for t in tasks}, key=repr)
    needs = sorted((session.capacity_vector(t.spec) for t in tasks), reverse=True)
    exact: tuple[object, ...] = ()
    if len(constraints) > 1:
        exact = tuple(
            sorted(
                (repr(_constraints(session.engine, t)), session.capacity_vector(t.spec))
                for t in tasks
            )
        )
    kind = (
        job.queue,
        job.priority,
        job.preemptible,
        repr(job.spec.topology),
        repr(constraints),
        exact,
    )
    return kind, needs


def _constraints(engine: PlacementEngine, task: TaskInfo) -> tuple[object, ...]:
    spec = task.spec
    return (
        engine.constraint_key(spec),  # what the registry's filters and scorers read
        task.podset.name,
        spec.gpu.is_shared,
        spec.gpu.mig,
        spec.gpu.num_devices,
        tuple(sorted(spec.node_selector.items())),
        spec.node_affinity,
        spec.tolerations,
        spec.pod_affinity,
        spec.pod_anti_affinity,
        spec.preferred_pod_affinity,  # scores that depend on placements: they steer the search
        spec.preferred_pod_anti_affinity,
        tuple(sorted(spec.labels.items())),
    )


def _at_least(needs: list[Vector], failed: list[Vector]) -> bool:
    if len(needs) < len(failed):
        return False
    return all(
        all(mine[k] >= theirs[k] - 1e-9 for k in range(3))
        for mine, theirs in zip(needs, failed, strict=False)
    )


def note(session: Session, job: JobInfo, code: str, message: str) -> None:
    """Record why the action did nothing for ``job`` (kept next to allocate's own reason)."""
    reasons = session.job_reasons.setdefault(job.uid, [])
    if all(r.code != code for r in reasons):
        reasons.append(Reason(code, message))
