"""The status writer's shutdown: writes still queued when it stops are dropped quietly."""

from __future__ import annotations

import logging
from concurrent.futures import CancelledError

import pytest

from kai.reconcilers.status import StatusWriter


def _errors_logged_by_one_pass(caplog: pytest.LogCaptureFixture, failure: Exception) -> int:
    """Run the writer's loop over one pending write that stops it and raises ``failure``."""
    writer = StatusWriter(None, None, period=0.01)
    calls = []

    def write(*args: object) -> None:
        calls.append(args)
        writer._stop.set()  # as stop() does while the write is under way
        raise failure

    writer.write = write
    writer._latest = (object(), object())
    with caplog.at_level(logging.INFO, logger="kai.status"):
        writer.start()
        writer._thread.join(5)
    writer.pool.shutdown()
    assert calls and not writer._thread.is_alive()
    return len([r for r in caplog.records if r.levelno >= logging.ERROR])


def test_writes_cancelled_by_stop_are_not_logged_as_failures(caplog):
    # stop() cancels the pool's queued writes: not a failure
    assert _errors_logged_by_one_pass(caplog, CancelledError()) == 0


def test_other_write_failures_are_still_logged(caplog):
    assert _errors_logged_by_one_pass(caplog, RuntimeError("boom")) == 1
