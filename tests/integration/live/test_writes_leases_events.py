"""Idempotent writes with retries, Lease leader election, the event recorder."""

from __future__ import annotations

import time

from live_helpers import eventually

from kai.kube.client import Kube
from kai.kube.events import EventRecorder
from kai.kube.leader import LeaderElector
from kai.kube.resources import CONFIGMAPS, EVENTS, LEASES
from kai.kube.writes import create_if_absent, create_or_get, delete_if_present, patch_if_changed
from kube_emulator import ApiServer


def _cm(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"a": "1"},
    }


def test_create_or_get_and_delete_are_idempotent(kube: Kube) -> None:
    first, created = create_or_get(kube, CONFIGMAPS, _cm("x"))
    again, created_again = create_or_get(kube, CONFIGMAPS, _cm("x"))
    assert created and not created_again
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert create_if_absent(kube, CONFIGMAPS, _cm("x")) is False
    assert delete_if_present(kube, CONFIGMAPS, "x", "default") is True
    assert delete_if_present(kube, CONFIGMAPS, "x", "default") is False


def test_patch_only_when_something_changes(kube: Kube) -> None:
    obj, _ = create_or_get(kube, CONFIGMAPS, _cm("y"))
    assert patch_if_changed(kube, CONFIGMAPS, obj, {"data": {"a": "1"}}) is None
    assert (
        kube.get(CONFIGMAPS, "y", "default")["metadata"]["resourceVersion"]
        == (obj["metadata"]["resourceVersion"])
    )
    new = patch_if_changed(kube, CONFIGMAPS, obj, {"data": {"a": "2", "b": "3"}})
    assert new is not None and new["data"] == {"a": "2", "b": "3"}
    newer = patch_if_changed(kube, CONFIGMAPS, new, {"data": {"b": None}})
    assert newer is not None and newer["data"] == {"a": "2"}


def test_writes_survive_injected_500s_and_409s(server: ApiServer, kube: Kube) -> None:
    server.faults.configure(error_rate=0.2, conflict_rate=0.2, seed=4)
    try:
        for i in range(20):
            obj, _ = create_or_get(kube, CONFIGMAPS, _cm(f"f-{i}"))
            patch_if_changed(kube, CONFIGMAPS, obj, {"data": {"a": str(i + 10)}})
    finally:
        server.faults.clear()
    assert server.faults.injected["errors"] > 0 and server.faults.injected["conflicts"] > 0
    for i in range(20):
        assert kube.get(CONFIGMAPS, f"f-{i}", "default")["data"] == {"a": str(i + 10)}


def test_one_leader_at_a_time_and_handover(kubeconfig: str) -> None:
    kubes = [Kube.from_kubeconfig(kubeconfig) for _ in range(2)]
    electors = [
        LeaderElector(
            k,
            "lock",
            "default",
            f"cand-{i}",
            lease_duration=1.0,
            renew_period=0.2,
            retry_period=0.1,
        ).start()
        for i, k in enumerate(kubes)
    ]
    try:
        eventually(lambda: sum(e.is_leader for e in electors) == 1)
        for _ in range(10):  # stays exactly one while both run
            assert sum(e.is_leader for e in electors) == 1
            time.sleep(0.05)
        leader = next(e for e in electors if e.is_leader)
        other = next(e for e in electors if not e.is_leader)
        started = time.monotonic()
        leader.stop(release=False)  # a crash: the Lease is not handed back
        eventually(lambda: other.is_leader, timeout=5)
        assert time.monotonic() - started >= 0.8  # only after the lease ran out
        lease = kubes[0].get(LEASES, "lock", "default")
        assert lease["spec"]["holderIdentity"] == other.identity
        assert lease["spec"]["leaseTransitions"] >= 1
    finally:
        for e in electors:
            e.stop()
        for k in kubes:
            k.close()


def test_events_are_deduplicated(kube: Kube) -> None:
    obj, _ = create_or_get(kube, CONFIGMAPS, _cm("ev"))
    recorder = EventRecorder(kube, "test", dedup_window=0.0).start()
    try:
        recorder.event(obj, "Warning", "Broken", "it is broken")
        recorder.flush()
        recorder.event(obj, "Warning", "Broken", "it is broken")
        recorder.flush()
        recorder.event(obj, "Normal", "Fixed", "it is fixed")
        recorder.flush()
    finally:
        recorder.stop()
    events = [
        e for e in kube.list(EVENTS, "default")["items"] if e["involvedObject"]["name"] == "ev"
    ]
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    assert by_reason["Broken"]["count"] == 2
    assert by_reason["Broken"]["involvedObject"]["kind"] == "ConfigMap"
    assert by_reason["Fixed"]["count"] == 1
