"""How a long-running command stops: SIGTERM (what Kubernetes sends) or Ctrl-C (SIGINT) set an
event; the command cleans up and exits 0 after SIGTERM, 130 after Ctrl-C (the shell's status of
an interrupted program)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def stop_on_signals(stop: threading.Event) -> Callable[[], int]:
    """Set ``stop`` on SIGTERM or SIGINT; return a function giving the exit status to use."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return lambda: 130 if signal.SIGINT in received else 0


def wait_for_signal(stop: threading.Event | None = None) -> int:
    """Block until SIGTERM or SIGINT (or ``stop`` is set elsewhere); return the exit status."""
    stop = stop or threading.Event()
    status = stop_on_signals(stop)
    while not stop.wait(0.5):
        pass
    return status()
