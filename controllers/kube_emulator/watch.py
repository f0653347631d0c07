"""Watch streaming: chunked JSON lines of ``{"type", "object"}`` from a watch queue, with
selector transitions, bookmarks, timeouts, 410 Gone and fault-injected drops."""

from __future__ import annotations

import contextlib
import queue
import time
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
    from kube_emulator.storage import Event


def serve_watch(
    handler: ApiHandler, rt: ResourceType, route: Route, ns: str | None, q: dict[str, str]
) -> None:
    core = handler.server.core
    store = core.store
    labels = parse_label_selector(q.get("labelSelector"))
    fields = parse_field_selector(q.get("fieldSelector"), rt.supports_field, rt.kind)
    if route.name is not None:
        fields.append(("metadata.name", True, route.name))
    index = None
    for fld, equal, value in fields:
        if equal and fld in ("spec.nodeName", "metadata.name"):
            index = (fld, value)
            break
    rv_param = q.get("resourceVersion") or ""
    since: int | None = None
    if rv_param not in ("", "0"):
        try:
            since = int(rv_param)
        except ValueError as exc:
            raise bad_request(f"invalid resource version {rv_param!r}") from exc
    timeout = float(int_param(q, "timeoutSeconds", 0) or core.options.default_watch_timeout)
    bookmarks = q.get("allowWatchBookmarks") in ("true", "1", "True")
    initial_end = q.get("sendInitialEvents") == "true" and since is None
    api_version = rt.api_version(route.version)
    wire_version = None if rt.storage_version == route.version else api_version
    table = handler.table_version()
    convert = None
    if rt.storage_key is not None:

        def convert(obj: dict[str, Any]) -> dict[str, Any]:
            return core.at_version(rt, obj, route.version)

        wire_version = api_version

    def initial() -> list[dict[str, Any]]:
        return list(store.iter(rt.store_key, ns))

    def wanted(obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        md = obj["metadata"]
        if ns is not None and md.get("namespace") != ns:
            return False
        if labels and not labels_match(labels, md.get("labels")):
            return False
        return not (fields and not fields_match(fields, obj))

    try:
        w, backlog, caught_up = store.open_watch(rt.store_key, since, index, initial)
    except LookupError:
        handler.pending = []
        handler.start_stream()
        err = ApiError(410, f"too old resource version: {since} ({store.compacted_rv})", "Expired")
        handler.chunk(orjson.dumps({"type": "ERROR", "object": err.status()}) + b"\n")
        handler.end_stream()
        return
    sent = 0
    handler.pending = []
    try:
        handler.start_stream()
        deadline = time.monotonic() + timeout
        last_bookmark = time.monotonic()

        def emit(ev: Event) -> bool:
            nonlocal sent
            if ev.type == "MODIFIED" and (labels or fields or ns is not None):
                now_in, was_in = wanted(ev.obj), wanted(ev.prev)
                etype = (
                    ("MODIFIED" if was_in else "ADDED")
                    if now_in
                    else ("DELETED" if was_in else None)
                )
            else:
                etype = ev.type if wanted(ev.obj) else None
            if etype is None:
                return True
            if table is not None:
                obj = core.at_version(rt, ev.obj, route.version)
                data = (
                    orjson.dumps(
                        {
                            "type": etype,
                            "object": to_table(
                                rt,
                                route.version,
                                [obj],
                                {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                q.get("includeObject", "Metadata"),
                                table,
                            ),
                        }
                    )
                    + b"\n"
                )
            else:
                data = ev.wire(etype, wire_version, convert)
            handler.chunk(data)
            sent += 1
            return not (core.faults.active and core.faults.drop_watch(sent))

        for ev in backlog:
            if not emit(ev):
                return
        if initial_end and bookmarks:
            handler.chunk(
                orjson.dumps(
                    {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": rt.kind,
                            "apiVersion": api_version,
                            "metadata": {
                                "resourceVersion": str(caught_up),
                                "annotations": {"k8s.io/initial-events-end": "true"},
                            },
                        },
                    }
                )
                + b"\n"
            )
        handler.flush_chunks()
        interval = core.options.bookmark_interval
        batch_delay = core.options.watch_batch_delay
        while not handler.server.stopping:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = min(deadline - now, 0.5)
            if bookmarks:
                wait = min(wait, max(0.0, last_bookmark + interval - now))
            got = True
            try:
                item = w.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                got, item = False, None
            if got and item is None:
                return  # the watch fell too far behind: close it, the client relists
            if item is not None:
                if not emit(item):
                    return
                ended = False
                for _ in range(1000):  # drain without blocking, then write once
                    try:
                        more = w.queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None and w.ended:
                        ended = True
                        break
                    if more is None or not emit(more):
                        return
                handler.flush_chunks()
                if ended:
                    break
                if batch_delay:
                    # let the next events gather: a writer's put() then finds nobody waiting
                    # (no thread wake-up per event) and the client reads one larger chunk
                    time.sleep(batch_delay)
            if bookmarks and time.monotonic() - last_bookmark >= interval:
                with store.lock:
                    quiet = w.queue.empty()
                    rv = store.rv
                if quiet:
                    handler.chunk(
                        orjson.dumps(
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": rt.kind,
                                    "apiVersion": api_version,
                                    "metadata": {"resourceVersion": str(rv)},
                                },
                            }
                        )
                        + b"\n"
                    )
                    handler.flush_chunks()
                last_bookmark = time.monotonic()
        handler.end_stream()
    except (BrokenPipeError, ConnectionResetError, OSError):
        handler.close_connection = True
    finally:
        store.close_watch(w)
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.flush_chunks()  # events sent before a (fault-injected) drop still arrive
