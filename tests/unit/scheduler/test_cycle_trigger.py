"""When the live scheduler cycles: relevant changes, time-based deadlines, the alarm clock."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
import time
from typing import Any

import pytest
from builders import job, queue, task

from kai.reconcilers.cycle_trigger import CycleTrigger, next_due, relevant
from kai.scheduler.snapshot import SchedulerConfig

NAME = "kai-scheduler"


def _pod(node: str | None = None, scheduler: str = NAME, phase: str = "Pending") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"pod-group-name": "pg"}},
        "spec": spec,
        "status": {"phase": phase},
    }


def _modified(old: dict[str, Any], change: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    change(new)
    return new


def test_echo_of_our_own_work_is_not_relevant() -> None:
    pending = _pod()
    bound = _modified(pending, lambda p: p["spec"].__setitem__("nodeName", "n1"))
    running = _modified(bound, lambda p: p["status"].__setitem__("phase", "Running"))
    condition = _modified(pending, lambda p: p["status"].__setitem__("conditions", [{"x": 1}]))
    assert not relevant("pods", "MODIFIED", bound, pending, NAME)  # the binder bound it
    assert not relevant("pods", "MODIFIED", running, bound, NAME)  # the kubelet started it
    assert not relevant("pods", "MODIFIED", condition, pending, NAME)  # our PodScheduled write
    br = {"metadata": {"name": "p"}, "status": {}}
    assert not relevant("bindrequests", "ADDED", br, None, NAME)
    done = _modified(br, lambda b: b["status"].__setitem__("phase", "Succeeded"))
    assert not relevant("bindrequests", "MODIFIED", done, br, NAME)
    pg = {"metadata": {"name": "pg", "annotations": {}}, "spec": {"queue": "q"}}
    started = _modified(
        pg,
        lambda g: g["metadata"]["annotations"].__setitem__(
            "kai.scheduler/last-start-timestamp", "2026-01-01T00:00:00Z"
        ),
    )
    status = _modified(pg, lambda g: g.__setitem__("status", {"schedulingConditions": []}))
    assert not relevant("podgroups", "MODIFIED", started, pg, NAME)
    assert not relevant("podgroups", "MODIFIED", status, pg, NAME)
    node = {
        "metadata": {"name": "n1", "labels": {"a": "b"}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "1"}]},
    }
    beat = _modified(
        node, lambda n: n["status"]["conditions"][0].__setitem__("lastHeartbeatTime", "2")
    )
    assert not relevant("nodes", "MODIFIED", beat, node, NAME)
    other_pending = _pod(scheduler="default-scheduler")
    assert not relevant("pods", "ADDED", other_pending, None, NAME)


def test_new_work_and_freed_capacity_are_relevant() -> None:
    pending = _pod()
    assert relevant("pods", "ADDED", pending, None, NAME)
    regrouped = _modified(
        pending, lambda p: p["metadata"]["annotations"].__setitem__("pod-group-name", "other")
    )
    assert relevant("pods", "MODIFIED", regrouped, pending, NAME)
    foreign = _pod("n1", scheduler="default-scheduler", phase="Running")
    finished = _modified(foreign, lambda p: p["status"].__setitem__("phase", "Succeeded"))
    assert relevant("pods", "MODIFIED", finished, foreign, NAME)  # frees n1
    assert relevant("pods", "DELETED", foreign, foreign, NAME)
    assert relevant("pods", "ADDED", foreign, None, NAME)  # takes capacity on n1
    br = {"metadata": {"name": "p"}, "status": {}}
    failed = _modified(br, lambda b: b["status"].__setitem__("phase", "Failed"))
    assert relevant("bindrequests", "MODIFIED", failed, br, NAME)
    assert relevant("bindrequests", "DELETED", br, br, NAME)
    node = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "x"}]}, "status": {}}
    untainted = _modified(node, lambda n: n["spec"].__setitem__("taints", []))
    assert relevant("nodes", "MODIFIED", untainted, node, NAME)
    q = {"metadata": {"name": "q"}, "spec": {"resources": {}}, "status": {}}
    assert relevant(
        "queues", "MODIFIED", _modified(q, lambda x: x["spec"].__setitem__("priority", 5)), q, NAME
    )
    assert not relevant(
        "queues", "MODIFIED", _modified(q, lambda x: x["status"].__setitem__("a", 1)), q, NAME
    )
    assert relevant("config", "MODIFIED", {}, {}, NAME)
    assert relevant("priorityclasses", "ADDED", {}, None, NAME)


def test_next_due_stale_gangs_delays_and_min_runtime() -> None:
    config = SchedulerConfig(staleness_grace_period=60.0)
    gang = job("gang", [task("a", status="Running", node_name="n"), task("b")])
    gang.stale_since = 100.0
    never = lambda _job: False  # noqa: E731
    # stale since 100, grace 60: due at 160
    assert next_due(120.0, [gang], [], config, stale=lambda j: True, pending=never) == 160.0
    # stale just now (no annotation yet): due a grace from now
    gang.stale_since = None
    assert next_due(120.0, [gang], [], config, stale=lambda j: True, pending=never) == 180.0
    gang.staleness_grace_period = -1.0  # never evicted as stale
    assert next_due(120.0, [gang], [], config, stale=lambda j: True, pending=never) is None
    # a pending job inside its preemption delay: due when the delay ends
    waiting = job("waiting", [task("w")])
    waiting.preemption_delay = 30.0
    waiting.created_at = 100.0
    assert next_due(110.0, [waiting], [], config, stale=never, pending=lambda j: True) == 130.0
    # a running job protected by a queue's min runtime while something is pending
    running = job("running", [task("r", status="Running", node_name="n")])
    running.last_start_time = 100.0
    q = dataclasses.replace(queue("q"), preempt_min_runtime=50.0)
    jobs = [running, job("p", [task("p")])]
    assert next_due(110.0, jobs, [q], config, stale=never, pending=lambda j: j.uid == "p") == 150.0
    # ... nothing pending: nothing to wait for
    assert next_due(110.0, jobs, [q], config, stale=never, pending=never) is None
    # deadlines already passed are not due again
    assert next_due(200.0, jobs, [q], config, stale=never, pending=lambda j: True) is None


def test_trigger_coalesces_a_burst_and_sleeps_when_idle() -> None:
    trigger = CycleTrigger(coalesce=0.05, resync=3600, min_interval=0.1)
    assert trigger.wait()  # the first cycle runs at once (after the coalescing delay)
    woke: list[float] = []

    def loop() -> None:
        while trigger.wait():
            woke.append(time.monotonic())

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(0.2)
    assert woke == []  # nothing changed: no cycle
    start = time.monotonic()
    for _ in range(50):
        trigger.changed()
    time.sleep(0.2)
    assert len(woke) == 1 and woke[0] - start >= 0.05  # one cycle for the burst
    trigger.schedule(time.monotonic() + 0.1)  # something time-based
    time.sleep(0.25)
    assert len(woke) == 2
    # work arriving all the time: at most one cycle per min_interval
    start = time.monotonic()
    while time.monotonic() - start < 0.55:
        trigger.changed()
        time.sleep(0.01)
    assert 3 <= len(woke) - 2 <= 7
    trigger.stop()
    thread.join(2)
    assert not thread.is_alive()


def test_trigger_spaces_cycles_from_the_end_of_the_previous_one() -> None:
    """As KAI's ``wait.Until(runOnce, schedulePeriod)``: a cycle longer than the period is
    followed by a pause of ``min_interval`` even while work keeps arriving, not by the next
    cycle at once (which would keep the scheduler on the CPU for the whole of a burst)."""
    trigger = CycleTrigger(coalesce=0.01, resync=3600, min_interval=0.2)
    cycles: list[tuple[float, float]] = []  # (start, end)

    def loop() -> None:
        while trigger.wait():
            start = time.monotonic()
            time.sleep(0.3)  # a cycle longer than min_interval
            cycles.append((start, time.monotonic()))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    until = time.monotonic() + 1.8
    while time.monotonic() < until:
        trigger.changed()  # work arriving all the time, during the cycles too
        time.sleep(0.01)
    trigger.stop()
    thread.join(2)
    assert not thread.is_alive()
    assert len(cycles) >= 2
    for (_, end), (start, _) in itertools.pairwise(cycles):
        assert start - end >= 0.2 - 1e-3, cycles


def test_a_skipped_cycle_does_not_delay_the_next() -> None:
    """Before its first cycle (not leading, informers not synced) the loop looks again after
    the coalescing delay, not after ``min_interval``."""
    now = [100.0]
    trigger = CycleTrigger(coalesce=0.1, resync=3600, min_interval=5.0, clock=lambda: now[0])
    assert trigger.wait()  # handed out at 100.0 ...
    trigger.skipped()  # ... but the loop could not run it
    now[0] += 0.1
    trigger.changed()
    now[0] += 0.1
    assert trigger._next_start() == pytest.approx(100.2)  # not 105.2
    assert trigger.wait()
    # a cycle that ran: new work waits min_interval from its end
    now[0] += 2.0  # it took 2 s
    trigger.changed()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(trigger.wait()), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 2
    while trigger._running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert trigger._next_start() == pytest.approx(102.2 + 5.0) and result == []
    now[0] = 107.2
    trigger.schedule(now[0])  # wakes the waiter
    waiter.join(2)
    assert result == [True]
