"""The status writer's shutdown: writes still queued when it stops are dropped quietly."""

from __future__ import annotations

import logging
from concurrent.futures import CancelledError
from typing import Any

from kai.reconcilers.status import StatusWriter


def test_writes_cancelled_by_stop_are_not_logged_as_failures(caplog):
    writer = StatusWriter(None, None, period=0.01)
    calls = []

    def cancelled(*args: Any) -> None:
        calls.append(args)
        writer._stop.set()  # stop() cancelled the pool's queued writes meanwhile
        raise CancelledError

    writer.write = cancelled
    writer._latest = (object(), object())
    with caplog.at_level(logging.INFO, logger="kai.status"):
        writer.start()
        writer._thread.join(5)
    writer.pool.shutdown()
    assert calls and not writer._thread.is_alive()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_other_write_failures_are_still_logged(caplog):
    writer = StatusWriter(None, None, period=0.01)

    def broken(*args: Any) -> None:
        writer._stop.set()
        raise RuntimeError("boom")

    writer.write = broken
    writer._latest = (object(), object())
    with caplog.at_level(logging.INFO, logger="kai.status"):
        writer.start()
        writer._thread.join(5)
    writer.pool.shutdown()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR]
