"""An event recorder: core/v1 Events, written asynchronously, de-duplicated.

The same (object, type, reason, message) within ``dedup_window`` seconds becomes one Event whose
``count`` and ``lastTimestamp`` are bumped (at most once per ``dedup_window``), as client-go's
correlator does, so a pod that stays pending for an hour does not write thousands of Events.
Events are sent by a worker thread from a bounded queue: recording never blocks a control loop.
When the queue overflows, the surplus is dropped and counted (``dropped``) and logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.resources import EVENTS
from kai.kube.writes import with_retries

log = logging.getLogger("kai.kube.events")


def _ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    md = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion") or "v1",
        "kind": obj.get("kind") or "",
        "name": md.get("name") or "",
        "uid": md.get("uid") or "",
        "resourceVersion": md.get("resourceVersion") or "",
    }
    if md.get("namespace"):
        ref["namespace"] = md["namespace"]
    return ref


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        *,
        host: str = "",
        dedup_window: float = 60.0,
        max_queue: int = 10_000,
        default_namespace: str = "default",
    ) -> None:
        self.kube = kube
        self.component = component
        self.host = host
        self.dedup_window = dedup_window
        self.default_namespace = default_namespace
        self._queue: queue.Queue[tuple[dict[str, Any], str, str, str] | None] = queue.Queue(
            max_queue
        )
        # dedup key -> (event name, count, local time of the last write)
        self._seen: dict[str, tuple[str, int, float]] = {}
        self._lock = threading.Lock()
        self.dropped = 0
        self.written = 0
        self._thread: threading.Thread | None = None

    def start(self) -> EventRecorder:
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()
        return self

    def stop(self, flush_timeout: float = 2.0) -> None:
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=flush_timeout)
        self._thread.join(timeout=flush_timeout + 1)
        self._thread = None

    def event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Record an Event about ``obj`` (a raw object with apiVersion/kind/metadata)."""
        try:
            self._queue.put_nowait((obj, etype, reason, message[:1024]))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("event queue full: %d event(s) dropped so far", self.dropped)

    def flush(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    # -- worker --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
            except KubeError as exc:
                log.info("could not write event: %s", exc)
            except Exception:
                log.exception("event recorder failed")
            finally:
                self._queue.task_done()

    def _write(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        ref = reference(obj)
        namespace = ref.get("namespace") or self.default_namespace
        key = "\x00".join((ref["kind"], namespace, ref["name"], ref["uid"], etype, reason, message))
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[2] < self.dedup_window:
                self._seen[key] = (seen[0], seen[1] + 1, seen[2])
                return
        if seen is not None:
            name, count = seen[0], seen[1] + 1
            try:
                with_retries(
                    lambda: self.kube.patch(
                        EVENTS,
                        name,
                        {"count": count, "lastTimestamp": _ts()},
                        namespace,
                    ),
                    attempts=3,
                )
                with self._lock:
                    self._seen[key] = (name, count, now)
                self.written += 1
                return
            except ApiError as exc:
                if exc.status != 404:
                    raise
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        name = f"{ref['name'] or 'object'}.{digest}{int(time.time() * 1000) % 100000:05d}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name[:253], "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": etype,
            "count": 1,
            "firstTimestamp": _ts(),
            "lastTimestamp": _ts(),
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
        }
        try:
            with_retries(lambda: self.kube.create(EVENTS, body), attempts=3)
        except ApiError as exc:
            if exc.status != 409:
                raise
        with self._lock:
            self._seen[key] = (body["metadata"]["name"], 1, now)
            if len(self._seen) > 50_000:
                cutoff = now - self.dedup_window
                for k in [k for k, v in self._seen.items() if v[2] < cutoff]:
                    del self._seen[k]
        self.written += 1
