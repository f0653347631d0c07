"""How a long-running command stops: SIGTERM (what Kubernetes sends) or Ctrl-C (SIGINT) set an
event; the command cleans up and exits 0 after SIGTERM, 130 after Ctrl-C (the shell's status of
an interrupted program).

The event is not set by the signal handler. A Python signal handler runs in the main thread
between two bytecodes, possibly while that thread is inside ``stop.wait()`` holding the event's
own (non-reentrant) lock; ``stop.set()`` there would wait for that lock forever, and the command
would never exit. So the handler does nothing: Python's C-level handler writes the signal's
number to a wake-up socket (``signal.set_wakeup_fd``), and a relay thread reads it and sets the
event, as any other thread may. Other signals a command acts on (:func:`on_signal`) go the same
way.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable

_STOPPING = (signal.SIGTERM, signal.SIGINT)


class _Relay:
    """The one relay of the process (``set_wakeup_fd`` holds a single socket): it sets the
    event of the latest :func:`stop_on_signals` call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.received: list[int] = []
        self.actions: dict[int, Callable[[], None]] = {}
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)  # set_wakeup_fd needs it; a full buffer drops bytes only
        self._thread = threading.Thread(target=self._run, name="kai-signals", daemon=True)
        self._thread.start()

    def install(self, stop: threading.Event) -> list[int]:
        with self.lock:
            self.stop = stop
            self.received = []
            received = self.received
        self._catch(*_STOPPING)
        return received

    def add_action(self, signum: int, action: Callable[[], None]) -> None:
        with self.lock:
            self.actions[signum] = action
        self._catch(signum)

    def _catch(self, *signums: int) -> None:
        signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for signum in signums:
            signal.signal(signum, _ignore_in_python)

    def _run(self) -> None:
        while True:
            try:
                data = self._reader.recv(64)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                signums = [signum for signum in data if signum in _STOPPING]
                if signums:
                    self.received.extend(signums)  # before the event: status() reads it then
                    self.stop.set()
                actions = [self.actions[signum] for signum in data if signum in self.actions]
            for action in actions:  # each in its own thread: a slow one delays no stop
                threading.Thread(target=action, name="kai-signal-action", daemon=True).start()


def _ignore_in_python(signum: int, frame: object) -> None:
    """Installed so that the signal neither kills the process (SIGTERM's default) nor raises
    KeyboardInterrupt (SIGINT's); the relay thread acts on it."""


_relay: _Relay | None = None
_relay_lock = threading.Lock()


def stop_on_signals(stop: threading.Event) -> Callable[[], int]:
    """Set ``stop`` on SIGTERM or SIGINT; return a function giving the exit status to use.
    Call it from the main thread (signal handlers can only be installed there)."""
    received = _the_relay().install(stop)
    return lambda: 130 if signal.SIGINT in received else 0


def on_signal(signum: int, action: Callable[[], None]) -> None:
    """Run ``action`` in a new thread on each ``signum`` (not SIGTERM or SIGINT: they stop).
    Call it from the main thread."""
    if signum in _STOPPING:
        raise ValueError(f"{signal.Signals(signum).name} stops the command: use stop_on_signals")
    _the_relay().add_action(signum, action)


def _the_relay() -> _Relay:
    global _relay
    with _relay_lock:
        if _relay is None:
            _relay = _Relay()
        return _relay


def wait_for_signal(stop: threading.Event | None = None) -> int:
    """Block until SIGTERM or SIGINT (or ``stop`` is set elsewhere); return the exit status."""
    stop = stop or threading.Event()
    status = stop_on_signals(stop)
    while not stop.wait(0.5):
        pass
    return status()
