"""Watch streaming: chunked JSON lines of ``{"type", "object"}`` from a watch queue, with
selector transitions, bookmarks, timeouts, 410 Gone and fault-injected drops."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from kube_emulator.errors import ApiError, bad_request, int_param
from kube_emulator.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kube_emulator.tables import to_table

if TYPE_CHECKING:
    from kube_emulator.http import ApiHandler, Route
    from kube_emulator.resources import ResourceType
    from kube_emulator.storage import Event, Watch


_STOP, _ENDED, _OPEN = "stop", "ended", "open"  # outcome of writing a batch of events


def _since(q: dict[str, str]) -> int | None:
    rv_param = q.get("resourceVersion") or ""
    if rv_param in ("", "0"):
        return None
    try:
        return int(rv_param)
    except ValueError as exc:
        raise bad_request(f"invalid resource version {rv_param!r}") from exc


def _bookmark(kind: str, api_version: str, metadata: dict[str, Any]) -> bytes:
    bookmark = {"kind": kind, "apiVersion": api_version, "metadata": metadata}
    return orjson.dumps({"type": "BOOKMARK", "object": bookmark}) + b"\n"


class _WatchStream:
    """One watch request: its selectors, wire format and bookmark schedule, and the loop that
    writes the store's events to the client as chunked JSON lines."""

    def __init__(
        self,
        handler: ApiHandler,
        rt: ResourceType,
        route: Route,
        ns: str | None,
        q: dict[str, str],
    ) -> None:
        self.handler = handler
        self.core = core = handler.server.core
        self.rt, self.route, self.ns, self.q = rt, route, ns, q
        self.labels = parse_label_selector(q.get("labelSelector"))
        self.fields = parse_field_selector(q.get("fieldSelector"), rt.supports_field, rt.kind)
        if route.name is not None:
            self.fields.append(("metadata.name", True, route.name))
        self.filtered = bool(self.labels or self.fields or ns is not None)
        self.since = _since(q)
        self.timeout = float(
            int_param(q, "timeoutSeconds", 0) or core.options.default_watch_timeout
        )
        self.bookmarks = q.get("allowWatchBookmarks") in ("true", "1", "True")
        self.initial_end = q.get("sendInitialEvents") == "true" and self.since is None
        self.api_version = rt.api_version(route.version)
        self.wire_version = None if rt.storage_version == route.version else self.api_version
        self.table = handler.table_version()
        self.convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        if rt.storage_key is not None:
            self.convert = self._at_route_version
            self.wire_version = self.api_version
        self.sent = 0
        self.deadline = self.last_bookmark = 0.0

    def start_clock(self) -> None:
        """The timeout and the bookmark interval count from the start of the stream."""
        self.deadline = time.monotonic() + self.timeout
        self.last_bookmark = time.monotonic()

    def index(self) -> tuple[str, str] | None:
        """The store index a watch on one node's pods or one named object can use."""
        for fld, equal, value in self.fields:
            if equal and fld in ("spec.nodeName", "metadata.name"):
                return (fld, value)
        return None

    def _at_route_version(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.core.at_version(self.rt, obj, self.route.version)

    def wanted(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        md = obj["metadata"]
        if self.ns is not None and md.get("namespace") != self.ns:
            return False
        if self.labels and not labels_match(self.labels, md.get("labels")):
            return False
        return not (self.fields and not fields_match(self.fields, obj))

    def event_type(self, ev: Event) -> str | None:
        """The type the client sees: an update that moves an object into (out of) the
        selection is an ADDED (DELETED) for this watch; None when it does not concern it."""
        if ev.type == "MODIFIED" and self.filtered:
            now_in, was_in = self.wanted(ev.obj), self.wanted(ev.prev)
            if now_in:
                return "MODIFIED" if was_in else "ADDED"
            return "DELETED" if was_in else None
        return ev.type if self.wanted(ev.obj) else None

    def _table_line(self, etype: str, stored: dict[str, Any]) -> bytes:
        assert self.table is not None
        obj = self.core.at_version(self.rt, stored, self.route.version)
        table = to_table(
            self.rt,
            self.route.version,
            [obj],
            {"resourceVersion": obj["metadata"]["resourceVersion"]},
            self.q.get("includeObject", "Metadata"),
            self.table,
        )
        return orjson.dumps({"type": etype, "object": table}) + b"\n"

    def emit(self, ev: Event) -> bool:
        """Write one event (if it concerns this watch); False when a fault drops the watch."""
        etype = self.event_type(ev)
        if etype is None:
            return True
        if self.table is not None:
            data = self._table_line(etype, ev.obj)
        else:
            data = ev.wire(etype, self.wire_version, self.convert)
        self.handler.chunk(data)
        self.sent += 1
        return not (self.core.faults.active and self.core.faults.drop_watch(self.sent))

    def write_batch(self, w: Watch, first: Event) -> str:
        """Write ``first`` and whatever else is queued (without blocking), then flush once."""
        if not self.emit(first):
            return _STOP
        for _ in range(1000):
            try:
                more = w.queue.get_nowait()
            except queue.Empty:
                break
            if more is None and w.ended:
                self.handler.flush_chunks()
                return _ENDED
            if more is None or not self.emit(more):
                return _STOP
        self.handler.flush_chunks()
        return _OPEN

    def send_initial(self, backlog: list[Event], caught_up: int) -> bool:
        for ev in backlog:
            if not self.emit(ev):
                return False
        if self.initial_end and self.bookmarks:
            metadata = {
                "resourceVersion": str(caught_up),
                "annotations": {"k8s.io/initial-events-end": "true"},
            }
            self.handler.chunk(_bookmark(self.rt.kind, self.api_version, metadata))
        self.handler.flush_chunks()
        return True

    def send_bookmark_if_quiet(self, w: Watch) -> None:
        store = self.core.store
        with store.lock:
            quiet = w.queue.empty()
            rv = store.rv
        if quiet:
            metadata = {"resourceVersion": str(rv)}
            self.handler.chunk(_bookmark(self.rt.kind, self.api_version, metadata))
            self.handler.flush_chunks()

    def follow(self, w: Watch) -> bool:
        """Stream live events until the timeout, the server stops or the watch ends (True:
        end the stream normally) or it is dropped (False: close without ending)."""
        handler = self.handler
        interval = self.core.options.bookmark_interval
        batch_delay = self.core.options.watch_batch_delay
        while not handler.server.stopping:
            now = time.monotonic()
            if now >= self.deadline:
                break
            wait = min(self.deadline - now, 0.5)
            if self.bookmarks:
                wait = min(wait, max(0.0, self.last_bookmark + interval - now))
            try:
                item = w.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                pass
            else:
                if item is None:
                    return False  # the watch fell too far behind: close it, the client relists
                outcome = self.write_batch(w, item)
                if outcome == _STOP:
                    return False
                if outcome == _ENDED:
                    break
                if batch_delay:
                    # let the next events gather: a writer's put() then finds nobody waiting
                    # (no thread wake-up per event) and the client reads one larger chunk
                    time.sleep(batch_delay)
            if self.bookmarks and time.monotonic() - self.last_bookmark >= interval:
                self.send_bookmark_if_quiet(w)
                self.last_bookmark = time.monotonic()
        return True


def _send_gone(handler: ApiHandler, since: int | None, compacted_rv: int) -> None:
    handler.pending = []
    handler.start_stream()
    err = ApiError(410, f"too old resource version: {since} ({compacted_rv})", "Expired")
    handler.chunk(orjson.dumps({"type": "ERROR", "object": err.status()}) + b"\n")
    handler.end_stream()


def serve_watch(
    handler: ApiHandler, rt: ResourceType, route: Route, ns: str | None, q: dict[str, str]
) -> None:
    stream = _WatchStream(handler, rt, route, ns, q)
    store = stream.core.store

    def initial() -> list[dict[str, Any]]:
        return list(store.iter(rt.store_key, ns))

    try:
        w, backlog, caught_up = store.open_watch(
            rt.store_key, stream.since, stream.index(), initial
        )
    except LookupError:
        _send_gone(handler, stream.since, store.oldest_rv())
        return
    handler.pending = []
    try:
        handler.start_stream()
        stream.start_clock()
        if stream.send_initial(backlog, caught_up) and stream.follow(w):
            handler.end_stream()
    except (BrokenPipeError, ConnectionResetError, OSError):
        handler.close_connection = True
    finally:
        store.close_watch(w)
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.flush_chunks()  # events sent before a (fault-injected) drop still arrive
