"""Direct binding (kai.reconcilers.direct_bind): which pods skip the binder, the in-flight
records that keep a pod Binding until the informer shows its node, and how the Binding's
answers are read."""

from __future__ import annotations

from typing import Any

import pytest

from kai.kube.client import ApiError, TransientError
from kai.reconcilers.direct_bind import (
    InFlightBinds,
    binder_work,
    is_in_flight_record,
    post_binding,
)
from kai.reconcilers.snapshot_builder import pod_status
from kai.scheduler.result import BindDecision, ReceivedResourceType
from kai.scheduler.snapshot import TaskStatus


def _pod(name: str = "p", uid: str = "u1", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": dict(spec)}


WHOLE = BindDecision("ns/p", "node-1", ReceivedResourceType.REGULAR, gpu_count=1, gpu_portion=1.0)


def test_whole_gpu_and_cpu_pods_need_no_binder() -> None:
    assert binder_work(_pod(), WHOLE) is None
    cpu = BindDecision("ns/p", "node-1", ReceivedResourceType.REGULAR)
    secret = {"name": "s", "secret": {"secretName": "x"}}
    assert binder_work(_pod(volumes=[secret, {"name": "e", "emptyDir": {}}]), cpu) is None


@pytest.mark.parametrize(
    ("pod", "decision", "reason"),
    [
        (
            _pod(),
            BindDecision("ns/p", "n", ReceivedResourceType.FRACTION, 1, 0.5, gpu_groups=("g",)),
            "GPU Fraction",
        ),
        (_pod(), BindDecision("ns/p", "n", ReceivedResourceType.MIG_INSTANCE), "GPU MigInstance"),
        (
            _pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]),
            WHOLE,
            "volume data",
        ),
        (_pod(volumes=[{"name": "scratch", "ephemeral": {}}]), WHOLE, "volume scratch"),
        (_pod(resourceClaims=[{"name": "gpu"}]), WHOLE, "resource claims"),
    ],
)
def test_pods_with_binder_work_keep_the_bind_request(
    pod: dict[str, Any], decision: BindDecision, reason: str
) -> None:
    assert binder_work(pod, decision) == reason


class _Pods:
    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.pods.get((namespace, name))


def test_an_in_flight_bind_holds_the_pod_until_the_informer_shows_its_node() -> None:
    cache = _Pods()
    pod = _pod()
    cache.pods[("ns", "p")] = pod
    binds = InFlightBinds()
    key = binds.hold(pod, WHOLE)
    [record] = binds.records(cache.get)
    assert is_in_flight_record(record)
    # the snapshot reads it as a live BindRequest: the pod is Binding on node-1
    assert pod_status(pod, record)[:2] == (TaskStatus.BINDING, "node-1")
    binds.settle(key)  # answered; the informer has not caught up yet
    assert len(binds.records(cache.get)) == 1
    cache.pods[("ns", "p")] = {**pod, "spec": {"nodeName": "node-1"}}
    # the cycle may have listed the pods just before the cache caught up: held once more
    assert len(binds.records(cache.get)) == 1
    assert binds.records(cache.get) == []
    assert len(binds) == 0


def test_a_failed_or_replaced_bind_releases_the_pod() -> None:
    cache = _Pods()
    pod = _pod()
    cache.pods[("ns", "p")] = pod
    binds = InFlightBinds()
    key = binds.hold(pod, WHOLE)
    binds.drop(key)  # refused: Pending again for the next cycle
    assert binds.records(cache.get) == []
    binds.hold(pod, WHOLE)
    cache.pods[("ns", "p")] = _pod(uid="u2")  # deleted and re-created under the same name
    assert len(binds.records(cache.get)) == 1
    assert binds.records(cache.get) == []
    # still in flight while the pod is not in the cache yet: held
    binds.hold(_pod(name="q", uid="u3"), WHOLE)
    assert [r["metadata"]["name"] for r in binds.records(cache.get)] == ["q"]


class _Binder:
    """Answers pods/binding as an API server does."""

    def __init__(self, *answers: BaseException | None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, str, dict[str, str] | None]] = []

    def bind(
        self, namespace: str, pod: str, node: str, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        self.calls.append((namespace, pod, node, annotations))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {}


def _conflict(message: str) -> ApiError:
    return ApiError(409, {"reason": "Conflict", "message": message}, "POST binding")


def test_post_binding_reads_the_servers_answers() -> None:
    ok = _Binder()
    assert post_binding(ok, "ns", "p", "node-1", {"a": "b"}) == ""  # type: ignore[arg-type]
    assert ok.calls == [("ns", "p", "node-1", {"a": "b"})]
    # a retry whose first answer was lost: already on the same node counts as done
    same = _Binder(_conflict('pod p is already assigned to node "node-1"'))
    assert post_binding(same, "ns", "p", "node-1", {}) == ""  # type: ignore[arg-type]
    other = _Binder(_conflict('pod p is already assigned to node "node-2"'))
    assert post_binding(other, "ns", "p", "node-1", {}).startswith("AlreadyBound")  # type: ignore[arg-type]
    gone = _Binder(ApiError(404, {"reason": "NotFound", "message": "pods p not found"}, "x"))
    assert post_binding(gone, "ns", "p", "node-1", {}).startswith("BindingError")  # type: ignore[arg-type]
    # transient failures are retried, then succeed
    flaky = _Binder(TransientError("reset"), ApiError(503, {}, "x"), None)
    assert post_binding(flaky, "ns", "p", "node-1", {}) == ""  # type: ignore[arg-type]
    assert len(flaky.calls) == 3
    forbidden = _Binder(ApiError(403, {"reason": "Forbidden"}, "x"))
    with pytest.raises(ApiError):
        post_binding(forbidden, "ns", "p", "node-1", {})  # type: ignore[arg-type]
