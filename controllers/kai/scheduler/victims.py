"""Victim search shared by reclaim, preempt and consolidation.

Candidates come as :class:`VictimUnit` s: the smallest pieces a victim job can lose without
breaking its gang — first its elastic extras, one task at a time in reverse task order, then a
whole surplus member of a SubGroupSet above its threshold, last everything that is left (a gang
below its minimum is never left behind half evicted). :func:`order_units` sorts the units in
reverse scheduling order: the most over-served queue first, level by level, with the units
already taken counted as gone (the "victims adjustment" of the queue comparison); inside a leaf
queue lower priority first, extras before gang cores, then younger jobs first.

:class:`VictimSolver` then finds, inside one statement, the smallest prefix of that list that
lets the pending job fit (doubling then binary search over the prefix length: O(log n) probes,
each a checkpoint, evictions, a placement attempt and a rollback), keeps only the units that sit
on nodes the job actually uses, drops any unit that is still not needed, and finally tries to
re-place ("consolidate") the victims elsewhere when the action allows it. Evictions beyond what
the job needs are thus impossible by construction: each kept unit is needed. Before committing,
:mod:`kai.scheduler.replay` checks that the next cycle would not undo the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.job_placement import PlaceMode, job_capacity, place_job
from kai.scheduler.jobs import JobInfo, PodSet, SubGroupSet, TaskInfo
from kai.scheduler.ordering import ordered_children
from kai.scheduler.resource_layout import GPU
from kai.scheduler.snapshot import ALLOCATED_STATUSES
from kai.scheduler.statement import Statement

if TYPE_CHECKING:
    from kai.scheduler.fairshare.queue_order import QueueOrderKey
    from kai.scheduler.queues import QueueInfo, QueueTree
    from kai.scheduler.replay import ReplayOrder
    from kai.scheduler.session import Session

EXTRA = 0  # an elastic extra task
MEMBER = 1  # a surplus member of a SubGroupSet
CORE = 2  # the rest of the job (its gang)


@dataclass(eq=False)
class VictimUnit:
    """Tasks of one victim job that are evicted together."""

    job: JobInfo
    tasks: list[TaskInfo]
    kind: int  # EXTRA, MEMBER or CORE
    seq: int  # position of this unit among the job's units (units of a job are taken in order)
    resources: Vector = (0.0, 0.0, 0.0)  # queue-accounting vector of the tasks
    #: equal for units alike for fairness (same queue, resources and extra-ness); set by the
    #: victim actions' context, -1 until then
    likeness: int = -1
    #: this unit's number in the session (units are cut again, with new numbers, when their
    #: job moved); set by the victim actions' context, -1 until then
    serial: int = -1
    #: ``_unit_key`` of the unit, once asked (a function of fixed job fields and the unit's
    #: kind and position)
    order_key: tuple[object, ...] | None = None

    @property
    def queue(self) -> str:
        return self.job.queue


def evictable(session: Session, task: TaskInfo) -> bool:
    """A task may be a victim when it holds resources and was not placed in this session."""
    if task.status not in ALLOCATED_STATUSES or task.node < 0:
        return False
    status, node, groups = session.original[task.uid]
    return status is task.status and node == task.node and groups == task.gpu_groups


def job_units(session: Session, job: JobInfo, extras_only: bool = False) -> list[VictimUnit]:
    """The units of a victim job, in the order they may be taken. ``extras_only``: only pieces
    that keep the job at or above its gang minimum (a job protected by min-runtime)."""
    taken: set[str] = set()
    units: list[VictimUnit] = []

    def add(tasks: list[TaskInfo], kind: int) -> None:
        tasks = [t for t in tasks if t.uid not in taken and evictable(session, t)]
        if not tasks:
            return
        taken.update(t.uid for t in tasks)
        units.append(VictimUnit(job, tasks, kind, len(units), _resources(session, tasks)))

    # elastic extras: PodSets above their minimum, lowest-ordered PodSet first, last task first
    for podset in _podsets_lowest_first(job.root):
        surplus = podset.active - podset.min_available
        if surplus <= 0:
            continue
        candidates = [t for t in podset.tasks if evictable(session, t)]
        for task in reversed(candidates[-surplus:] if surplus < len(candidates) else candidates):
            add([task], EXTRA)
    # whole surplus members of SubGroupSets holding more satisfied members than their threshold
    for group in _groups(job.root):
        surplus = group.satisfied_count - group.threshold
        if surplus <= 0:
            continue

        # order as subgrouporder would once the extras above are gone (KAI re-sorts after each
        # eviction): required before optional, lower fill ratio first, then name
        def after_extras(child: PodSet | SubGroupSet) -> tuple[object, ...]:
            count = child.satisfied_count
            if isinstance(child, PodSet):
                count -= sum(1 for t in child.tasks if t.uid in taken)
            if child.threshold > 0:
                return (0, count / child.threshold, child.name)
            return (1, float(count), child.name)

        satisfied = sorted((c for c in group.children if c.satisfied), key=after_extras)
        for member in reversed(satisfied[-surplus:]):
            add(_tasks_under(member), MEMBER)
    if not extras_only:
        add(list(job.tasks), CORE)
    return units


def _podsets_lowest_first(group: SubGroupSet) -> list[PodSet]:
    out: list[PodSet] = []
    for child in reversed(ordered_children(group)):
        if isinstance(child, PodSet):
            out.append(child)
        else:
            out.extend(_podsets_lowest_first(child))
    return out


def _groups(group: SubGroupSet) -> list[SubGroupSet]:
    """Every SubGroupSet of the tree, deepest and lowest-ordered first, the root last."""
    out: list[SubGroupSet] = []
    for child in reversed(ordered_children(group)):
        if isinstance(child, SubGroupSet):
            out.extend(_groups(child))
    out.append(group)
    return out


def _tasks_under(node: PodSet | SubGroupSet) -> list[TaskInfo]:
    if isinstance(node, PodSet):
        return list(reversed(node.tasks))
    out: list[TaskInfo] = []
    for child in node.children:
        out.extend(_tasks_under(child))
    return out


def _resources(session: Session, tasks: Iterable[TaskInfo]) -> Vector:
    return sum_vectors(session.queue_vector(task, task.node) for task in tasks)


def sum_vectors(vectors: Iterable[Vector]) -> Vector:
    gpu = cpu = memory = 0.0
    for vec in vectors:
        gpu += vec[0]
        cpu += vec[1]
        memory += vec[2]
    return (gpu, cpu, memory)


def pending_request(session: Session, tasks: Iterable[TaskInfo]) -> Vector:
    """What the tasks ask of their queue (fair-share accounting)."""
    return sum_vectors(session.pending_queue_vector(t.spec) for t in tasks)


def next_request(session: Session, job: JobInfo) -> Vector:
    """``pending_request`` of the tasks allocate would place next for ``job``, kept per job
    version in the session's search cache (the victim actions and the replay ask it often)."""
    from kai.scheduler.gang import tasks_to_allocate

    requests = session.search_cache.next_requests
    cached = requests.get(job.uid)
    if cached is not None and cached[0] == job.version:
        return cached[1]
    request = pending_request(session, tasks_to_allocate(job))
    requests[job.uid] = (job.version, request)
    return request


