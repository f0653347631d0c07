"""SIGTERM and Ctrl-C stop a long-running command, whatever its main thread is doing."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

# The main thread spends nearly all its time inside stop.wait(0), holding the event's lock: a
# signal handler that set the event itself would find that lock taken and wait for it forever.
CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    from kai.commands._signals import stop_on_signals

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it
    stop = threading.Event()
    status = stop_on_signals(stop)
    print("ready", flush=True)
    while not stop.wait(0):
        pass
    sys.exit(status())
    """
)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_stops_a_main_thread_busy_waiting_on_the_event(signum: int, code: int) -> None:
    for _ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            time.sleep(0.05)
            child.send_signal(signum)
            _, err = child.communicate(timeout=20)
        finally:
            child.kill()
            child.wait()
        assert child.returncode == code, err.decode()
        assert not err, err.decode()


def test_a_second_install_moves_the_relay_to_the_new_event() -> None:
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os, signal, threading
                from kai.commands._signals import stop_on_signals

                first, second = threading.Event(), threading.Event()
                stop_on_signals(first)
                status = stop_on_signals(second)
                os.kill(os.getpid(), signal.SIGINT)
                assert second.wait(10), "the second event was not set"
                assert not first.is_set()
                print(status())
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "130\n"


def test_another_signal_runs_its_action_and_does_not_stop() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import signal, sys, threading
                from kai.commands._signals import on_signal, stop_on_signals

                stop, dumped = threading.Event(), threading.Event()
                status = stop_on_signals(stop)
                on_signal(signal.SIGUSR1, lambda: (print("dump", flush=True), dumped.set()))
                print("ready", flush=True)
                while not stop.wait(0):
                    pass
                assert dumped.is_set()
                sys.exit(status())
                """
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGUSR1)
        assert child.stdout.readline() == b"dump\n"
        assert child.poll() is None  # still running
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err.decode()


def test_a_stopping_signal_cannot_be_given_an_action() -> None:
    from kai.commands._signals import on_signal

    with pytest.raises(ValueError, match="SIGTERM stops the command"):
        on_signal(signal.SIGTERM, lambda: None)
