"""Informers: list+watch into a cache, resume after a dropped watch, relist after 410."""

from __future__ import annotations

import threading
from typing import Any

from live_helpers import eventually

from kai.kube.client import Kube
from kai.kube.informer import Informer, _cut_stream
from kai.kube.resources import CONFIGMAPS
from kube_emulator import ApiServer


def _cm(name: str, value: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"v": value},
    }


def test_list_then_watch_fills_the_cache_and_calls_handlers(kube: Kube) -> None:
    kube.create(CONFIGMAPS, _cm("before"))
    seen: list[tuple[str, str]] = []
    inf = Informer(kube, CONFIGMAPS)
    inf.add_handler(lambda t, o, old: seen.append((t, o["metadata"]["name"])))
    inf.start()
    try:
        assert inf.wait_synced(10)
        assert inf.get("before", "default") is not None
        kube.create(CONFIGMAPS, _cm("after"))
        kube.patch(CONFIGMAPS, "after", {"data": {"v": "2"}}, "default")
        kube.delete(CONFIGMAPS, "before", "default")
        eventually(lambda: ("DELETED", "before") in seen)
        eventually(lambda: (inf.get("after", "default") or {}).get("data") == {"v": "2"})
        assert inf.get("before", "default") is None
        assert [e for e in seen if e[1] == "after"][:2] == [
            ("ADDED", "after"),
            ("MODIFIED", "after"),
        ]
    finally:
        inf.stop()


def test_dropped_watches_lose_no_event(server: ApiServer, kube: Kube) -> None:
    inf = Informer(kube, CONFIGMAPS)
    inf.start()
    try:
        assert inf.wait_synced(10)
        server.faults.configure(watch_drop_after=3)  # every watch is cut after 3 events
        for i in range(40):
            kube.create(CONFIGMAPS, _cm(f"cm-{i:02d}"))
        for i in range(0, 40, 2):
            kube.delete(CONFIGMAPS, f"cm-{i:02d}", "default")
        expected = {f"cm-{i:02d}" for i in range(1, 40, 2)}
        eventually(
            lambda: (
                {k[1] for k in inf.cache} >= expected
                and not ({k[1] for k in inf.cache} - expected - {"kube-root-ca.crt"})
            )
        )
        assert server.faults.injected["watch_drops"] > 0
        assert inf.watch_restarts > 0
    finally:
        server.faults.clear()
        inf.stop()


def test_relist_after_410_reports_what_the_gap_hid(
    server: ApiServer, kube: Kube, monkeypatch: Any
) -> None:
    for name in ("keep", "change", "gone"):
        kube.create(CONFIGMAPS, _cm(name))
    lists: list[str | None] = []  # resourceVersion of each list request
    real_list = kube.list

    def recording_list(*args: Any, **kwargs: Any) -> dict[str, Any]:
        lists.append(kwargs.get("resource_version"))
        return real_list(*args, **kwargs)

    monkeypatch.setattr(kube, "list", recording_list)
    events: list[tuple[str, str]] = []
    inf = Informer(kube, CONFIGMAPS, watch_timeout=1)
    inf.add_handler(lambda t, o, old: events.append((t, o["metadata"]["name"])))
    inf.start()
    try:
        assert inf.wait_synced(10)
        inf.stop()  # nobody watches while the gap happens
        assert inf._thread is None
        kube.patch(CONFIGMAPS, "change", {"data": {"v": "9"}}, "default")
        kube.delete(CONFIGMAPS, "gone", "default")
        kube.create(CONFIGMAPS, _cm("new"))
        server.compact()  # the informer's resourceVersion is now too old: 410 Gone
        inf._stop = threading.Event()
        inf.start()  # resumes from its old resourceVersion: 410 Gone, then a relist
        eventually(lambda: inf.relists >= 1)
        eventually(lambda: ("DELETED", "gone") in events and ("ADDED", "new") in events)
        assert ("MODIFIED", "change") in events
        assert (inf.get("change", "default") or {}).get("data") == {"v": "9"}
        assert inf.get("gone", "default") is None
        # the first list may come from the watch cache (resourceVersion 0, as client-go's);
        # the relist after 410 reads the current state
        assert lists[0] == "0" and lists[1:] and all(rv is None for rv in lists[1:])
        assert inf.listed == 3 and inf.list_seconds is not None
    finally:
        inf.stop()


class _Stream:
    """A watch response as far as Informer.stop touches it."""

    def __init__(self, shutdown_error: type[Exception] | None = None) -> None:
        self.shutdown_error = shutdown_error
        self.calls: list[str] = []

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        if self.shutdown_error is not None:
            raise self.shutdown_error("no socket")

    def close(self) -> None:
        self.calls.append("close")


def test_stop_only_shuts_the_stream_and_leaves_closing_to_the_watch_thread() -> None:
    # closing the response from the stopping thread raced the watch thread's own close inside
    # http.client ("ValueError: I/O operation on closed file" at an informer's stop)
    stream = _Stream()
    _cut_stream(stream)
    assert stream.calls == ["shutdown"]
    for ended in (RuntimeError, OSError):  # released to the pool, socket gone: nothing to do
        stream = _Stream(ended)
        _cut_stream(stream)
        assert stream.calls == ["shutdown"]
    stream = _Stream(ValueError)  # no socket attached: closing is the only way to cut it
    _cut_stream(stream)
    assert stream.calls == ["shutdown", "close"]


def test_stopping_during_a_busy_watch_ends_the_thread_without_error(kube: Kube) -> None:
    done = threading.Event()

    def writer() -> None:
        i = 0
        while not done.is_set():
            kube.create(CONFIGMAPS, _cm(f"busy-{i}"))
            i += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(10):
            inf = Informer(kube, CONFIGMAPS)
            inf.start()
            assert inf.wait_synced(10)
            watching = inf._thread
            eventually(lambda inf=inf: inf._response is not None)
            inf.stop()
            assert watching is not None and not watching.is_alive()
    finally:
        done.set()
        thread.join(10)
