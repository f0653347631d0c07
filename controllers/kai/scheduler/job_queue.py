"""JobsOrderByQueues: repeatedly pop the best job of the best leaf queue.

Sibling queues are compared level by level with the fair-share package's queue order, given the
request of each side's best job: each queue gets an order key (``Proportion.order_key``) and
sibling keys are compared. A leaf holds its jobs in a heap on the job order key. A pop or a push
changes only the queues on that leaf's path (their best job, and, when the job is placed, their
allocation), so only their keys and best children are recomputed; every other queue's key and
best child stay cached.

Queue depth per action keeps the best ``depth`` jobs of each leaf (KAI drops an arbitrary heap
slot; keeping the best is the deterministic reading of its intent).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, Self

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.jobs import JobInfo
from kai.scheduler.queues import QueueInfo


class OrderKey(Protocol):
    def compare(self, other: Self, /) -> int: ...


QueueKey = Callable[[str, Vector], OrderKey]
JobKey = Callable[[JobInfo], tuple[object, ...]]
JobRequest = Callable[[JobInfo], Vector]


class _QueueNode:
    __slots__ = ("best", "children", "dirty", "heap", "key", "name", "parent")

    def __init__(self, name: str, parent: _QueueNode | None) -> None:
        self.name = name
        self.parent = parent
        self.children: list[_QueueNode] = []
        self.heap: list[tuple[tuple[object, ...], int, JobInfo]] = []
        self.dirty = True
        self.best: _QueueNode | None = None
        self.key: OrderKey | None = None  # order key with its best job; None = stale


class JobsOrderByQueues:
    def __init__(
        self,
        roots: Iterable[QueueInfo],
        jobs: Iterable[JobInfo],
        queue_key: QueueKey,
        job_key: JobKey,
        job_request: JobRequest,
        depth: int | None = None,
        presorted: Mapping[str, list[tuple[tuple[object, ...], int, JobInfo]]] | None = None,
    ) -> None:
        """``presorted``: further leaves' heaps as ascending ``(job key, seq, job)`` lists (with
        unique keys; copied, not modified), for callers that keep them between orders."""
        self._queue_key = queue_key
        self._job_key = job_key
        self._job_request = job_request
        self._seq = itertools.count()
        self._leaves: dict[str, _QueueNode] = {}
        self._root = _QueueNode("", None)

        def build(info: QueueInfo, parent: _QueueNode) -> None:
            node = _QueueNode(info.name, parent)
            parent.children.append(node)
            if info.is_leaf:
                self._leaves[info.name] = node
            for child in sorted(info.children, key=lambda q: q.name):
                build(child, node)

        for root in sorted(roots, key=lambda q: q.name):
            build(root, self._root)
        by_leaf: dict[str, list[JobInfo]] = {}
        for job in jobs:
            by_leaf.setdefault(job.queue, []).append(job)
        for name, members in by_leaf.items():
            leaf = self._leaves[name]
            entries = sorted((job_key(job), job.uid, job) for job in members)
            if depth is not None:
                entries = entries[: max(depth, 0)]
            leaf.heap = [(key, next(self._seq), job) for key, _, job in entries]
            heapq.heapify(leaf.heap)
        for name, sorted_entries in (presorted or {}).items():
            if sorted_entries:
                leaf = self._leaves[name]
                leaf.heap = list(sorted_entries)  # an ascending list is a heap

    def push(self, job: JobInfo) -> None:
        leaf = self._leaves[job.queue]
        heapq.heappush(leaf.heap, (self._job_key(job), next(self._seq), job))
        self._mark(leaf)

    def pop(self, placing: Callable[[JobInfo], bool] | None = None) -> JobInfo | None:
        """The next job. ``placing`` is for callers that pop some jobs only to skip them:
        ``placing(job)`` False promises the popped job will not be placed (no allocation
        changes). Then, when the next job of its leaf asks for the same request, every order key
        on the leaf's path is unchanged and is kept instead of recomputed."""
        leaf = self._best_leaf(self._root)
        if leaf is None:
            return None
        _, _, job = heapq.heappop(leaf.heap)
        if (
            placing is not None
            and leaf.heap
            and not placing(job)
            and self._job_request(leaf.heap[0][2]) == self._job_request(job)
        ):
            return job
        self._mark(leaf)
        return job

    def changed(self, job: JobInfo) -> None:
        """The allocations changed after ``job`` was popped with ``placing(job)`` False (e.g.
        it was placed after all): its leaf's path is ordered again as if ``pop`` had been told
        so. The caller keeps the keys of the other queues as they are."""
        self._mark(self._leaves[job.queue])

    def _mark(self, node: _QueueNode | None) -> None:
        while node is not None:
            node.dirty = True
            node.key = None
            node = node.parent

    def _best_leaf(self, node: _QueueNode) -> _QueueNode | None:
        if not node.dirty:
            return node.best
        node.dirty = False
        if not node.children:
            node.best = node if node.heap else None
            return node.best
        winner_key: OrderKey | None = None
        winner_leaf: _QueueNode | None = None
        for child in node.children:
            leaf = self._best_leaf(child) if child.dirty else child.best
            if leaf is None:
                continue
            key = child.key
            if key is None:
                key = self._queue_key(child.name, self._job_request(leaf.heap[0][2]))
                child.key = key
            if winner_key is None or key.compare(winner_key) < 0:
                winner_key, winner_leaf = key, leaf
        node.best = winner_leaf
        return winner_leaf
