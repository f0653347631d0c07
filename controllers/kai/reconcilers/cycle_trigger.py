"""When the live scheduler runs its next cycle: on new work, on time-based work, never idly.

A cycle runs when

- an informer delivered a *relevant* change (:func:`relevant`): something that can change a
  decision or a reason -- a new or changed pod of this scheduler, a pod that frees or takes a
  node's capacity, a PodGroup's spec, a node's capacity, labels, taints or readiness, a Queue's
  spec, the scheduler ConfigMap, a Topology or PriorityClass, a BindRequest that failed or went
  away. The echo of the scheduler's own work is not relevant: a BindRequest it created, its pod
  getting ``spec.nodeName`` and starting, status writes (PodGroup conditions, Queue status, pod
  ``PodScheduled`` conditions), node heartbeats. The cycle starts ``coalesce`` seconds after the
  first such change, so a burst of events makes one cycle; while work keeps arriving, a cycle
  starts no sooner than ``min_interval`` (the period) after the previous one *ended*, as KAI's
  ``wait.Until(runOnce, schedulePeriod)`` spaces its cycles: a cycle longer than the period
  is followed by a pause, not by the next cycle at once (during a burst the scheduler then
  leaves the API server and the other components their share of the CPU, and each cycle takes
  more of the new work);
- something time-based is due (:func:`next_due`): a stale gang's grace period ends, a pending
  job's preemption delay ends, a running job's minimum runtime protection ends while some job is
  pending, an in-flight BindRequest the informer never showed expires, a failed write is
  retried, or time-based fair share is on (usage decays: then every ``period``);
- ``resync`` seconds passed without a cycle: a safety net, not a mechanism.

Otherwise the loop sleeps: an idle cluster costs no scheduling CPU. See
docs/design/scheduler-cycle.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kai.scheduler.snapshot import JobSpec, QueueSpec, SchedulerConfig

_TERMINAL = ("Succeeded", "Failed")
# annotations the scheduler writes on its own PodGroups: their echo is not new work
_OWN_PODGROUP_ANNOTATIONS = frozenset(
    {
        "kai.scheduler/last-start-timestamp",
        "kai.scheduler/last-eviction-timestamp",
        "kai.scheduler/stale-podgroup-timestamp",
    }
)


def _md(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("spec") or {}


def _phase(obj: Mapping[str, Any] | None) -> str | None:
    phase = ((obj or {}).get("status") or {}).get("phase")
    return None if phase is None else str(phase)


# -- what is relevant -------------------------------------------------------------------------
def _pod_signature(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    md = _md(pod)
    spec = {k: v for k, v in _spec(pod).items() if k != "nodeName"}
    return (
        md.get("labels"),
        md.get("annotations"),
        bool(md.get("deletionTimestamp")),
        _phase(pod) in _TERMINAL,
        spec,
    )


def _pod_relevant(
    etype: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None, scheduler_name: str
) -> bool:
    spec = _spec(obj)
    ours = spec.get("schedulerName") == scheduler_name
    node = spec.get("nodeName")
    if etype == "DELETED":
        return bool(node) or ours  # frees capacity, or leaves a gang
    if old is None:  # ADDED (or a relist found it)
        return ours or bool(node)
    if _pod_signature(obj) != _pod_signature(old):
        return ours or bool(node) or bool(_spec(old).get("nodeName"))
    old_node = _spec(old).get("nodeName")
    if node == old_node:
        return False  # status only: the kubelet, or this scheduler's PodScheduled condition
    # our pod bound by the binder: the echo of our own decision (it counted as Binding there)
    return not (ours and node and not old_node)


def _podgroup_signature(pg: Mapping[str, Any]) -> tuple[Any, ...]:
    md = _md(pg)
    annotations = {
        k: v for k, v in (md.get("annotations") or {}).items() if k not in _OWN_PODGROUP_ANNOTATIONS
    }
    return (md.get("labels"), annotations, bool(md.get("deletionTimestamp")), _spec(pg))


def _node_signature(node: Mapping[str, Any]) -> tuple[Any, ...]:
    md = _md(node)
    status = node.get("status") or {}
    ready = [
        c.get("status") for c in status.get("conditions") or [] if (c or {}).get("type") == "Ready"
    ]
    return (
        md.get("labels"),
        bool(md.get("deletionTimestamp")),
        _spec(node),
        status.get("allocatable"),
        status.get("capacity"),
        ready,
    )


def _queue_signature(queue: Mapping[str, Any]) -> tuple[Any, ...]:
    md = _md(queue)
    return (md.get("labels"), md.get("creationTimestamp"), _spec(queue))


def _bind_request_relevant(
    etype: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> bool:
    if etype == "DELETED":
        return _phase(obj) != "Succeeded"  # a live one gone: its pod is pending again
    if old is None:
        return _phase(obj) == "Failed"  # created by this scheduler (or relisted)
    failed = _phase(obj) == "Failed" or bool(_md(obj).get("deletionTimestamp"))
    was_failed = _phase(old) == "Failed" or bool(_md(old).get("deletionTimestamp"))
    return failed and not was_failed


_SIGNATURES: dict[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]] = {
    "podgroups": _podgroup_signature,
    "nodes": _node_signature,
    "queues": _queue_signature,
}


def relevant(
    kind: str,
    etype: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    scheduler_name: str,
) -> bool:
    """Whether an informer event of ``kind`` (the scheduler's informer names) can change a
    scheduling decision or reason. ``old`` is the cached object before the event (None when
    the informer had none)."""
    if kind == "pods":
        return _pod_relevant(etype, obj, old, scheduler_name)
    if kind == "bindrequests":
        return _bind_request_relevant(etype, obj, old)
    signature = _SIGNATURES.get(kind)
    if signature is None or etype != "MODIFIED" or old is None:
        return True  # config, topologies, priority classes; any add or delete
    return signature(obj) != signature(old)


# -- what is due --------------------------------------------------------------------------------
def _min_runtimes(config: SchedulerConfig, queues: Iterable[QueueSpec]) -> set[float]:
    values = {config.default_preempt_min_runtime, config.default_reclaim_min_runtime}
    for queue in queues:
        values.add(queue.preempt_min_runtime or 0.0)
        values.add(queue.reclaim_min_runtime or 0.0)
    return {v for v in values if v and v > 0}


def next_due(
    now: float,
    jobs: Iterable[JobSpec],
    queues: Iterable[QueueSpec],
    config: SchedulerConfig,
    *,
    stale: Callable[[JobSpec], bool],
    pending: Callable[[JobSpec], bool],
) -> float | None:
    """The earliest wall-clock time after ``now`` at which a cycle over an unchanged cluster
    could decide differently (None: never). ``stale(job)``: the job is below its gang minimum
    after the cycle; ``pending(job)``: the job still has a pending reason."""
    from kai.scheduler.plugins.preemption_delay import delay_ends

    jobs = list(jobs)
    times: list[float] = []
    any_pending = False
    for job in jobs:
        if stale(job):
            grace = (
                config.staleness_grace_period
                if job.staleness_grace_period is None
                else job.staleness_grace_period
            )
            if grace >= 0:
                times.append((job.stale_since or now) + grace)
        if pending(job):
            any_pending = True
            ends = delay_ends(job)
            if ends is not None:
                times.append(ends)
    if any_pending:
        runtimes = _min_runtimes(config, queues)
        for job in jobs:
            if job.last_start_time is not None:
                times.extend(job.last_start_time + r for r in runtimes)
    future = [t for t in times if t > now]
    # a deadline already passed (the cycle just ran at it) is not due again
    return min(future) if future else None


class CycleTrigger:
    """The scheduler loop's alarm clock: :meth:`changed` from informer threads,
    :meth:`wait` in the loop, :meth:`schedule` for time-based work."""

    def __init__(
        self,
        coalesce: float,
        resync: float,
        min_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coalesce = coalesce
        self.resync = resync
        self.min_interval = min_interval
        self.clock = clock
        self._cond = threading.Condition()
        self._changed_at: float | None = clock()  # the first cycle runs as soon as it can
        self._due: float = math.inf
        self._last_start = -math.inf
        self._last_end = -math.inf  # when the loop came back from its last cycle
        self._running = False  # a cycle was handed out and the loop has not come back yet
        self._stopped = False
        self.changes = 0  # relevant changes seen (tests, logs)

    def changed(self) -> None:
        with self._cond:
            self.changes += 1
            if self._changed_at is None:
                self._changed_at = self.clock()
                self._cond.notify_all()

    def schedule(self, at: float) -> None:
        """Run a cycle no later than ``at`` (this clock's time)."""
        with self._cond:
            if at < self._due:
                self._due = at
                self._cond.notify_all()

    def skipped(self) -> None:
        """The cycle :meth:`wait` handed out did not run (not leading, informers not synced
        yet): it does not delay the next one."""
        with self._cond:
            self._running = False

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _next_start(self) -> float:
        start = min(self._due, self._last_start + self.resync)
        if self._changed_at is not None:
            new_work = max(self._changed_at + self.coalesce, self._last_end + self.min_interval)
            start = min(start, new_work)
        return start

    def wait(self) -> bool:
        """Block until a cycle should start; False when stopped. The pending change and due
        time are taken: what arrives from now on triggers the next cycle. Calling it again
        means the cycle it handed out has ended: new work waits ``min_interval`` from now."""
        with self._cond:
            if self._running:
                self._running = False
                self._last_end = self.clock()
            while not self._stopped:
                delay = self._next_start() - self.clock()
                if delay <= 0:
                    self._changed_at = None
                    self._due = math.inf
                    self._last_start = self.clock()
                    self._running = True
                    return True
                self._cond.wait(delay)
            return False
