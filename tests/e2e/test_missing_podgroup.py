"""A pod whose ``pod-group-name`` names a PodGroup that does not exist: the live scheduler gives
it ``PodScheduled=False/PodGroupNotFound`` and one Warning Event naming the PodGroup, and
``kai explain`` says so; once the PodGroup exists the pod is an ordinary task again. On the
embedded and on the real API server."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import both_servers
from live_helpers import eventually

from kai.cli import main
from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.resources import EVENTS, NAMESPACES, PODGROUPS, PODS
from kai.reconcilers.missing_podgroup import GRACE_SECONDS, REASON, MissingPodGroups, missing
from kai.reconcilers.scheduler import Scheduler, SchedulerOptions, make_informers
from kai.sim.workloads import ensure_namespace, pod_manifest


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    yield from both_servers(request, tmp_path)


def _condition(kube: Kube, name: str, ns: str) -> dict[str, Any] | None:
    pod = kube.get(PODS, name, ns)
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def _events(kube: Kube, name: str, ns: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list(EVENTS, ns)["items"]
        if e.get("reason") == REASON and (e.get("involvedObject") or {}).get("name") == name
    ]


def test_a_pod_naming_a_missing_podgroup_says_so(
    api: tuple[str, Kube], capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, kube = api
    ns = f"missing-pg-{uuid.uuid4().hex[:6]}"
    ensure_namespace(kube, ns)
    pod = pod_manifest("lonely", ns, "team", annotations={"pod-group-name": "ghost"})
    kube.create(PODS, pod, ns)
    # a pod that names no PodGroup waits for the pod-grouper: nothing is said about it
    kube.create(PODS, pod_manifest("plain", ns, "team"), ns)
    informers = make_informers(kube, "kai-scheduler")
    informers.start()
    recorder = EventRecorder(kube, "kai-scheduler").start()
    scheduler = Scheduler(kube, informers, recorder, SchedulerOptions(period=0.2))
    try:
        assert informers.wait_synced(20)
        scheduler.start()
        cond = eventually(
            lambda: (c := _condition(kube, "lonely", ns)) and c.get("reason") == REASON and c,
            timeout=20,
        )
        assert cond["status"] == "False"
        assert '"ghost"' in cond["message"] and ns in cond["message"]
        assert "pod-group-name" in cond["message"]
        (event,) = eventually(lambda: _events(kube, "lonely", ns), timeout=10)
        assert event["type"] == "Warning" and event["message"] == cond["message"]
        # later cycles neither repeat the Event nor rewrite the condition
        for _ in range(2):
            cycles = scheduler.cycles
            scheduler.trigger.changed()
            eventually(lambda c=cycles: scheduler.cycles > c, timeout=10)
        recorder.flush()
        events = _events(kube, "lonely", ns)
        assert len(events) == 1 and int(events[0].get("count") or 1) == 1
        assert _condition(kube, "lonely", ns) == cond
        assert _condition(kube, "plain", ns) is None
        assert _events(kube, "plain", ns) == []

        # kai explain names the missing PodGroup, by the pod and by the PodGroup's name
        for target in (f"{ns}/lonely", f"{ns}/ghost"):
            assert main(["explain", target, "--kubeconfig", kubeconfig, "-o", "json"]) == 0
            doc = json.loads(capsys.readouterr().out)
            assert doc["firstReason"]["reason"] == REASON
            assert doc["podGroup"] == f"{ns}/ghost" and doc["pod"] == f"{ns}/lonely"
            assert doc["unblock"] and "ghost" in doc["unblock"][0]
        assert main(["explain", f"{ns}/lonely", "--kubeconfig", kubeconfig]) == 0
        out = capsys.readouterr().out
        assert f"first reason: {REASON}: " in out and '"ghost"' in out

        # the PodGroup appears: the pod is an ordinary task of it (its queue is missing)
        kube.create(
            PODGROUPS,
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "ghost", "namespace": ns},
                "spec": {"minMember": 1, "queue": "no-such-queue"},
            },
            ns,
        )

        def explained() -> dict[str, Any] | None:
            assert main(["explain", f"{ns}/lonely", "--kubeconfig", kubeconfig, "-o", "json"]) == 0
            doc = json.loads(capsys.readouterr().out)
            return doc if doc["firstReason"]["reason"] != REASON else None

        doc = eventually(explained, timeout=20, interval=0.5)
        assert doc["firstReason"]["reason"] == "QueueDoesNotExist"
    finally:
        scheduler.stop()
        informers.stop()
        recorder.stop()
        with contextlib.suppress(ApiError):
            for name in ("lonely", "plain"):
                kube.delete(PODS, name, ns, grace_period_seconds=0)
        with contextlib.suppress(ApiError):
            kube.delete(NAMESPACES, ns)


# -- the bookkeeping, without a server -------------------------------------------------------


def _pod(uid: str, group: str | None, ns: str = "a") -> dict[str, Any]:
    annotations = {"pod-group-name": group} if group else {}
    return {"metadata": {"uid": uid, "name": uid, "namespace": ns, "annotations": annotations}}


def test_missing_lists_only_pods_naming_an_absent_podgroup() -> None:
    pods = [_pod("1", "there"), _pod("2", "gone"), _pod("3", None), _pod("4", "there", "b")]
    found = missing(pods, lambda ns, name: (ns, name) == ("a", "there"))
    assert [(p["metadata"]["uid"], name) for p, name in found] == [("2", "gone"), ("4", "there")]


def test_reported_once_after_the_grace_period_and_again_for_a_new_name() -> None:
    tracker = MissingPodGroups(grace=GRACE_SECONDS)
    pod = _pod("1", "gone")
    due, wake = tracker.due([(pod, "gone")], 100.0)
    assert due == [] and wake == 100.0 + GRACE_SECONDS
    due, wake = tracker.due([(pod, "gone")], 100.0 + GRACE_SECONDS)
    assert due == [(pod, "gone")] and wake is None
    assert tracker.due([(pod, "gone")], 200.0) == ([], None)  # once
    renamed = _pod("1", "other")
    assert tracker.due([(renamed, "other")], 201.0) == ([], 201.0 + GRACE_SECONDS)
    assert tracker.due([(renamed, "other")], 205.0)[0] == [(renamed, "other")]
    # the PodGroup appeared (the pod is no longer listed), then went again: a new report
    assert tracker.due([], 206.0) == ([], None)
    assert tracker.due([(renamed, "other")], 207.0)[0] == []
    assert tracker.due([(renamed, "other")], 207.0 + GRACE_SECONDS)[0] == [(renamed, "other")]
    started = time.monotonic()
    many = [(_pod(str(i), "gone"), "gone") for i in range(10_000)]
    tracker.due(many, 0.0)
    assert len(tracker.due(many, 10.0)[0]) == 10_000
    assert time.monotonic() - started < 2


def test_explain_offline_matches_the_documented_output() -> None:
    """docs/explain.md shows what ``kai explain`` prints for such a pod: the same text, from a
    snapshot holding the pod and no PodGroup."""
    from kai.insight.explain import MissingPodGroup, explain, text
    from kai.reconcilers.cluster_snapshot import KINDS, ClusterSnapshot

    doc = (Path(__file__).parents[2] / "docs" / "explain.md").read_text()
    section = doc.split("### A pod whose PodGroup does not exist", 1)[1]
    shown = section.split("```\n", 2)[1]
    snap = ClusterSnapshot(captured_at=0.0)
    for kind in KINDS:
        snap.objects[kind] = []
    pod = pod_manifest("lonely", "work", "team", annotations={"pod-group-name": "ghost"})
    pod["metadata"]["uid"] = "u1"
    pod["status"] = {"phase": "Pending"}
    snap.objects["pods"] = [pod]
    for target in ("work/lonely", "lonely", "work/ghost"):
        found = explain(snap, target)
        assert isinstance(found, MissingPodGroup)
        assert text(found) == shown
    # a pod that names no PodGroup is still "not kai's to schedule" for explain
    plain = pod_manifest("plain", "work", "team")
    plain["metadata"]["uid"] = "u2"
    snap.objects["pods"] = [plain]
    from kai.insight.explain import TargetError

    with pytest.raises(TargetError):
        explain(snap, "work/plain")


def test_explain_json_has_the_documented_keys() -> None:
    """The JSON of a pod whose PodGroup is missing has every key of an ordinary explanation
    (docs/cli.md), and lists the pods naming the PodGroup."""
    from kai.insight.explain import explain
    from kai.reconcilers.cluster_snapshot import KINDS, ClusterSnapshot

    snap = ClusterSnapshot(captured_at=0.0)
    for kind in KINDS:
        snap.objects[kind] = []
    pods = []
    for i, name in enumerate(("b", "a")):
        pod = pod_manifest(name, "work", "team", annotations={"pod-group-name": "ghost"})
        pod["metadata"]["uid"] = f"u{i}"
        pods.append(pod)
    snap.objects["pods"] = pods
    doc = explain(snap, "work/ghost").as_dict()
    ordinary = {
        "podGroup", "pod", "queue", "state", "tasks", "minAvailable", "firstReason",
        "otherReasons", "queuePath", "positionInQueue", "unblock",
    }  # fmt: skip
    assert ordinary <= set(doc)
    assert doc["pod"] == "work/a" and doc["podsNamingIt"] == ["work/a", "work/b"]
    assert doc["queue"] is None and doc["positionInQueue"] is None
