"""Queue status and PodGroup ``resourcesStatus`` from the scheduler's latest cycle.

KAI has a queue-controller and a podgroup-controller for this; here one writer fed by the
scheduler's results does both, in its own thread and at its own pace (``period``), so status
writes never slow a scheduling cycle. Writes are compare-then-patch on the status subresource.

- Queue: ``childQueues``, ``allocated``, ``allocatedNonPreemptible``, ``requested`` (KAI's
  fields, as resource lists ``nvidia.com/gpu``/``cpu``/``memory``) and this project's
  ``fairShare``; and KAI's ``Orphan`` condition on a queue whose parent (or an ancestor's)
  does not exist: such a queue and its subtree are left out of scheduling, and its status
  says so instead of staying empty.
- PodGroup: ``resourcesStatus.{requested, allocated, allocatedNonPreemptible}``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kai.api.gpu_request import queue_gpus
from kai.api.protection import IN_USE
from kai.kube.client import Kube, KubeError
from kai.kube.resources import PODGROUPS, QUEUES
from kai.kube.writes import patch_if_changed
from kai.reconcilers.snapshot_builder import BuiltSnapshot
from kai.scheduler.result import SessionResult
from kai.scheduler.snapshot import ALLOCATED_STATUSES

log = logging.getLogger("kai.status")


def gpu_text(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def resource_list(figures: dict[str, float]) -> dict[str, str]:
    """Core units (GPUs, millicores, bytes) -> a Kubernetes resource list."""
    return {
        "nvidia.com/gpu": gpu_text(figures.get("gpu", 0.0)),
        "cpu": f"{round(figures.get('cpu', 0.0))}m",
        "memory": str(round(figures.get("memory", 0.0))),
    }


def orphan_queues(queues: list[dict[str, Any]]) -> dict[str, str]:
    """Queue name -> why it is an orphan: its parent, or an ancestor's parent, does not exist
    (a cycle of parents counts as missing too)."""
    parents = {
        q["metadata"]["name"]: (q.get("spec") or {}).get("parentQueue") or None for q in queues
    }
    out: dict[str, str] = {}
    for name in parents:
        seen = {name}
        current = name
        while (parent := parents.get(current)) is not None:
            if parent not in parents:
                if current == name:
                    out[name] = f"parent queue {parent!r} does not exist"
                else:
                    out[name] = (
                        f"ancestor {current!r} has a parent queue {parent!r} that does not exist"
                    )
                break
            if parent in seen:
                out[name] = f"its parent queues form a cycle through {parent!r}"
                break
            seen.add(parent)
            current = parent
    return out


def orphan_conditions(
    queue: dict[str, Any], problem: str | None, now: str
) -> list[dict[str, Any]] | None:
    """KAI's ``Orphan`` condition for a queue cut off from the tree (None: no condition)."""
    if problem is None:
        return None
    message = f"{problem}: the queue and its children are not scheduled; their jobs stay pending"
    for cond in (queue.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Orphan" and cond.get("message") == message:
            return [dict(cond)]
    return [
        {
            "type": "Orphan",
            "status": "True",
            "reason": "ParentQueueNotFound",
            "message": message,
            "lastTransitionTime": now,
        }
    ]


class StatusWriter:
    def __init__(
        self,
        kube: Kube,
        queues_informer: Any,
        *,
        period: float = 2.0,
        workers: int = 4,
        queue_condition: Callable[[], dict[str, Any] | None] | None = None,
    ) -> None:
        self.kube = kube
        # a condition every Queue carries (the time-based fairshare state), or None
        self.queue_condition = queue_condition
        self.queues = queues_informer
        self.period = period
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="status")
        self._latest: tuple[BuiltSnapshot, SessionResult] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="status-writer", daemon=True)
        self.writes = 0

    def __call__(self, built: BuiltSnapshot, result: SessionResult) -> None:
        with self._lock:
            self._latest = (built, result)

    def start(self) -> StatusWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with self._lock:
                latest, self._latest = self._latest, None
            if latest is None:
                continue
            try:
                self.write(*latest)
            except CancelledError:  # stop() dropped the writes still queued: not a failure
                return
            except Exception:
                log.exception("status write failed")

    def write(self, built: BuiltSnapshot, result: SessionResult) -> None:
        futures = []
        children: dict[str, list[str]] = {}
        for q in built.snapshot.queues:
            if q.parent:
                children.setdefault(q.parent, []).append(q.name)
        condition = self.queue_condition() if self.queue_condition is not None else None
        queues = self.queues.items()
        orphans = orphan_queues(queues)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for queue in queues:
            name = queue["metadata"]["name"]
            share = result.queues.get(name)
            status: dict[str, Any] = {"childQueues": sorted(children.get(name, [])) or None}
            # the conditions this writer owns: Orphan (when cut off from the tree) and the
            # time-based fairshare state (when a usage source is configured)
            conditions = orphan_conditions(queue, orphans.get(name), now) or []
            # kai controller's InUse (a Terminating queue still held) is not this writer's
            conditions += [
                dict(c)
                for c in (queue.get("status") or {}).get("conditions") or []
                if c.get("type") == IN_USE
            ]
            if condition is not None:
                conditions.append(_transitioned(queue, condition))
            status["conditions"] = conditions or None
            if share is not None:
                status.update(
                    {
                        "allocated": resource_list(share.allocated),
                        "allocatedNonPreemptible": resource_list(share.allocated_non_preemptible),
                        "requested": resource_list(share.requested),
                        "fairShare": resource_list(share.fair_share),
                    }
                )
            futures.append(self.pool.submit(self._patch, QUEUES, queue, {"status": status}))
        min_memory = min(
            (n.gpu_memory_mib for n in built.snapshot.nodes if n.gpus > 0), default=None
        )
        for job in built.snapshot.jobs:
            pg = built.podgroups.get(job.uid)
            if pg is None:
                continue
            requested = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
            allocated = dict.fromkeys(requested, 0.0)
            for task in job.tasks:
                figures = {
                    "gpu": queue_gpus(task.gpu, min_memory),
                    "cpu": task.cpu_millis,
                    "memory": task.memory_bytes,
                }
                outcome = result.tasks.get(task.uid)
                for key, value in figures.items():
                    requested[key] += value
                    if outcome is not None and outcome.status in ALLOCATED_STATUSES:
                        allocated[key] += value
            resources = {
                "requested": resource_list(requested),
                "allocated": resource_list(allocated),
                "allocatedNonPreemptible": resource_list(
                    allocated if not job.preemptible else dict.fromkeys(allocated, 0.0)
                ),
            }
            futures.append(
                self.pool.submit(
                    self._patch, PODGROUPS, pg, {"status": {"resourcesStatus": resources}}
                )
            )
        for future in futures:
            future.result()

    def _patch(self, res: Any, obj: dict[str, Any], patch: dict[str, Any]) -> None:
        try:
            if patch_if_changed(self.kube, res, obj, patch, sub="status") is not None:
                self.writes += 1
        except KubeError as exc:
            log.info("cannot write %s %s status: %s", res.kind, obj["metadata"]["name"], exc)


def _transitioned(queue: dict[str, Any], condition: dict[str, Any]) -> dict[str, Any]:
    """``condition`` with its transition time: kept from the queue's current condition of that
    type while the status stays the same, else now."""
    from kai.reconcilers.scheduler import rfc3339

    existing = (queue.get("status") or {}).get("conditions") or []
    old = next((c for c in existing if c.get("type") == condition["type"]), None)
    new = dict(condition)
    if old is not None and old.get("status") == new["status"]:
        new["lastTransitionTime"] = old.get("lastTransitionTime") or rfc3339()
    else:
        new["lastTransitionTime"] = rfc3339()
    return new
