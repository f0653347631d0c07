"""A work queue of object keys with de-duplication, delayed re-queue and worker threads.

As in client-go: a key queued several times before a worker takes it is processed once; a key
being processed that is queued again is processed again afterwards (never concurrently with
itself); a failed key comes back after an exponential back-off (``base`` doubling to ``cap``).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

log = logging.getLogger("kai.kube.workqueue")


class WorkQueue:
    def __init__(
        self,
        name: str,
        process: Callable[[Hashable], bool | None],
        *,
        workers: int = 4,
        base: float = 0.1,
        cap: float = 30.0,
    ) -> None:
        """``process(key)`` returns False (or raises) to be retried with back-off."""
        self.name = name
        self.process = process
        self.workers = workers
        self.base = base
        self.cap = cap
        self._queue: deque[Hashable] = deque()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._again: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._cv = threading.Condition()
        self._stop = False
        self._threads: list[threading.Thread] = []

    def start(self) -> WorkQueue:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._delay_loop, name=f"{self.name}-delay", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout=10)
        self._threads = []

    def add(self, key: Hashable) -> None:
        with self._cv:
            if self._stop:
                return
            if key in self._active:
                self._again.add(key)
                return
            if key in self._queued:
                return
            self._queued.add(key)
            self._queue.append(key)
            # notify_all: the delay thread waits on the same condition, and a plain notify()
            # may wake it instead of a worker, leaving the key queued until the next event
            self._cv.notify_all()

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cv:
            self._seq += 1
            heapq.heappush(self._delayed, (time.monotonic() + delay, self._seq, key))
            self._cv.notify_all()

    def retry(self, key: Hashable) -> None:
        """Re-queue after the key's next back-off delay."""
        with self._cv:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        self.add_after(key, min(self.cap, self.base * 2**n))

    def forget(self, key: Hashable) -> None:
        with self._cv:
            self._failures.pop(key, None)

    def idle(self) -> bool:
        with self._cv:
            return not self._queue and not self._active and not self._delayed

    def __len__(self) -> int:
        with self._cv:
            return len(self._queue) + len(self._delayed)

    def _delay_loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and (
                    not self._delayed or self._delayed[0][0] > time.monotonic()
                ):
                    wait = self._delayed[0][0] - time.monotonic() if self._delayed else 1.0
                    self._cv.wait(max(0.005, min(wait, 1.0)))
                if self._stop:
                    return
                _, _, key = heapq.heappop(self._delayed)
            self.add(key)

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._queue:
                    self._cv.wait()
                if self._stop:
                    return
                key = self._queue.popleft()
                self._queued.discard(key)
                self._active.add(key)
            ok: bool | None = False
            try:
                ok = self.process(key)
            except Exception:
                log.exception("%s: processing %r failed", self.name, key)
                ok = False
            with self._cv:
                self._active.discard(key)
                again = key in self._again
                self._again.discard(key)
            if ok is False:
                self.retry(key)
            else:
                self.forget(key)
                if again:
                    self.add(key)