def _unit_key(unit: VictimUnit) -> tuple[object, ...]:
    """Reverse job order inside a leaf: lower priority, extras before members before cores,
    younger job, then name (reversed), then the unit's own position in its job."""
    found = unit.order_key
    if found is None:
        job = unit.job
        found = (job.priority, unit.kind, -job.spec.created_at, _reverse(job.name), unit.seq)
        unit.order_key = found
    return found


def _reverse(name: str) -> tuple[int, ...]:
    return (*(-ord(c) for c in name), 0)


def _units_by_leaf(units: Iterable[VictimUnit]) -> dict[str, list[VictimUnit]]:
    """The units of each leaf queue, in victim order inside the leaf."""
    by_leaf: dict[str, list[VictimUnit]] = {}
    for unit in units:
        by_leaf.setdefault(unit.queue, []).append(unit)
    for members in by_leaf.values():
        members.sort(key=_unit_key)
        # a job's units must come out in their own order, whatever the leaf sort said
        _keep_job_order(members)
    return by_leaf


def _units_left(tree: QueueTree, by_leaf: dict[str, list[VictimUnit]]) -> dict[str, int]:
    """How many units each queue (leaf or ancestor) still has to give."""
    left: dict[str, int] = {}
    for leaf, members in by_leaf.items():
        info = tree.queues.get(leaf)
        if info is None:
            continue
        for anc in info.ancestors():
            left[anc.name] = left.get(anc.name, 0) + len(members)
    return left


