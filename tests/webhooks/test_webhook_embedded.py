"""``kai webhook`` called by the embedded API server (kube_emulator), which calls admission
webhooks over HTTPS as the real one does (it has no match conditions: the webhook's own
schedulerName check stands in)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import example_objects

from kai.kube.client import ApiError, Kube
from kai.kube.resources import NAMESPACES, PODS
from kai.sim.system import bootstrap
from kai.webhooks.app import Options, WebhookApp, free_port
from kai.webhooks.cluster import POLICY_RESOURCES
from kube_emulator import ApiServer

pytestmark = pytest.mark.integration


def apply_objects(kube: Kube, objects: list[dict]) -> list[str]:
    """Create each object; the refusals' messages."""
    by_kind = {r.kind: r for r in POLICY_RESOURCES}
    refused = []
    for obj in objects:
        try:
            kube.create(by_kind[obj["kind"]], obj)
        except ApiError as exc:
            refused.append(exc.message)
    return refused


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    server = ApiServer().start()
    path: Path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    kube = Kube.from_kubeconfig(str(path))
    bootstrap(kube)
    kube.create(NAMESPACES, {"metadata": {"name": "team-nlp"}})
    port = free_port()
    app = WebhookApp(
        kube,
        Options(port=port, host="127.0.0.1", self_register=f"https://127.0.0.1:{port}"),
    ).start()
    try:
        yield kube
    finally:
        app.stop()
        kube.close()
        server.stop()


def test_valid_examples_accepted_broken_tree_refused(kube: Kube) -> None:
    assert apply_objects(kube, example_objects()) == []
    broken = next(
        o
        for o in example_objects("examples/gitops-broken")
        if o["metadata"]["name"] == "product-teams"
    )
    problems = apply_objects(kube, [broken])
    assert len(problems) == 1
    assert "[children-quota-sum]" in problems[0] and "[name]" in problems[0]


def test_fractional_pod_mutated_and_bad_gpu_request_refused(kube: Kube) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"frac-{uuid.uuid4().hex[:5]}",
            "namespace": "team-nlp",
            "annotations": {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    created = kube.create(PODS, pod)
    assert created["metadata"]["labels"]["kai.scheduler/queue"] == "nlp"
    names = [e["name"] for e in created["spec"]["containers"][0]["env"]]
    assert names == ["NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"]
    pod["metadata"]["name"] += "-bad"
    pod["metadata"]["annotations"]["gpu-fraction"] = "2"
    with pytest.raises(ApiError) as refused:
        kube.create(PODS, pod)
    assert refused.value.status == 403 and "gpu-fraction" in refused.value.message
    other = {**pod, "spec": {**pod["spec"], "schedulerName": "default-scheduler"}}
    other["metadata"] = {**pod["metadata"], "name": pod["metadata"]["name"] + "-other"}
    assert "env" not in kube.create(PODS, other)["spec"]["containers"][0]


def test_readyz_says_not_ready_while_the_work_queue_is_full(kube: Kube) -> None:
    """A full queue answers 429 at once; /readyz says 503 meanwhile, so that a Service sends
    new connections to another replica, and 200 again once the queue has room."""
    import dataclasses
    import threading
    import urllib.error
    import urllib.request

    from kai.webhooks.server import Limits

    def readyz(port: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    metrics = free_port()
    opts = Options(port=free_port(), host="127.0.0.1", metrics_port=metrics, workers=1)
    opts.limits = dataclasses.replace(Limits(), max_queued=1)
    opts.cert_secret = f"kai-webhook-certs-{uuid.uuid4().hex[:6]}"
    app = WebhookApp(kube, opts).start()
    hold = threading.Event()
    try:
        assert readyz(metrics) == 200
        assert app.server.streams.submit(hold.wait, 10)  # runs
        assert app.server.streams.submit(hold.wait, 10)  # waits
        assert not app.server.streams.submit(hold.wait, 10)  # refused: the queue is full
        assert readyz(metrics) == 503
        hold.set()
        deadline = time.monotonic() + 5
        while readyz(metrics) != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert readyz(metrics) == 200
    finally:
        hold.set()
        app.stop()
