"""The binder's fractional (shared-GPU) path, request by request: one reservation pod per GPU
group however far the pods informer lags, no read of what it just wrote, the pods of a group
woken by the watch as soon as the GPU UUID is there, and everything KAI's protocol asks for
(group label, both ConfigMaps) on the pod before its binding."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Cluster, both_servers, make_nodes, remove_test_objects
from live_helpers import eventually

from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer
from kai.kube.resources import BIND_REQUESTS, CONFIGMAPS, EVENTS, PODS
from kai.reconcilers import binder as binder_module
from kai.reconcilers.binder import (
    GPU_INDEX_ANNOTATION,
    Binder,
    configmap_prefix,
    reservation_pod_name,
)
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.workloads import ensure_namespace, pod_manifest

RESERVATIONS = "kai-resource-reservation"


class CountingKube(Kube):
    """A client that counts its requests by (verb, path without the object's name)."""

    def __init__(self, kube: Kube) -> None:
        self.__dict__.update(kube.__dict__)
        self.calls: Counter[tuple[str, str]] = Counter()
        self.log: list[tuple[float, str, str]] = []
        self._count_lock = threading.Lock()

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        body = kwargs.get("body")
        named = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
        with self._count_lock:
            self.calls[(method, _kind(path))] += 1
            # a POST's path names the collection: the object's name is in the body
            self.log.append((time.monotonic(), method, f"{path}/{named}" if named else path))
        return super().request(method, path, **kwargs)


def _kind(path: str) -> str:
    parts = path.strip("/").split("/")
    if "binding" in parts:
        return "pods/binding"
    if parts[-1] == "status":
        return parts[-3] + "/status"
    for kind in ("pods", "configmaps", "bindrequests", "namespaces", "events"):
        if kind in parts:
            return kind
    return path


class LaggingInformer(Informer):
    """An informer that sees every event ``lag`` seconds late (a loaded API server)."""

    lag = 0.0

    def _apply(self, event: dict[str, Any]) -> None:
        time.sleep(self.lag)
        super()._apply(event)


def _binder_starter(kubeconfig: str, started: list[Any]) -> Any:
    """``start(lag)``: a binder on ``kubeconfig`` whose pods informer lags ``lag`` seconds, and
    its counting client; its stoppers appended to ``started``."""

    def start(lag: float) -> tuple[Binder, CountingKube]:
        kube = CountingKube(Kube.from_kubeconfig(kubeconfig))
        brs = Informer(kube, BIND_REQUESTS).start()
        pods = LaggingInformer(kube, PODS)
        pods.lag = lag
        pods.start()
        assert brs.wait_synced(10) and pods.wait_synced(10)
        recorder = EventRecorder(kube, "kai-binder").start()
        binder = Binder(kube, brs, pods, recorder, workers=4).start()
        with kube._count_lock:
            kube.calls.clear()  # the informers' lists: not the binder's
            kube.log.clear()
        started.extend([binder.stop, recorder.stop, pods.stop, brs.stop])
        return binder, kube

    return start


@pytest.fixture
def binder_of(cluster: Cluster) -> Iterator[Any]:
    started: list[Any] = []
    yield _binder_starter(cluster.kubeconfig, started)
    for stop in started:
        stop()


def _bind_request(pod: dict[str, Any], node: str, group: str) -> dict[str, Any]:
    md = pod["metadata"]
    return {
        "apiVersion": BIND_REQUESTS.api_version,
        "kind": "BindRequest",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": md["name"], "uid": md["uid"]}
            ],
        },
        "spec": {
            "podName": md["name"],
            "selectedNode": node,
            "receivedResourceType": "Fraction",
            "receivedGPU": {"count": 1, "portion": "0.50"},
            "selectedGPUGroups": [group],
        },
    }


