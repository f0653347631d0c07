"""The stability replay: would the next cycle's allocate keep a victim search's result?

A victim search (:mod:`kai.scheduler.victims`) is only worth committing when the job it made
room for gets that room in the next cycle. Evicted and moved tasks are recreated pending then,
and allocate re-places them in its own order; if that order hands the room back to a victim,
the same evictions repeat every cycle. :func:`replay_places` answers the question by replaying
that allocate inside the session and undoing everything afterwards.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.job_placement import PlaceMode, place_job
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.statement import Statement
from kai.scheduler.victims import next_request

if TYPE_CHECKING:
    from kai.scheduler.fairshare.queue_order import QueueOrderKey
    from kai.scheduler.framework import JobOrder
    from kai.scheduler.queues import QueueInfo
    from kai.scheduler.session import Session


#: jobs the replay may try before giving up on the job it checks (then: assume it is not placed)
REPLAY_LIMIT = 256

#: a heap entry of the allocate order: (job order key, sequence number, job); keys end with the
#: job's uid, so they are unique and a sorted list of entries is a valid heap
Entry = tuple[tuple[object, ...], int, JobInfo]


class ReplayOrder:
    """The next cycle's allocate order, kept across the replays of one action run.

    Building the order from scratch for every replay (every ready pending job's order key and
    request, then a sort per leaf queue) cost most of a full cycle. Here each leaf's ready
    pending jobs stay in a sorted entry list; before a replay, only the jobs whose
    :attr:`JobInfo.version` changed since they were last seen (the replay's own involved jobs,
    and those a committed search changed) are re-keyed and moved in their list. Requests are
    computed only for jobs that head their leaf, and cached by version.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._seen: dict[str, int] = {}  # job uid -> version its entry was made at
        self._entries: dict[str, Entry] = {}  # job uid -> its entry, while ready and pending
        self._leaves: dict[str, list[Entry]] = {}  # leaf queue -> entries, sorted
        self._seq = 0
        self._position = -1  # how far session.job_changes was read (-1: not yet)

    def refresh(self) -> dict[str, list[Entry]]:
        """Bring the entry lists up to date with the session; returns them (do not modify)."""
        job_order = self.session.registry.job_order
        seen = self._seen
        changes = self.session.job_changes
        if self._position < 0:
            jobs: Iterable[JobInfo] = self.session.jobs  # first time: every job
        else:
            jobs = changes[self._position :]
        self._position = len(changes)
        for job in jobs:
            if seen.get(job.uid) == job.version:
                continue
            seen[job.uid] = job.version
            old = self._entries.pop(job.uid, None)
            if old is not None:
                entries = self._leaves[job.queue]
                del entries[bisect.bisect_left(entries, old)]
            if job.pending > 0 and job.queue_ok and job.ready:
                self._seq += 1
                entry = (job_order(job), self._seq, job)
                bisect.insort(self._leaves.setdefault(job.queue, []), entry)
                self._entries[job.uid] = entry
        return self._leaves

    def request(self, job: JobInfo) -> Vector:
        """What the job's next tasks ask of its queue, in its current state."""
        return next_request(self.session, job)


