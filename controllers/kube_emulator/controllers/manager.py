"""The loop that runs the workload controllers: store events become work keys (the changed
object, or the controller that owns it), one worker thread reconciles them, and every key is
looked at again after a resync period, as the real controller-manager's informers do."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kube_emulator.controllers.common import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    controller_ref,
)

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore
    from kube_emulator.storage import Event

log = logging.getLogger("kube_emulator.controllers")

Key = tuple[tuple[str, str], str, str]  # (type key, namespace, name)
_OWNER_KINDS = {
    ("batch", "Job"): JOBS,
    ("apps", "ReplicaSet"): REPLICASETS,
    ("apps", "Deployment"): DEPLOYMENTS,
    ("apps", "StatefulSet"): STATEFULSETS,
}


def _owner_key(obj: dict[str, Any]) -> Key | None:
    ref = controller_ref(obj)
    if ref is None:
        return None
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    tkey = _OWNER_KINDS.get((group, str(ref.get("kind"))))
    if tkey is None:
        return None
    return (tkey, obj["metadata"].get("namespace") or "", str(ref.get("name")))


class ControllerManager:
    """Runs ``reconcilers`` (type key -> function(namespace, name)) on one thread."""

    def __init__(
        self,
        core: ApiCore,
        reconcilers: dict[tuple[str, str], Callable[[str, str], None]],
        resync: float = 5.0,
    ) -> None:
        self.core = core
        self.reconcilers = reconcilers
        self.resync = resync
        self._pending: dict[Key, None] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    # -- producers (store listener: called with the store lock held) ---------------------------
    def _on_event(self, ev: Event) -> None:
        if ev.tkey not in self.reconcilers and ev.tkey != PODS:
            return
        keys: list[Key] = []
        for obj in (ev.obj, ev.prev):
            if obj is None:
                continue
            if ev.tkey in self.reconcilers:
                md = obj["metadata"]
                keys.append((ev.tkey, md.get("namespace") or "", md["name"]))
            owner = _owner_key(obj)
            if owner is not None and owner[0] in self.reconcilers:
                keys.append(owner)
        if keys:
            self.enqueue(*keys)

    def enqueue(self, *keys: Key) -> None:
        with self._cond:
            for key in keys:
                self._pending[key] = None
            self._cond.notify()

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> ControllerManager:
        if self._thread is None:
            self._stop = False
            with self.core.store.lock:
                self.core.store.listeners.append(self._on_event)
            self._thread = threading.Thread(
                target=self._run, name="kai-apiserver-controllers", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        with self.core.store.lock:
            if self._on_event in self.core.store.listeners:
                self.core.store.listeners.remove(self._on_event)
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
        self._thread = None

    def _resync_all(self) -> None:
        keys = [
            (tkey, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
            for tkey in self.reconcilers
            for obj in self.core.store.iter(tkey, None)
        ]
        if keys:
            self.enqueue(*keys)

    def _run(self) -> None:
        next_resync = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_resync:
                self._resync_all()
                next_resync = now + self.resync
            with self._cond:
                while not self._pending and not self._stop:
                    if not self._cond.wait(timeout=max(0.0, next_resync - time.monotonic())):
                        break
                if self._stop:
                    return
                batch = list(self._pending)
                self._pending.clear()
            for tkey, ns, name in batch:
                try:
                    self.reconcilers[tkey](ns, name)
                except Exception:  # one bad object must not stop the others
                    log.exception("reconciling %s %s/%s failed", tkey[1], ns, name)