def _two_halves(cluster: Cluster, binder: Binder, node: str, group: str) -> None:
    """Two pending half-GPU pods, then (once the binder's cache has them, as the scheduler
    only asks for pods it has seen) their BindRequests for one GPU group."""
    kube = cluster.kube
    ensure_namespace(kube, "work")
    made = [
        kube.create(PODS, pod_manifest(name, "work", None, fraction=0.5))
        for name in ("half-a", "half-b")
    ]
    eventually(lambda: all(binder.pods.get(p["metadata"]["name"], "work") for p in made))
    for pod in made:
        kube.create(BIND_REQUESTS, _bind_request(pod, node, group))


def _bound(cluster: Cluster, names: list[str], ns: str = "work") -> bool:
    pods = {p["metadata"]["name"]: p for p in cluster.kube.list(PODS, ns)["items"]}
    return all((pods[n].get("spec") or {}).get("nodeName") for n in names)


@pytest.mark.parametrize("lag", [0.0, 1.0])
def test_a_group_costs_one_reservation_and_no_reads_however_late_the_cache(
    cluster: Cluster, binder_of: Any, lag: float
) -> None:
    """Two halves of one device: one reservation pod created, never asked for again (the
    informer showing it a second late changes nothing), both pods labelled, their four
    ConfigMaps written, both bound and their BindRequests Succeeded."""
    (node,) = make_nodes(cluster, 1, gpus=2)
    cluster.start_system(components=("nodes",))  # the kubelet publishes the GPU UUID
    binder, kube = binder_of(lag)
    _two_halves(cluster, binder, node, "g1")
    eventually(lambda: _bound(cluster, ["half-a", "half-b"]), timeout=20)
    phases = {
        br["metadata"]["name"]: (br.get("status") or {}).get("phase")
        for br in cluster.kube.list(BIND_REQUESTS, "work")["items"]
    }
    eventually(
        lambda: all(
            (br.get("status") or {}).get("phase") == "Succeeded"
            for br in cluster.kube.list(BIND_REQUESTS, "work")["items"]
        ),
        timeout=10,
    )
    calls = kube.calls
    assert calls[("POST", "pods")] == 1, (calls, phases)  # the one reservation pod
    assert calls[("GET", "pods")] == 0, calls  # nothing read back
    assert calls[("POST", "configmaps")] == 4, calls  # two per pod
    assert calls[("PATCH", "pods")] == 2, calls  # the group label, once per pod
    assert calls[("POST", "pods/binding")] == 2, calls
    assert calls[("PATCH", "bindrequests/status")] == 2, calls
    for name in ("half-a", "half-b"):
        pod = cluster.kube.get(PODS, name, "work")
        assert pod["metadata"]["labels"]["runai-gpu-group"] == "g1"
        assert pod["metadata"]["annotations"]["received-resource-type"] == "Fraction"
    reservation = cluster.kube.get(PODS, reservation_pod_name(node, "g1"), RESERVATIONS)
    uuid = reservation["metadata"]["annotations"][GPU_INDEX_ANNOTATION]
    maps = cluster.kube.list(CONFIGMAPS, "work")["items"]
    assert len(maps) == 4
    assert {m["data"]["NVIDIA_VISIBLE_DEVICES"] for m in maps} == {uuid}
    assert binder.bound == 2


def test_everything_a_pod_needs_is_written_before_its_binding(
    cluster: Cluster, binder_of: Any
) -> None:
    """KAI's guarantee, kept while the writes go out together: the group label and both
    ConfigMaps of a pod are acknowledged before its binding is sent."""
    (node,) = make_nodes(cluster, 1, gpus=2)
    cluster.start_system(components=("nodes",))
    binder, kube = binder_of(0.0)
    _two_halves(cluster, binder, node, "g1")
    eventually(lambda: _bound(cluster, ["half-a", "half-b"]), timeout=20)
    with kube._count_lock:
        log = list(kube.log)
    for name in ("half-a", "half-b"):
        binding = next(
            i
            for i, (_, verb, path) in enumerate(log)
            if verb == "POST" and f"/pods/{name}/binding" in path
        )
        before = log[:binding]
        assert any(v == "PATCH" and p.endswith(f"/pods/{name}") for _, v, p in before)
        prefix = configmap_prefix(cluster.kube.get(PODS, name, "work"))
        made = {p.rsplit("/", 1)[1] for _, v, p in before if v == "POST" and "/configmaps/" in p}
        assert {f"{prefix}-0", f"{prefix}-0-evar"} <= made, (name, made)