def order_units(session: Session, units: Iterable[VictimUnit]) -> Iterator[VictimUnit]:
    """The units in victim order, lazily (a search rarely needs more than a short prefix):
    pick, level by level from the top, the sibling queue that comes *last* in scheduling order
    (``compare_queues`` negated), counting the units already picked from it as removed; inside
    the chosen leaf take its next unit."""
    by_leaf = _units_by_leaf(units)
    if not by_leaf:
        return
    tree = session.queue_tree
    proportion = session.proportion
    cursor = {leaf: 0 for leaf in by_leaf}
    removed: dict[str, list[float]] = {}
    keys: dict[str, QueueOrderKey] = {}  # queue order keys; a queue's is redone once robbed
    left = _units_left(tree, by_leaf)

    def key(name: str) -> QueueOrderKey:
        found = keys.get(name)
        if found is None:
            found = proportion.order_key(name, None, _vec(removed.get(name)))
            keys[name] = found
        return found

    roots = sorted(tree.roots, key=lambda q: q.name)
    children: dict[str, list[QueueInfo]] = {}  # sorted once per order
    produced = 0
    total = sum(len(m) for m in by_leaf.values())
    while produced < total:
        siblings: Sequence[QueueInfo] = roots
        chosen: QueueInfo | None = None
        while True:
            best: QueueInfo | None = None
            best_key: QueueOrderKey | None = None
            for queue in siblings:
                name = queue.name
                if left.get(name, 0) <= 0:
                    continue
                # victim mode: the queue that would be scheduled last is robbed first
                queue_key = key(name)
                if best_key is None or queue_key.compare(best_key) > 0:
                    best, best_key = queue, queue_key
            if best is None:
                break
            chosen = best
            if best.is_leaf:
                break
            sorted_children = children.get(best.name)
            if sorted_children is None:
                sorted_children = sorted(best.children, key=lambda q: q.name)
                children[best.name] = sorted_children
            siblings = sorted_children
        if chosen is None or not chosen.is_leaf:
            break
        unit = by_leaf[chosen.name][cursor[chosen.name]]
        cursor[chosen.name] += 1
        produced += 1
        yield unit
        for anc in chosen.ancestors():
            keys.pop(anc.name, None)
            left[anc.name] -= 1
            acc = removed.setdefault(anc.name, [0.0, 0.0, 0.0])
            acc[0] += unit.resources[0]
            acc[1] += unit.resources[1]
            acc[2] += unit.resources[2]


class UnitStream:
    """A lazily produced unit sequence that may be iterated any number of times: units are
    produced from ``source`` only when an iteration first gets that far, then kept."""

    def __init__(self, source: Iterator[VictimUnit]) -> None:
        self._source: Iterator[VictimUnit] | None = source
        self._produced: list[VictimUnit] = []

    def __iter__(self) -> Iterator[VictimUnit]:
        produced = self._produced
        i = 0
        while True:
            if i < len(produced):
                yield produced[i]
                i += 1
                continue
            if self._source is None:
                return
            unit = next(self._source, None)
            if unit is None:
                self._source = None
                return
            produced.append(unit)


