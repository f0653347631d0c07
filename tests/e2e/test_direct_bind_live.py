"""Direct binding and pods grouped by owner, on the embedded API server AND the real one.

- a Binding's ``metadata.annotations`` land on the pod (what the scheduler relies on to write
  ``pod-group-name`` on pods grouped by owner), and a second Binding is refused with the
  message :func:`kai.reconcilers.direct_bind.post_binding` reads;
- the whole system in bind mode ``direct``: whole-GPU pods and a Job's gang are bound by the
  scheduler itself, each exactly once (the node never changes), without a BindRequest and
  without a ``pod-group-name`` PATCH while pending, and carry the annotation once bound.

Each test uses its own scheduler name, namespace and nodes (labelled, selected by the pods),
so the session's real cluster is shared safely; what it made is deleted at the end.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import both_servers

from helpers.polling import eventually
from kai.kube.client import ApiError, Kube
from kai.kube.informer import InformerSet
from kai.kube.resources import BIND_REQUESTS, JOBS, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES
from kai.kube.writes import create_if_absent
from kai.reconcilers.direct_bind import post_binding
from kai.reconcilers.group_by_owner import BY_OWNER_ANNOTATION
from kai.sim.system import System, SystemOptions
from kai.sim.workloads import pod_manifest

NOT_READY = "node.kubernetes.io/not-ready"


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    yield from both_servers(request, tmp_path)


@pytest.fixture
def made(api: tuple[str, Kube]) -> Iterator[list[tuple[Any, str, str | None]]]:
    objects: list[tuple[Any, str, str | None]] = []
    yield objects
    for res, name, namespace in reversed(objects):
        with contextlib.suppress(ApiError):
            api[1].delete(res, name, namespace)


def _node(kube: Kube, made: list[Any], name: str, tag: str, gpus: int = 8) -> None:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    labels = {"kubernetes.io/hostname": name, "direct-bind-test": tag}
    kube.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    )
    made.append((NODES, name, None))
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    kube.patch(
        NODES,
        name,
        {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}},
        sub="status",
    )

    def untainted() -> bool:
        taints = (kube.get(NODES, name).get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY]
        if len(kept) != len(taints):
            kube.patch(NODES, name, {"spec": {"taints": kept or None}})
            return False
        return True

    eventually(untainted, timeout=20, interval=0.2)


def _namespace(kube: Kube, made: list[Any], name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if create_if_absent(kube, NAMESPACES, body):
        made.insert(0, (NAMESPACES, name, None))


def _pod(name: str, ns: str, queue: str, scheduler: str, tag: str) -> dict[str, Any]:
    body = pod_manifest(name, ns, queue, gpus=1, scheduler_name=scheduler, memory="1Gi")
    body["spec"]["nodeSelector"] = {"direct-bind-test": tag}
    return body


def _gang(kube: Kube, ns: str, queue: str, scheduler: str, tag: str, real: bool) -> Any:
    """A batch/v1 Job of 2 pods, a gang of 2; its pods made by the controller-manager on the
    real server, as it would make them on the embedded one (which runs no Job controller)."""
    template = _pod("", ns, queue, scheduler, tag)
    del template["metadata"]["name"], template["metadata"]["namespace"]
    job = kube.create(
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "gang",
                "namespace": ns,
                "labels": {"kai.scheduler/queue": queue},
                "annotations": {"kai.scheduler/batch-min-member": "2"},
            },
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )
    if not real:  # the embedded server runs no Job controller here: its pods, as it would
        for i in range(2):
            body = _pod(f"gang-{i}", ns, queue, scheduler, tag)
            body["metadata"]["labels"]["job-name"] = "gang"
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "gang",
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ]
            kube.create(PODS, body)

    return job


def test_a_bindings_annotations_reach_the_pod(api: tuple[str, Kube], made: list[Any]) -> None:
    _, kube = api
    tag = uuid.uuid4().hex[:6]
    ns = f"binding-{tag}"
    _namespace(kube, made, ns)
    _node(kube, made, f"binding-{tag}-0", tag)
    _node(kube, made, f"binding-{tag}-1", tag)
    kube.create(PODS, _pod("p", ns, "q", f"nobody-{tag}", tag))
    node = f"binding-{tag}-0"
    annotations = {"pod-group-name": "pg-p", "received-resource-type": "Regular"}
    assert post_binding(kube, ns, "p", node, annotations) == ""
    pod = kube.get(PODS, "p", ns)
    assert pod["spec"]["nodeName"] == node
    assert {k: pod["metadata"]["annotations"].get(k) for k in annotations} == annotations
    # bound once: the same node again counts as done (a lost answer), another is refused
    assert post_binding(kube, ns, "p", node, annotations) == ""
    other = post_binding(kube, ns, "p", f"binding-{tag}-1", annotations)
    assert other.startswith("AlreadyBound") and node in other
    assert kube.get(PODS, "p", ns)["spec"]["nodeName"] == node


def test_direct_binds_each_pod_once_without_bind_requests(
    api: tuple[str, Kube], made: list[Any], request: pytest.FixtureRequest
) -> None:
    kubeconfig, kube = api
    real = "real" in request.node.name
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-direct-{tag}"
    ns = f"direct-{tag}"
    _namespace(kube, made, ns)
    queue = f"q-{tag}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    kube.create(
        QUEUES,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"resources": {r: unlimited for r in ("gpu", "cpu", "memory")}},
        },
    )
    made.append((QUEUES, queue, None))
    for i in range(2):
        _node(kube, made, f"direct-{tag}-{i}", tag, gpus=4)

    # every change of a pod's node, and every pod PATCH before it was bound
    moves: dict[str, list[str]] = {}
    pending_patches: list[str] = []
    lock = threading.Lock()
    watch = InformerSet(kube)
    pods = watch.add("pods", PODS, namespace=ns)

    def observe(etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        before = ((old or {}).get("spec") or {}).get("nodeName")
        with lock:
            if node and node != before:
                moves.setdefault(name, []).append(node)
            if old is not None and not node and not before:
                md, omd = pod["metadata"], old["metadata"]
                if md.get("annotations") != omd.get("annotations"):
                    pending_patches.append(name)

    pods.add_handler(observe)
    watch.start()
    assert watch.wait_synced(20)
    system = System(
        kubeconfig,
        SystemOptions(
            scheduler_name=scheduler,
            components=("scheduler", "binder", "podgrouper"),
            period=0.2,
            status_period=0.3,
            lease_duration=2.0,
            renew_period=0.5,
            retry_period=0.1,
            kubelet=False,
            bind_mode="direct",
        ),
    ).start()
    try:
        names = [f"whole-{i}" for i in range(4)]
        for name in names:
            kube.create(PODS, _pod(name, ns, queue, scheduler, tag))
        job = _gang(kube, ns, queue, scheduler, tag, real)

        def all_bound() -> list[dict[str, Any]] | None:
            items = kube.list(PODS, ns)["items"]
            ok = len(items) == 6 and all(p["spec"].get("nodeName") for p in items)
            return items if ok else None

        bound = eventually(all_bound, timeout=60, interval=0.2)
        group = f"pg-gang-{job['metadata']['uid']}"
        for pod in bound:
            md = pod["metadata"]
            expected = group if md["name"].startswith("gang") else f"pg-{md['name']}-{md['uid']}"
            assert md["annotations"]["pod-group-name"] == expected, md["name"]
            assert md["annotations"]["received-resource-type"] == "Regular"
            pg = kube.get(PODGROUPS, expected, ns)
            assert pg["metadata"]["annotations"][BY_OWNER_ANNOTATION] == "true"
        assert kube.list(BIND_REQUESTS, ns)["items"] == []
        eventually(lambda: len(moves) == 6, timeout=10)
        with lock:
            assert all(len(nodes) == 1 for nodes in moves.values()), moves
            assert pending_patches == [], pending_patches
        # 6 pods x 1 GPU on 2 x 4 GPUs: never over-committed
        per_node: dict[str, int] = {}
        for pod in bound:
            per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
        assert max(per_node.values()) <= 4
    finally:
        system.stop()
        watch.stop()
        with contextlib.suppress(ApiError):
            kube.delete(JOBS, "gang", ns, propagation_policy="Background")
