"""Min-runtime protection (KAI plugin ``minruntime``).

A victim job is protected while ``now < last start + min runtime``; a job that never started
(no ``last_start_time``) is not protected. The min runtime comes from the queue tree:

- preempt: walk from the victim's leaf queue to the root, first ``preempt_min_runtime`` found;
- reclaim, resolution ``queue``: the same walk with ``reclaim_min_runtime``;
- reclaim, resolution ``lca`` (KAI's default): find the lowest common ancestor of the
  reclaimer's and the victim's leaf queues, step one level down towards the victim, and walk up
  from there (queues in different top-level trees: start at the victim's top-level queue).

Nothing found: the scheduler's default (``SchedulerConfig.default_*_min_runtime``, which a
shard's ``spec.minRuntime`` fills). A protected job may still lose its elastic extras (it stays
at its gang minimum), but never its gang: the victim search asks for extras-only units.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kai.scheduler.jobs import JobInfo
    from kai.scheduler.queues import QueueInfo
    from kai.scheduler.session import Session

PREEMPT = "preempt"
RECLAIM = "reclaim"


def _first(chain: list[QueueInfo], attribute: str) -> float | None:
    for queue in chain:
        value: float | None = getattr(queue.spec, attribute)
        if value is not None:
            return value
    return None


def preempt_min_runtime(session: Session, victim_queue: str) -> float:
    info = session.queue_tree.queues.get(victim_queue)
    found = _first(info.ancestors(), "preempt_min_runtime") if info is not None else None
    return session.config.default_preempt_min_runtime if found is None else found


def reclaim_min_runtime(session: Session, reclaimer_queue: str, victim_queue: str) -> float:
    queues = session.queue_tree.queues
    victim = queues.get(victim_queue)
    default = session.config.default_reclaim_min_runtime
    if victim is None:
        return default
    chain = victim.ancestors()  # leaf first
    if session.config.reclaim_min_runtime_resolve == "queue":
        found = _first(chain, "reclaim_min_runtime")
        return default if found is None else found
    reclaimer = queues.get(reclaimer_queue)
    mine = {q.name for q in reclaimer.ancestors()} if reclaimer is not None else set()
    start = len(chain) - 1  # the victim's top-level queue when the trees differ
    for i, queue in enumerate(chain):
        if queue.name in mine:  # the lowest common ancestor
            start = max(i - 1, 0)
            break
    found = _first(chain[start:], "reclaim_min_runtime")
    return default if found is None else found


def is_protected(job: JobInfo, min_runtime: float, now: float) -> bool:
    started = job.spec.last_start_time
    return started is not None and min_runtime > 0 and now < started + min_runtime


def preempt_protected(session: Session, victim: JobInfo) -> bool:
    runtime = preempt_min_runtime(session, victim.queue)
    return is_protected(victim, runtime, session.snapshot.now)