def replay_places(
    session: Session,
    involved: list[TaskInfo],
    must_place: list[TaskInfo],
    cache: ReplayOrder | None = None,
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

    ``cache`` keeps the order between replays (see :class:`ReplayOrder`); without it one is
    built for this replay alone. After ``REPLAY_LIMIT`` victim jobs were tried first, the answer
    is no.
    """
    from kai.scheduler.snapshot import TaskStatus

    saved = [(t, t.status, t.node, t.gpu_groups) for t in involved]
    for task in involved:
        session.set_placement(task, TaskStatus.PENDING, -1, ())
    replay = Statement(session, "replay")
    try:
        keys = _QueueKeys(session)
        order = _allocate_order(
            session, involved, cache if cache is not None else ReplayOrder(session), keys
        )
        return _replay(session, replay, order, keys, involved, must_place)
    finally:
        replay.discard()
        for task, status, node, groups in reversed(saved):
            session.set_placement(task, status, node, groups)


class _QueueKeys:
    """Queue order keys, shared between placements: a queue's key is a function of its request
    and the allocations, which change only when a contender is placed (then: ``clear``)."""

    def __init__(self, session: Session) -> None:
        self._proportion = session.proportion
        self._keys: dict[tuple[str, Vector], QueueOrderKey] = {}

    def __call__(self, name: str, request: Vector) -> QueueOrderKey:
        found = self._keys.get((name, request))
        if found is None:
            found = self._proportion.order_key(name, request)
            self._keys[(name, request)] = found
        return found

    def clear(self) -> None:
        self._keys.clear()


def _allocate_order(
    session: Session, involved: list[TaskInfo], cache: ReplayOrder, keys: _QueueKeys
) -> JobsOrderByQueues | _LeafOrder:
    """The next cycle's allocate order, reduced to what decides the contenders' turns."""
    job_order = session.registry.job_order
    leaves = {t.job.queue for t in involved}
    if len(leaves) == 1:
        # Every contender in one leaf queue: whatever the other queues do, that leaf's jobs
        # come out in its own heap order, and only contenders are placed, so the contenders
        # alone in job order give the same sequence of placements.
        return _LeafOrder({id(t.job): t.job for t in involved}.values(), job_order)
    # Likewise, the jobs under the contenders' lowest common ancestor queue come out in an
    # order that the queues outside it only delay: the replay can stay inside it.
    roots, presorted = _subtree(session, leaves, cache.refresh())
    return JobsOrderByQueues(roots, (), keys, job_order, cache.request, presorted=presorted)


def _replay(
    session: Session,
    replay: Statement,
    order: JobsOrderByQueues | _LeafOrder,
    keys: _QueueKeys,
    involved: list[TaskInfo],
    must_place: list[TaskInfo],
) -> bool:
    """Pop jobs in ``order``, place the contenders (``place_job`` in ``REPLAY`` mode) until
    ``must_place`` is placed (True) or one of its jobs failed (False)."""
    from kai.scheduler.gang import tasks_to_allocate

    owners = {id(t.job) for t in must_place}
    contenders = {id(t.job) for t in involved}  # everybody else only orders

    def contender(job: JobInfo) -> bool:
        return id(job) in contenders

    tried = 0
    while (job := order.pop(contender)) is not None:
        if id(job) not in contenders:
            continue  # unrelated jobs are popped but not placed (see replay_places)
        tasks = tasks_to_allocate(job)
        if not tasks:
            continue
        if id(job) not in owners:
            tried += 1
            if tried > REPLAY_LIMIT:
                return False
        keys.clear()
        if place_job(session, job, tasks, replay, PlaceMode.REPLAY) is None:
            if all(t.node >= 0 for t in must_place):
                return True
            if job.pending > 0:
                order.push(job)
        elif id(job) in owners:
            return False
    return all(t.node >= 0 for t in must_place)


def _subtree(
    session: Session, leaves: set[str], entries: dict[str, list[Entry]]
) -> tuple[list[QueueInfo], dict[str, list[Entry]]]:
    """The root queues and the leaves' entries of the smallest queue subtree holding every
    queue of ``leaves`` (the whole tree when they have no common ancestor)."""
    tree = session.queue_tree
    chains = [tree.queues[name].ancestors() for name in leaves]
    common = set.intersection(*({id(q) for q in chain} for chain in chains))
    top = next((q for q in chains[0] if id(q) in common), None)  # deepest common queue
    if top is None:
        return list(tree.roots), entries
    under: dict[str, list[Entry]] = {}
    stack = [top]
    while stack:
        queue = stack.pop()
        if queue.is_leaf:
            found = entries.get(queue.name)
            if found:
                under[queue.name] = found
        stack.extend(queue.children)
    return [top], under


class _LeafOrder:
    """The allocate order of the contenders of one leaf queue (see ``replay_places``)."""

    def __init__(self, jobs: Iterable[JobInfo], job_order: JobOrder) -> None:
        self._key = job_order
        self._seq = 0
        self._heap: list[Entry] = []
        for job in jobs:
            if job.pending > 0 and job.queue_ok and job.ready:
                self.push(job)

    def push(self, job: JobInfo) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self._key(job), self._seq, job))

    def pop(self, placing: Callable[[JobInfo], bool] | None = None) -> JobInfo | None:
        return heapq.heappop(self._heap)[2] if self._heap else None
