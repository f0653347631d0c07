"""Informers: list + watch into an in-memory cache of plain dicts.

One thread per informer lists the resource (paged), then watches from the list's
resourceVersion. Every event updates the cache and calls the handlers; BOOKMARK events only
advance the resourceVersion. When the watch ends (timeout, dropped connection, server restart)
it resumes from the last resourceVersion seen; when the server answers 410 Gone (that version
is compacted away) it lists again and reconciles the cache against the fresh list, emitting
the ADDED/MODIFIED/DELETED events that the gap hid. No change is ever lost silently: the cache
converges to the server's state and every difference reaches the handlers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError, Resource
from kai.kube.writes import Backoff

log = logging.getLogger("kai.kube.informer")

Key = tuple[str, str]  # (namespace or "", name)
Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]


def key_of(obj: dict[str, Any]) -> Key:
    md = obj.get("metadata") or {}
    return (md.get("namespace") or "", md.get("name") or "")


class Informer:
    """A watched, cached resource. Handlers get ``(event_type, object, previous_or_None)``."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 5000,
        watch_timeout: int = 300,
        name: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace  # one namespace only (a namespaced Role suffices), or all
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.name = name or resource.plural
        self.cache: dict[Key, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self.handlers: list[Handler] = []
        self.synced = threading.Event()
        self.resource_version = ""
        self.generation = 0  # bumped on every change: cheap "did anything change" checks
        self.relists = 0
        self.watch_restarts = 0
        # the first list: how long it took and how many objects it brought (start-up timeline)
        self.list_seconds: float | None = None
        self.listed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # -- reading -------------------------------------------------------------------------
    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.cache.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.cache.values())

    def keys(self) -> list[Key]:
        with self.lock:
            return list(self.cache)

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            _cut_stream(response)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = Backoff(base=0.1, cap=10.0)
        failures = 0
        need_list = not self.resource_version  # a restarted informer resumes where it was
        # the first list may come from the API server's watch cache (resourceVersion=0, as
        # client-go's reflector lists): no etcd read, one answer; the watch then resumes from
        # the list's version, so nothing is missed. A relist after 410 Gone reads the current
        # state (consistent), since the cache was found behind.
        from_cache = need_list
        while not self._stop.is_set():
            start_rv = self.resource_version
            try:
                if need_list:
                    self._list(from_cache)
                    need_list = from_cache = False
                self._watch()
                failures = 0
            except ApiError as exc:
                if exc.status == 410:
                    log.info("%s: resourceVersion too old; listing again", self.name)
                    self.relists += 1
                    need_list = True
                    continue
                failures += 1
                if not self._stop.is_set():
                    log.warning("%s: %s", self.name, exc)
            except KubeError as exc:
                # a watch cut after it made progress resumes at once; repeated failures back off
                failures = 0 if self.resource_version != start_rv else failures + 1
                if not self._stop.is_set():
                    log.info("%s: watch interrupted (%s); resuming", self.name, exc)
            except Exception:  # a handler bug must not kill the informer
                failures += 1
                log.exception("%s: unexpected error; resuming", self.name)
            if failures and self._stop.wait(backoff.delay(failures - 1)):
                break
            self.watch_restarts += 1

    def _list(self, from_cache: bool = False) -> None:
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        started = time.monotonic()
        while True:
            page = self.kube.list(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_token=token,
                resource_version="0" if from_cache and token is None else None,
            )
            kind = self.resource.kind
            api_version = self.resource.api_version
            for item in page.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", api_version)
                items.append(item)
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            token = meta.get("continue") or None
            if not token:
                break
        fresh = {key_of(o): o for o in items}
        events: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        with self.lock:
            for key, old in list(self.cache.items()):
                if key not in fresh:
                    del self.cache[key]
                    events.append(("DELETED", old, old))
            for key, obj in fresh.items():
                known = self.cache.get(key)
                if known is None:
                    events.append(("ADDED", obj, None))
                elif _rv(known) != _rv(obj):
                    events.append(("MODIFIED", obj, known))
                self.cache[key] = obj
            self.resource_version = rv
            if events:
                self.generation += 1
        for event in events:
            self._dispatch(*event)
        if self.list_seconds is None:
            self.list_seconds = time.monotonic() - started
            self.listed = len(items)
        self.synced.set()

    def _watch(self) -> None:
        def opened(response: Any) -> None:
            self._response = response

        try:
            for event in self.kube.watch(
                self.resource,
                self.resource_version,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                timeout_seconds=self.watch_timeout,
                on_open=opened,
                namespace=self.namespace,
            ):
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            self._response = None

    def _apply(self, event: dict[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            raise ApiError(code or 500, obj, f"WATCH {self.resource.plural}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        key = key_of(obj)
        with self.lock:
            old = self.cache.get(key)
            if etype == "DELETED":
                self.cache.pop(key, None)
            elif etype in ("ADDED", "MODIFIED"):
                self.cache[key] = obj
            else:
                log.warning("%s: unknown watch event type %r ignored", self.name, etype)
                return
            if rv:
                self.resource_version = str(rv)
            self.generation += 1
        self._dispatch(str(etype), obj, old)

    def _dispatch(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for handler in self.handlers:
            try:
                handler(etype, obj, old)
            except Exception:
                log.exception("%s: handler failed on %s %s", self.name, etype, key_of(obj))


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class InformerSet:
    """Several informers started, synced and stopped together."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.informers: dict[str, Informer] = {}

    def add(self, name: str, resource: Resource, **kwargs: Any) -> Informer:
        informer = Informer(self.kube, resource, name=name, **kwargs)
        self.informers[name] = informer
        return informer

    def __getitem__(self, name: str) -> Informer:
        return self.informers[name]

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for informer in self.informers.values():
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def summary(self) -> str:
        """``name N objects in S s`` of each informer's first list (the start-up timeline)."""
        parts = []
        for name, informer in self.informers.items():
            took = informer.list_seconds
            parts.append(
                f"{name} {informer.listed} in {took:.2f}s" if took is not None else f"{name} -"
            )
        return ", ".join(parts)

    def stop(self) -> None:
        for informer in self.informers.values():
            informer._stop.set()
        for informer in self.informers.values():
            informer.stop()


def _cut_stream(response: Any) -> None:
    """Unblock a watch stream read in the informer's thread, from another thread.

    Only the socket's reading half is shut: the blocked read returns and the watch loop, which
    owns the response, closes it. Closing it from here as well would race that close inside
    http.client, which is not thread-safe (a ``ValueError: I/O operation on closed file``).
    """
    try:
        response.shutdown()
    except (RuntimeError, OSError):
        return  # released to the pool or socket already gone: the stream has ended
    except (AttributeError, ValueError):
        # no socket to shut (none attached to this response): closing is the only way left
        with contextlib.suppress(OSError, ValueError, AttributeError):
            response.close()
