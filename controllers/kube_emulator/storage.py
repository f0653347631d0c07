"""Versioned object store with a bounded event history and per-watch queues.

- One global, monotonic resourceVersion (like etcd's revision) stamped on every write.
- Objects indexed by resource type -> namespace -> name; stored dicts are never mutated after a
  commit, so events and list snapshots share them without copying.
- A bounded history of events (``history_size``) serves watches that resume from an older
  resourceVersion; older than the window means 410 Gone, as after an etcd compaction.
- Each watch owns a queue; a commit appends the event to the queues of the watches on that
  resource type (watches filtered on ``spec.nodeName`` or ``metadata.name`` are indexed by that
  value, so a thousand per-node watches do not all see every pod event). The wire bytes of an
  event are produced once and shared by every watch that sends it.
- Paged lists keep a snapshot of the item references at the list's resourceVersion; the continue
  token names the snapshot and expires with the history window.
"""

from __future__ import annotations

import bisect
import itertools
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

ObjKey = tuple[str, str]  # (namespace or "", name)
TypeKey = tuple[str, str]  # (group, plural)
INDEXED_FIELDS = ("spec.nodeName", "metadata.name")


class Event:
    __slots__ = ("_wire", "obj", "prev", "rv", "tkey", "type")

    def __init__(
        self, rv: int, etype: str, tkey: TypeKey, obj: dict[str, Any], prev: dict[str, Any] | None
    ) -> None:
        self.rv = rv
        self.type = etype
        self.tkey = tkey
        self.obj = obj
        self.prev = prev
        self._wire: dict[tuple[str, str | None], bytes] = {}

    def wire(
        self,
        etype: str,
        api_version: str | None,
        convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> bytes:
        """``{"type":..,"object":..}\\n`` serialized once per (type, apiVersion)."""
        k = (etype, api_version)
        data = self._wire.get(k)
        if data is None:
            obj = self.obj
            if convert is not None:
                obj = convert(obj)
            elif api_version is not None and obj.get("apiVersion") != api_version:
                obj = dict(obj)
                obj["apiVersion"] = api_version
            data = orjson.dumps({"type": etype, "object": obj}) + b"\n"
            self._wire[k] = data
        return data


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    return "" if cur is None else str(cur)


class Watch:
    """One client watch: its queue and the index slot it is registered under."""

    def __init__(self, tkey: TypeKey, index: tuple[str, str] | None, max_queue: int) -> None:
        self.tkey = tkey
        self.index = index
        self.queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self.max_queue = max_queue
        self.overflowed = False
        self.ended = False  # the resource went away: finish the stream cleanly

    def end(self) -> None:
        self.ended = True
        self.queue.put(None)

    def put(self, ev: Event) -> None:
        if self.queue.qsize() >= self.max_queue:
            self.overflowed = True
            self.queue.put(None)
            return
        self.queue.put(ev)


class Snapshot:
    __slots__ = ("items", "rv")

    def __init__(self, rv: int, items: list[dict[str, Any]]) -> None:
        self.rv = rv
        self.items = items


class Store:
    def __init__(
        self,
        history_size: int = 50_000,
        max_snapshots: int = 64,
        watch_queue_limit: int = 1_000_000,
    ) -> None:
        self.lock = threading.RLock()
        self.rv = 1
        self.objects: dict[TypeKey, dict[str, dict[str, dict[str, Any]]]] = {}
        self.history: list[Event] = []
        self.history_size = history_size
        self.compacted_rv = 1  # events with rv <= this are gone
        self.watches: dict[TypeKey, set[Watch]] = {}
        self.indexed_watches: dict[tuple[TypeKey, str, str], set[Watch]] = {}
        self.snapshots: OrderedDict[str, Snapshot] = OrderedDict()
        self.max_snapshots = max_snapshots
        self.watch_queue_limit = watch_queue_limit
        self._snapshot_ids = itertools.count(1)
        self.owner_index: dict[str, set[tuple[TypeKey, str, str]]] = {}
        self.listeners: list[Callable[[Event], None]] = []

    # -- reads ---------------------------------------------------------------------------
    def get(self, tkey: TypeKey, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(tkey, {}).get(ns, {}).get(name)

    def iter(self, tkey: TypeKey, ns: str | None) -> list[dict[str, Any]]:
        """The objects of one type (and namespace), as a list taken under the lock."""
        with self.lock:
            by_ns = self.objects.get(tkey, {})
            if ns is not None:
                return list(by_ns.get(ns, {}).values())
            return [o for objs in by_ns.values() for o in objs.values()]

    def count(self, tkey: TypeKey, ns: str | None) -> int:
        with self.lock:
            by_ns = self.objects.get(tkey, {})
            if ns is not None:
                return len(by_ns.get(ns, {}))
            return sum(len(v) for v in by_ns.values())

    def sorted_items(self, tkey: TypeKey, ns: str | None) -> list[dict[str, Any]]:
        with self.lock:
            by_ns = self.objects.get(tkey, {})
            spaces = [ns] if ns is not None else sorted(by_ns)
            out: list[dict[str, Any]] = []
            for space in spaces:
                objs = by_ns.get(space, {})
                out.extend(objs[n] for n in sorted(objs))
            return out

    # -- writes --------------------------------------------------------------------------
    def restore(self, tkey: TypeKey, obj: dict[str, Any]) -> None:
        """Put back an object read from a data directory (no event, no history)."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        self.objects.setdefault(tkey, {}).setdefault(ns, {})[name] = obj
        self._index_owners(tkey, ns, name, None, obj)

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def commit(
        self, tkey: TypeKey, etype: str, obj: dict[str, Any], prev: dict[str, Any] | None
    ) -> Event:
        """Store ``obj`` (already stamped with the new resourceVersion) or drop it for DELETED.

        Callers hold ``self.lock`` and have taken the rv from :meth:`next_rv`.
        """
        meta = obj["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        by_ns = self.objects.setdefault(tkey, {})
        if etype == "DELETED":
            space = by_ns.get(ns)
            if space is not None:
                space.pop(name, None)
                if not space:
                    del by_ns[ns]
        else:
            by_ns.setdefault(ns, {})[name] = obj
        self._index_owners(tkey, ns, name, prev, None if etype == "DELETED" else obj)
        ev = Event(self.rv, etype, tkey, obj, prev)
        self.history.append(ev)
        if len(self.history) > 2 * self.history_size:
            self._trim(len(self.history) - self.history_size)
        for w in self.watches.get(tkey, ()):
            w.put(ev)
        if self.indexed_watches:
            seen: set[int] = set()
            for fld in INDEXED_FIELDS:
                for o in (obj, prev):
                    if o is None:
                        continue
                    bucket = self.indexed_watches.get((tkey, fld, _field(o, fld)))
                    if bucket:
                        for w in bucket:
                            if id(w) not in seen:
                                seen.add(id(w))
                                w.put(ev)
        for listener in self.listeners:
            listener(ev)
        return ev

    def _index_owners(
        self,
        tkey: TypeKey,
        ns: str,
        name: str,
        prev: dict[str, Any] | None,
        new: dict[str, Any] | None,
    ) -> None:
        ref = (tkey, ns, name)
        old_uids = {
            r.get("uid") for r in (prev or {}).get("metadata", {}).get("ownerReferences") or []
        }
        new_uids = {
            r.get("uid") for r in (new or {}).get("metadata", {}).get("ownerReferences") or []
        }
        for uid in old_uids - new_uids:
            deps = self.owner_index.get(uid)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self.owner_index[uid]
        for uid in new_uids - old_uids:
            self.owner_index.setdefault(uid, set()).add(ref)

    def dependents(self, uid: str) -> list[tuple[TypeKey, str, str]]:
        with self.lock:
            return sorted(self.owner_index.get(uid, ()))

    def _trim(self, drop: int) -> None:
        self.compacted_rv = self.history[drop - 1].rv
        del self.history[:drop]
        self._expire_snapshots()

    def oldest_rv(self) -> int:
        """The oldest resourceVersion a watch can resume from: the history keeps the last
        ``history_size`` events (trimmed in batches, but never served beyond that window)."""
        extra = len(self.history) - self.history_size
        if extra > 0:
            return max(self.compacted_rv, self.history[extra - 1].rv)
        return self.compacted_rv

    def compact(self) -> None:
        """Forget all history up to now (what an etcd compaction does)."""
        with self.lock:
            self.compacted_rv = self.rv
            self.history.clear()
            self._expire_snapshots()

    def _expire_snapshots(self) -> None:
        for token in [t for t, s in self.snapshots.items() if s.rv < self.compacted_rv]:
            del self.snapshots[token]

    # -- watches -------------------------------------------------------------------------
    def open_watch(
        self,
        tkey: TypeKey,
        since: int | None,
        index: tuple[str, str] | None,
        initial: Callable[[], list[dict[str, Any]]] | None,
    ) -> tuple[Watch, list[Event], int]:
        """Register a watch; return it, the events it must send first, and the
        resourceVersion those events bring the watcher up to.

        ``since`` is the resourceVersion to resume after; None means "start with the current
        state" (``initial`` gives the objects to send as ADDED). Raises LookupError when
        ``since`` is older than the history window.
        """
        with self.lock:
            backlog: list[Event] = []
            if since is None:
                assert initial is not None
                backlog = [Event(self.rv, "ADDED", tkey, o, None) for o in initial()]
            else:
                if since < self.oldest_rv():
                    raise LookupError(since)
                start = bisect.bisect_right(self.history, since, key=lambda e: e.rv)
                backlog = [e for e in self.history[start:] if e.tkey == tkey]
            w = Watch(tkey, index, self.watch_queue_limit)
            if index is None:
                self.watches.setdefault(tkey, set()).add(w)
            else:
                self.indexed_watches.setdefault((tkey, *index), set()).add(w)
            return w, backlog, self.rv

    def close_watch(self, w: Watch) -> None:
        with self.lock:
            if w.index is None:
                bucket = self.watches.get(w.tkey)
                key: Any = w.tkey
                registry: dict[Any, set[Watch]] = self.watches
            else:
                key = (w.tkey, *w.index)
                bucket = self.indexed_watches.get(key)
                registry = self.indexed_watches
            if bucket is not None:
                bucket.discard(w)
                if not bucket:
                    del registry[key]

    def end_watches(self, tkey: TypeKey) -> None:
        """Finish every watch on a resource type (its CRD was deleted)."""
        with self.lock:
            for w in self.watches.pop(tkey, set()):
                w.end()
            for key in [k for k in self.indexed_watches if k[0] == tkey]:
                for w in self.indexed_watches.pop(key):
                    w.end()

    # -- paged lists ---------------------------------------------------------------------
    def save_snapshot(self, rv: int, items: list[dict[str, Any]]) -> str:
        with self.lock:
            token = str(next(self._snapshot_ids))
            self.snapshots[token] = Snapshot(rv, items)
            while len(self.snapshots) > self.max_snapshots:
                self.snapshots.popitem(last=False)
            return token

    def load_snapshot(self, token: str) -> Snapshot | None:
        with self.lock:
            snap = self.snapshots.get(token)
            if snap is not None and snap.rv < self.oldest_rv():
                del self.snapshots[token]  # its resourceVersion left the history window
                return None
            if snap is not None:
                self.snapshots.move_to_end(token)
            return snap