def _vec(v: list[float] | None) -> Vector | None:
    return None if v is None else (v[0], v[1], v[2])


def _keep_job_order(members: list[VictimUnit]) -> None:
    """Stable fix-up: every job's units appear in ``seq`` order at the slots the sort gave them."""
    slots: dict[int, list[int]] = {}
    for i, unit in enumerate(members):
        slots.setdefault(id(unit.job), []).append(i)
    for positions in slots.values():
        units = sorted((members[i] for i in positions), key=lambda u: u.seq)
        for i, unit in zip(positions, units, strict=True):
            members[i] = unit


# ---------------------------------------------------------------------------------- the solver
#: accept(unit, accepted) -> may this unit join the victims already accepted?
Acceptor = Callable[[VictimUnit, list[VictimUnit]], bool]
#: validate(victims that stay evicted, moved victims) -> is the scenario valid for the action?
Validator = Callable[[list[VictimUnit], list[VictimUnit]], bool]


@dataclass
class Solution:
    victims: list[VictimUnit] = field(default_factory=list)  # evicted for good (Releasing)
    moved: list[VictimUnit] = field(default_factory=list)  # re-placed elsewhere (Pipelined)


class VictimSolver:
    """Find and apply the smallest set of victims that lets ``tasks`` of ``job`` fit."""

    def __init__(
        self,
        session: Session,
        statement: Statement,
        job: JobInfo,
        tasks: list[TaskInfo],
        reason: str,
    ) -> None:
        self.session = session
        self.statement = statement
        self.job = job
        self.tasks = tasks
        self.reason = reason
        self.capacity = job_capacity(session, tasks)
        #: the stability replay's allocate order, shared by the searches of one action (None:
        #: built for each replay)
        self.replay_order: ReplayOrder | None = None
        #: the probe memo (``SearchCache.probes``) and what a probe of this job depends on
        #: besides the cluster and the units evicted (its placement likeness), set by the
        #: victim actions' context for jobs where that is known (None: every probe runs)
        self.probes: dict[tuple[object, ...], list[int] | None] | None = None
        self.likeness: tuple[object, ...] = ()

    # -- probes -------------------------------------------------------------------------------
    def _evict(self, units: Iterable[VictimUnit]) -> None:
        for unit in units:
            for task in unit.tasks:
                self.statement.evict(task, self.reason)

    def _place(self) -> list[int] | None:
        """Pipeline every task of the job (``place_job`` in ``SIMULATE`` mode: the capacity check
        against the queue state with the probe's evictions applied, as KAI's simulated
        AllocateJob does; the topology placer for constrained jobs); the nodes used, or None
        (nothing placed) on failure."""
        failure = place_job(
            self.session, self.job, self.tasks, self.statement, PlaceMode.SIMULATE, self.capacity
        )
        if failure is not None:
            return None
        return [t.node for t in self.tasks]

    def fits(self, units: Sequence[VictimUnit]) -> list[int] | None:
        """Would the job fit with ``units`` evicted? Leaves the statement unchanged. The nodes
        used (do not modify the list), or None."""
        probes, key = self.probes, self._probe_key("fits", units)
        if probes is not None and key is not None and key in probes:
            return probes[key]
        cp = self.statement.checkpoint()
        self._evict(units)
        used = self._place()
        self.statement.rollback(cp)
        if probes is not None and key is not None:
            probes[key] = used
        return used

    def _probe_key(self, kind: str, units: Sequence[VictimUnit]) -> tuple[object, ...] | None:
        """The probe memo's key of a probe with ``units`` evicted, or None when the probe must
        run. A probe reads the cluster, the job's placement likeness and the units; the memo
        is valid while the cluster is as the last commit left it: the session's search cache
        clears it on every commit, and a statement holding operations (a probe in the middle
        of an application) is never answered from it."""
        if self.probes is None or self.statement.operations:
            return None
        serials = tuple([u.serial for u in units])
        if serials and min(serials) < 0:
            return None  # units not numbered by the context: no stable name
        return (kind, self.likeness, serials)

    # -- search -------------------------------------------------------------------------------
    def smallest_prefix(
        self, candidates: Iterable[VictimUnit], accept: Acceptor | None = None
    ) -> list[VictimUnit] | None:
        """The shortest accepted prefix of ``candidates`` with which the job fits (units refused
        by ``accept`` are skipped, together with the later units of their job)."""
        accepted: list[VictimUnit] = []
        blocked: set[int] = set()
        stream = iter(candidates)

        def extend(n: int) -> bool:
            while len(accepted) < n:
                unit = next(stream, None)
                if unit is None:
                    return False
                if id(unit.job) in blocked:
                    continue
                if accept is not None and not accept(unit, accepted):
                    blocked.add(id(unit.job))
                    continue
                accepted.append(unit)
            return True

        low, high = 0, 1
        while True:
            complete = extend(high)
            if self.fits(accepted[:high]) is not None:
                break
            if not complete:
                return None
            low, high = high, high * 2
        high = min(high, len(accepted))
        # invariant: prefix `high` fits, prefix `low` does not
        while high - low > 1:
            mid = (low + high) // 2
            if self.fits(accepted[:mid]) is not None:
                high = mid
            else:
                low = mid
        return accepted[:high]

    def minimise(self, units: list[VictimUnit]) -> list[VictimUnit]:
        """Keep only the units the job needs: those on nodes it lands on, then drop, newest
        first, each unit whose removal still lets the job fit. A job's units stay a prefix of
        its own unit list (an extra is never spared while its gang goes)."""
        used = self.fits(units)
        if used is None:
            return units
        nodes = set(used)
        keep = [u for u in units if any(t.node in nodes for t in u.tasks)]
        keep = _close_prefixes(units, keep)
        if self.fits(keep) is None:
            keep = list(units)
        for unit in reversed(list(keep)):
            if any(u.job is unit.job and u.seq > unit.seq for u in keep):
                continue
            trial = [u for u in keep if u is not unit]
            if trial and self.fits(trial) is not None:
                keep = trial
        return keep

    # -- apply --------------------------------------------------------------------------------
    def apply(
        self,
        units: list[VictimUnit],
        move: bool,
        all_must_move: bool,
        validate: Validator | None,
    ) -> Solution | None:
        """Evict ``units``, pipeline the job, re-place victims when ``move``; validate; check
        that the next cycle's allocate would keep the job placed (:mod:`kai.scheduler.replay`). On
        failure the statement is rolled back to where it was and None is returned."""
        # a failure before the validation depends only on what a probe reads (the job does not
        # fit, or a victim that must move cannot): remembered in the probe memo
        probes, found = self.probes, self._probe_key("move" if move else "evict", units)
        key: tuple[object, ...] = ()
        if probes is None or found is None:
            probes = {}  # not remembered
        else:
            key = (*found, all_must_move)
        if key in probes:
            return None  # (only failures are kept)
        cp = self.statement.checkpoint()
        self._evict(units)
        if self._place() is None:
            self.statement.rollback(cp)
            probes[key] = None
            return None
        solution = Solution()
        for unit in units:
            if move and self._move(unit):
                solution.moved.append(unit)
            elif all_must_move:  # one victim stays evicted: no need to move the others
                self.statement.rollback(cp)
                probes[key] = None
                return None
            else:
                solution.victims.append(unit)
        if validate is not None and not validate(solution.victims, solution.moved):
            self.statement.rollback(cp)
            return None
        involved = [*self.tasks, *(t for u in units for t in u.tasks)]
        # consolidation promises every moved task a place: the replay must keep that promise too
        keep = involved if all_must_move else self.tasks
        from kai.scheduler.replay import replay_places

        if not replay_places(self.session, involved, keep, self.replay_order):
            self.statement.rollback(cp)
            return None
        return solution

    def _move(self, unit: VictimUnit) -> bool:
        """Re-place every task of a unit elsewhere (pipelined), or none of them. Elsewhere is
        another node, or for a shared-GPU task also another device of its own node."""
        cp = self.statement.checkpoint()
        engine = self.session.engine
        size = len(self.session.nodes)
        for task in unit.tasks:
            _, home, groups = self.session.original[task.uid]
            allowed = np.ones(size, dtype=bool)
            choice = None
            if task.is_shared and home >= 0:
                choice = engine.choose(task, allowed)
                if choice is not None and choice.node == home and choice.gpu_groups == groups:
                    choice = None  # back onto its own device: not a move
            if choice is None:
                if home >= 0:
                    allowed[home] = False
                choice = engine.choose(task, allowed)
            if choice is None:
                self.statement.rollback(cp)
                return False
            self.statement.pipeline(task, choice.node, choice.gpu_groups)
        return True


