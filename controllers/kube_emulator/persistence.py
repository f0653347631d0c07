"""``--data-dir``: the store's objects and resourceVersion counter kept across restarts.

Two files in the directory:

- ``snapshot.json``: every object and the resourceVersion at the time it was written. Always
  replaced whole: written to ``snapshot.json.tmp``, flushed to disk (fsync), then renamed over
  the old one, so a crash leaves either the old snapshot or the new one, never half of one.
- ``journal.log``: one line per committed write since that snapshot,
  ``CRC32-HEX SP JSON LF`` with the JSON ``{"rv", "type", "group", "plural", "object"}``. It is
  appended (and handed to the operating system) as each write commits. A crash can only tear
  the last line: a last line without its newline or whose checksum does not match is dropped
  on start; a bad line before the last is a corrupt directory (refused with file and line).

On start the snapshot is read, then the journal lines newer than it are replayed; the server
resumes one past the highest resourceVersion seen, so every later write is newer than anything a
client saw before the restart. The event history does not survive: a watch from before the
restart gets 410 Gone and relists, as after an etcd compaction. When the journal has grown past
``max(64 MiB, twice the last snapshot)``, and at a clean stop, a new snapshot replaces both.

Durability: the journal is written to the operating system on every commit (no fsync), so a
killed server loses nothing; a crash of the machine itself may lose the last writes.
"""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path
from typing import IO, Any

import orjson

from kube_emulator.storage import Event, Store, TypeKey

SNAPSHOT = "snapshot.json"
JOURNAL = "journal.log"
FORMAT = 1
MIN_JOURNAL_BYTES = 64 * 1024 * 1024


class DataDirError(ValueError):
    """The data directory holds something this server cannot read back."""


def _line(record: dict[str, Any]) -> bytes:
    data = orjson.dumps(record)
    return b"%08x %s\n" % (zlib.crc32(data), data)


class DataDir:
    """The files of one ``--data-dir``; :meth:`load` once, then :meth:`attach` to a store."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.snapshot_path = self.path / SNAPSHOT
        self.journal_path = self.path / JOURNAL
        self._journal: IO[bytes] | None = None
        self._journal_bytes = 0
        self._snapshot_bytes = 0
        self._store: Store | None = None
        self._lock = threading.Lock()
        self.snapshots_written = 0

    # -- reading back ------------------------------------------------------------------------
    def load(self) -> tuple[int, dict[TypeKey, dict[tuple[str, str], dict[str, Any]]]]:
        """The highest resourceVersion stored and the objects by type and (namespace, name);
        (0, {}) for a new directory. Raises :class:`DataDirError` naming the file and line."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / (SNAPSHOT + ".tmp")).unlink(missing_ok=True)  # a snapshot never finished
        rv = 0
        objects: dict[TypeKey, dict[tuple[str, str], dict[str, Any]]] = {}
        if self.snapshot_path.exists():
            raw = self.snapshot_path.read_bytes()
            self._snapshot_bytes = len(raw)
            try:
                doc = orjson.loads(raw)
                if doc.get("format") != FORMAT:
                    raise DataDirError(
                        f"{self.snapshot_path}: format {doc.get('format')!r}, expected {FORMAT}"
                    )
                rv = int(doc["resourceVersion"])
                for entry in doc["types"]:
                    tkey = (entry["group"], entry["plural"])
                    by_key = objects.setdefault(tkey, {})
                    for obj in entry["objects"]:
                        md = obj["metadata"]
                        by_key[(md.get("namespace") or "", md["name"])] = obj
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, DataDirError):
                    raise
                raise DataDirError(
                    f"{self.snapshot_path}: not a snapshot of this server: {exc}"
                ) from exc
        rv = self._replay(rv, objects)
        return rv, objects

    def _replay(
        self, rv: int, objects: dict[TypeKey, dict[tuple[str, str], dict[str, Any]]]
    ) -> int:
        if not self.journal_path.exists():
            return rv
        data = self.journal_path.read_bytes()
        lines = data.split(b"\n")
        good_bytes = 0
        snapshot_rv = rv
        for number, line in enumerate(lines, 1):
            last = number >= len(lines) - 1  # the final piece, or the line before a final "\n"
            if number == len(lines):
                if line:  # no newline: torn by a crash
                    break
                continue
            record = self._record(line)
            if record is None:
                if last:
                    break  # torn by a crash: drop it
                raise DataDirError(
                    f"{self.journal_path}:{number}: corrupt journal line (checksum or JSON)"
                )
            good_bytes += len(line) + 1
            if record["rv"] <= snapshot_rv:
                continue  # already in the snapshot (a crash between snapshot and truncation)
            rv = max(rv, record["rv"])
            by_key = objects.setdefault((record["group"], record["plural"]), {})
            obj = record["object"]
            md = obj["metadata"]
            key = (md.get("namespace") or "", md["name"])
            if record["type"] == "DELETED":
                by_key.pop(key, None)
            else:
                by_key[key] = obj
        if good_bytes < len(data):
            with open(self.journal_path, "r+b") as handle:  # drop the torn tail
                handle.truncate(good_bytes)
        self._journal_bytes = good_bytes
        return rv

    @staticmethod
    def _record(line: bytes) -> dict[str, Any] | None:
        crc, _, payload = line.partition(b" ")
        try:
            if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
                return None
            record = orjson.loads(payload)
            if not isinstance(record["object"]["metadata"]["name"], str):
                return None
            int(record["rv"])
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            return None
        return record if isinstance(record, dict) else None

    # -- writing -------------------------------------------------------------------------------
    def attach(self, store: Store) -> None:
        """Journal every commit of ``store`` from now on."""
        self._store = store
        self._journal = open(self.journal_path, "ab")  # noqa: SIM115 - open until close()
        store.listeners.append(self._on_commit)

    def _on_commit(self, event: Event) -> None:
        """Called by the store under its lock, once per committed write."""
        journal = self._journal
        if journal is None:
            return
        line = _line(
            {
                "rv": event.rv,
                "type": event.type,
                "group": event.tkey[0],
                "plural": event.tkey[1],
                "object": event.obj,
            }
        )
        journal.write(line)
        journal.flush()
        self._journal_bytes += len(line)
        if self._journal_bytes > max(MIN_JOURNAL_BYTES, 2 * self._snapshot_bytes):
            self.write_snapshot()

    def write_snapshot(self) -> None:
        """Replace snapshot and journal by one new snapshot (called with the store's lock held,
        or when nothing writes any more)."""
        store = self._store
        if store is None:
            return
        with store.lock, self._lock:
            types = [
                {
                    "group": tkey[0],
                    "plural": tkey[1],
                    "objects": [o for objs in by_ns.values() for o in objs.values()],
                }
                for tkey, by_ns in store.objects.items()
            ]
            data = orjson.dumps({"format": FORMAT, "resourceVersion": store.rv, "types": types})
            tmp = self.path / (SNAPSHOT + ".tmp")
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.snapshot_path)
            _fsync_dir(self.path)
            # the journal's lines are all in the snapshot now (replay skips them if a crash
            # comes before this truncation)
            if self._journal is not None:
                self._journal.truncate(0)
                self._journal.seek(0)
            self._journal_bytes = 0
            self._snapshot_bytes = len(data)
            self.snapshots_written += 1

    def close(self) -> None:
        """A last snapshot (a fast next start), then stop journaling."""
        if self._journal is None:
            return
        self.write_snapshot()
        if self._store is not None and self._on_commit in self._store.listeners:
            self._store.listeners.remove(self._on_commit)
        self._journal.close()
        self._journal = None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
