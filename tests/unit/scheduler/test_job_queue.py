"""JobsOrderByQueues: best leaf of the best queue at every level; keys recomputed only on the
path of the leaf that changed; queue depth keeps the best jobs."""

from __future__ import annotations

from dataclasses import dataclass

from builders import queue

from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.job_queue import JobsOrderByQueues
from kai.scheduler.queues import QueueTree


@dataclass
class FakeJob:
    uid: str
    queue: str
    rank: int


@dataclass
class Key:
    value: float
    name: str

    def compare(self, other: Key) -> int:
        return -1 if (self.value, self.name) < (other.value, other.name) else 1


def _tree() -> QueueTree:
    return QueueTree(
        [
            queue("d1"),
            queue("d2"),
            queue("a", parent="d1"),
            queue("b", parent="d1"),
            queue("c", parent="d2"),
        ]
    )


def _order(
    jobs: list[FakeJob], usage: dict[str, float], calls: list[str], depth: int | None = None
):  # type: ignore[no-untyped-def]
    parents = {"a": "d1", "b": "d1", "c": "d2"}

    def key(name: str, request: Vector) -> Key:
        calls.append(name)
        if name in parents:
            return Key(usage[name] + request[0], name)
        return Key(sum(usage[c] for c, p in parents.items() if p == name) + request[0], name)

    return JobsOrderByQueues(
        _tree().roots,
        jobs,  # type: ignore[arg-type]
        key,
        lambda job: (job.rank, job.uid),  # type: ignore[attr-defined]
        lambda job: (1.0, 0.0, 0.0),
        depth,
    )


def test_pops_follow_the_hierarchy_and_live_usage() -> None:
    jobs = [FakeJob("a1", "a", 0), FakeJob("a2", "a", 1), FakeJob("b1", "b", 0)]
    jobs.append(FakeJob("c1", "c", 0))
    usage = {"a": 0.0, "b": 5.0, "c": 2.0}  # d1 uses 5, d2 uses 2
    order = _order(jobs, usage, [])
    first = order.pop()
    assert first is not None and first.uid == "c1"
    usage["c"] += 10  # c1 was placed: d2 now uses 12, d1 wins; inside d1, a (0) beats b (5)
    got = [order.pop(), order.pop()]
    assert [j.uid for j in got if j is not None] == ["a1", "a2"]
    usage["a"] += 20  # a is now the most used leaf of d1
    last = order.pop()
    assert last is not None and last.uid == "b1"
    assert order.pop() is None


def test_only_the_changed_path_is_recomputed() -> None:
    jobs = [FakeJob(f"{q}{i}", q, i) for q in "abc" for i in range(3)]
    usage = {"a": 0.0, "b": 0.0, "c": 0.0}
    calls: list[str] = []
    order = _order(jobs, usage, calls)
    popped = order.pop()
    assert popped is not None
    calls.clear()
    order.pop()
    # the popped leaf and its department are recomputed; the untouched department is cached
    leaf = popped.queue
    dept = {"a": "d1", "b": "d1", "c": "d2"}[leaf]
    other = "d2" if dept == "d1" else "d1"
    assert leaf in calls and dept in calls and other not in calls


def test_queue_depth_keeps_the_best_jobs_per_leaf() -> None:
    jobs = [FakeJob(f"a{i}", "a", 5 - i) for i in range(5)]
    order = _order(jobs, {"a": 0.0, "b": 0.0, "c": 0.0}, [], depth=2)
    got = []
    while (job := order.pop()) is not None:
        got.append(job.uid)
    assert got == ["a4", "a3"]


def test_departments_compared_before_leaves() -> None:
    jobs = [FakeJob("a1", "a", 0), FakeJob("c1", "c", 0)]
    usage = {"a": 0.0, "b": 9.0, "c": 1.0}  # d1 total 9, d2 total 1
    order = _order(jobs, usage, [])
    first = order.pop()
    assert first is not None and first.uid == "c1"


def test_popping_as_not_placed_then_changed_orders_as_plain_pops() -> None:
    """The victim actions pop every job as not placed and call ``changed`` only when a job was
    placed after all: the order is the one plain pops give with the same placements."""

    def run(tell: bool) -> list[str]:
        jobs = [FakeJob(f"{q}{i}", q, i) for q in "abc" for i in range(4)]
        usage = {"a": 0.0, "b": 0.5, "c": 0.25}
        order = _order(jobs, usage, [])
        got: list[str] = []
        while (job := (order.pop(lambda _: False) if tell else order.pop())) is not None:
            got.append(job.uid)
            if job.uid.endswith(("0", "2")):  # placed: its queue's usage grows
                usage[job.queue] += 1.5
                if tell:
                    order.changed(job)
        return got

    plain = run(False)
    assert len(plain) == 12 and plain != sorted(plain)
    assert run(True) == plain