def _close_prefixes(order: list[VictimUnit], keep: list[VictimUnit]) -> list[VictimUnit]:
    """Add every earlier unit of a job one of whose units is kept, preserving ``order``."""
    need: dict[int, int] = {}
    for unit in keep:
        need[id(unit.job)] = max(need.get(id(unit.job), -1), unit.seq)
    return [u for u in order if u.seq <= need.get(id(u.job), -1)]


def gpu_room(session: Session) -> float:
    """GPUs idle or releasing in the cluster, shared devices' free portions included (the cheap
    first filter: a job needing more cannot fit whatever moves)."""
    nodes = session.nodes
    if len(nodes) == 0:
        return 0.0
    free = nodes.idle[:, GPU] + nodes.releasing[:, GPU]
    room = float(np.clip(free, 0.0, None).sum())
    for devices in nodes.devices:
        for device in devices.values():
            if device.offerable() and device.memory > 0:
                room += max(device.free_future(), 0.0) / device.memory
    return room


def reachable(
    session: Session, tasks: Iterable[TaskInfo], units: list[VictimUnit]
) -> list[VictimUnit]:
    """The units of victim jobs with a task on a node some of ``tasks`` may use at all (node
    affinity, taints, GPU kind: the placement engine's static masks); evicting other jobs
    cannot help. A job's units are kept or dropped together (they are taken in order)."""
    engine = session.engine
    usable = np.zeros(len(session.nodes), dtype=bool)
    for task in tasks:
        usable |= engine.class_of(task).static
    useful = {id(u.job) for u in units if any(usable[t.node] for t in u.tasks)}
    return [u for u in units if id(u.job) in useful]


def gpus_needed(tasks: Iterable[TaskInfo]) -> float:
    return float(sum(t.request[GPU] for t in tasks))


def unit_gpus(unit: VictimUnit) -> float:
    """An upper bound of the whole GPUs the unit frees (a shared task may free its devices)."""
    return float(sum(t.request[GPU] + len(t.gpu_groups) for t in unit.tasks))


def preemptor_candidates(
    session: Session,
    action: str,
    skip: Callable[[JobInfo], bool] | None = None,
) -> list[JobInfo]:
    """Jobs that may look for victims: pending tasks, ready, queue known, not delayed."""
    from kai.scheduler.plugins.preemption_delay import delay_reason

    out: list[JobInfo] = []
    for job in session.jobs:
        if job.pending == 0 or not job.queue_ok or not job.ready:
            continue
        reason = delay_reason(job.spec, session.snapshot.now)
        if reason is not None:
            reasons = session.job_reasons.setdefault(job.uid, [])
            if all(r.code != reason.code for r in reasons):
                reasons.append(reason)
            continue
        if skip is not None and skip(job):
            continue
        out.append(job)
    return out