def test_a_waiting_bind_request_is_woken_by_the_watch_not_a_poll(
    cluster: Cluster, binder_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation pod whose UUID comes late: the BindRequests do not ask the server again,
    and they go on as soon as the UUID arrives -- with the safety-net re-check pushed out of
    reach, only the watch can wake them."""
    monkeypatch.setattr(binder_module, "RESERVATION_RECHECK", 60.0)
    (node,) = make_nodes(cluster, 1, gpus=2)
    # no kubelet: this test plays the reservation pod's UUID itself
    binder, kube = binder_of(0.0)
    _two_halves(cluster, binder, node, "g1")
    name = reservation_pod_name(node, "g1")
    eventually(lambda: cluster.kube.list(PODS, RESERVATIONS)["items"], timeout=10)
    time.sleep(2.5)
    assert not _bound(cluster, ["half-a"])
    assert kube.calls[("POST", "pods")] == 1
    assert kube.calls[("GET", "pods")] == 0
    # both BindRequests are parked on the reservation pod
    assert binder._waiters.get(name) == {("work", "half-a"), ("work", "half-b")}
    _publish_uuid(cluster.kube, name, "GPU-late")  # as the reservation pod does
    eventually(lambda: _bound(cluster, ["half-a", "half-b"]), timeout=20, interval=0.05)
    assert not binder._waiters


@dataclass
class TimeoutCase:
    """One pending half-GPU pod seen by a binder whose ReservationTimeout is 1 s, on either API
    server (a namespace and a node of its own on the session's real one)."""

    kube: Kube
    ns: str
    node: str
    pod: dict[str, Any]
    binder: Binder
    calls: CountingKube


@pytest.fixture(params=["embedded", "real"])
def timeout_case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TimeoutCase]:
    monkeypatch.setattr(binder_module, "RESERVATION_TIMEOUT", 1.0)
    monkeypatch.setattr(binder_module, "RESERVATION_RECHECK", 0.2)
    tag = uuid.uuid4().hex[:6]
    ns, prefix = f"timeout-{tag}", f"timeout-{tag}"
    started: list[Any] = []

    def cleanup(api: Kube) -> None:  # leave the session's real cluster as it was
        for stop in started:
            stop()
        started.clear()
        remove_test_objects(api, ns, prefix)

    for kubeconfig, kube in both_servers(request, tmp_path, cleanup=cleanup):
        try:
            (node,) = create_nodes(kube, 1, NodeShape(gpus=2), prefix=prefix)
            binder, calls = _binder_starter(kubeconfig, started)(0.0)
            ensure_namespace(kube, ns)
            pod = kube.create(PODS, pod_manifest("half-a", ns, None, fraction=0.5))
            eventually(lambda b=binder: b.pods.get("half-a", ns))
            yield TimeoutCase(kube, ns, node, pod, binder, calls)
        finally:
            for stop in started:
                stop()
            started.clear()


def _publish_uuid(kube: Kube, name: str, uuid_: str) -> None:
    kube.patch(
        PODS,
        name,
        {"metadata": {"annotations": {GPU_INDEX_ANNOTATION: uuid_}}},
        RESERVATIONS,
        content_type="application/merge-patch+json",
    )


def test_past_the_timeout_the_reservation_pod_is_read_from_the_server(
    timeout_case: TimeoutCase,
) -> None:
    """A pods watch far behind the server (as a saturated API server's): the reservation pod's
    GPU UUID is on the server but not in the cache when the timeout comes. The binder reads
    the reservation pod from the server before giving up, finds the UUID and binds."""
    case, kube = timeout_case, timeout_case.kube
    case.binder.pods.lag = 3.0  # from now on every pods event reaches the binder 3 s late
    kube.create(BIND_REQUESTS, _bind_request(case.pod, case.node, "g1"))
    name = reservation_pod_name(case.node, "g1")
    eventually(lambda: _exists(kube, name, RESERVATIONS), timeout=10)
    _publish_uuid(kube, name, "GPU-on-the-server")  # as the reservation pod does
    eventually(lambda: _on_node(kube, "half-a", case.ns), timeout=20, interval=0.05)
    br = kube.get(BIND_REQUESTS, "half-a", case.ns)
    assert not (br.get("status") or {}).get("failedAttempts"), br.get("status")
    assert case.calls.calls[("POST", "pods")] == 1  # the one reservation pod, never made again
    assert case.calls.calls[("GET", "pods")] >= 1  # the read past the timeout
    uid = case.pod["metadata"]["uid"]
    maps = [  # the pod's own (a real namespace also holds kube-root-ca.crt)
        m
        for m in kube.list(CONFIGMAPS, case.ns)["items"]
        if any(o["uid"] == uid for o in m["metadata"].get("ownerReferences") or [])
    ]
    assert len(maps) == 2
    assert {m["data"]["NVIDIA_VISIBLE_DEVICES"] for m in maps} == {"GPU-on-the-server"}


def test_a_reservation_pod_without_a_uuid_fails_the_bind_after_the_timeout(
    timeout_case: TimeoutCase,
) -> None:
    """No GPU UUID on the server either (no kubelet here): the attempt fails with
    ReservationTimeout, counted in the BindRequest's status, and a Warning event on the pod."""
    case, kube = timeout_case, timeout_case.kube
    body = _bind_request(case.pod, case.node, "g1")
    body["spec"]["backoffLimit"] = 1  # one attempt: Failed at once
    kube.create(BIND_REQUESTS, body)

    def status() -> dict[str, Any]:
        return kube.get(BIND_REQUESTS, "half-a", case.ns).get("status") or {}

    eventually(lambda: status().get("phase") == "Failed", timeout=15)
    assert status()["reason"].startswith("ReservationTimeout: no GPU UUID")
    assert status()["failedAttempts"] == 1
    assert not _on_node(kube, "half-a", case.ns)
    assert case.calls.calls[("GET", "pods")] >= 1  # the server was asked before giving up

    def timed_out_event() -> bool:  # the recorder sends events in the background
        return any(
            e.get("reason") == "FailedBinding" and "ReservationTimeout" in e.get("message", "")
            for e in kube.list(EVENTS, case.ns)["items"]
        )

    eventually(timed_out_event, timeout=10)


def test_the_binder_says_why_a_bind_waits(
    timeout_case: TimeoutCase, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind that waits for its reservation pod's GPU is logged: once at INFO when it starts
    waiting, once as a WARNING when it still waits (never once per re-check), naming the
    reservation pod, the node and what it waits for."""
    monkeypatch.setattr(binder_module, "RESERVATION_TIMEOUT", 30.0)
    monkeypatch.setattr(binder_module, "RESERVATION_WARN", 0.6)
    case, kube = timeout_case, timeout_case.kube
    caplog.set_level(logging.INFO, logger="kai.binder")
    kube.create(BIND_REQUESTS, _bind_request(case.pod, case.node, "g1"))
    name = reservation_pod_name(case.node, "g1")

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "waiting" in r.getMessage()]

    eventually(lambda: any(r.levelno == logging.WARNING for r in said()), timeout=15)
    time.sleep(1.0)  # more re-checks: nothing more is said
    levels = [r.levelno for r in said()]
    assert levels == [logging.INFO, logging.WARNING], levels
    text = said()[-1].getMessage()
    assert f"binder {case.ns}/half-a" in text
    assert f"kai-resource-reservation/{name} on node {case.node}" in text
    assert GPU_INDEX_ANNOTATION in text
    assert not (kube.get(BIND_REQUESTS, "half-a", case.ns).get("status") or {}).get("phase")


def _exists(kube: Kube, name: str, ns: str) -> bool:
    try:
        kube.get(PODS, name, ns)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _on_node(kube: Kube, name: str, ns: str) -> bool:
    return bool((kube.get(PODS, name, ns).get("spec") or {}).get("nodeName"))
