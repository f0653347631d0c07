"""Simulated nodes (registration, not-ready taint lifted once Ready) and the kubelet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from live_helpers import eventually

from kai.kube.client import ApiError, Kube
from kai.kube.informer import InformerSet
from kai.kube.resources import NODES, PODS
from kai.sim.kubelet import Kubelet
from kai.sim.nodes import NodeLifecycle, NodeShape, create_nodes
from kai.sim.workloads import pod_manifest


@pytest.fixture
def node_side(kube: Kube) -> Iterator[Kubelet]:
    informers = InformerSet(kube)
    nodes = informers.add("nodes", NODES)
    pods = informers.add("pods", PODS)
    lifecycle = NodeLifecycle(kube, nodes)
    informers.start()
    assert informers.wait_synced(10)
    kubelet = Kubelet(kube, pods, nodes).start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
        lifecycle.stop()
        informers.stop()


def test_nodes_register_tainted_then_become_ready(kube: Kube) -> None:
    # without the life-cycle controller a new node keeps the not-ready taint
    create_nodes(kube, 1, NodeShape(gpus=4), prefix="bare")
    bare = kube.get(NODES, "bare-00")
    assert [t["key"] for t in bare["spec"]["taints"]] == ["node.kubernetes.io/not-ready"]
    assert bare["metadata"]["labels"]["nvidia.com/gpu.count"] == "4"
    assert bare["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_lifecycle_and_kubelet(kube: Kube, node_side: Kubelet) -> None:
    names = create_nodes(kube, 2, NodeShape(gpus=8, gpu_memory_mib=40960))
    for name in names:
        node = eventually(lambda n=name: _ready_untainted(kube, n))
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.memory"] == "40960"
        assert labels["topology.kubernetes.io/zone"] == "zone-0"
    # a bound pod starts, and completes after its duration
    body = pod_manifest("short", "default", None, gpus=1, duration=0.3)
    kube.create(PODS, body)
    kube.bind("default", "short", names[0])
    eventually(lambda: kube.get(PODS, "short", "default")["status"].get("phase") == "Succeeded")
    # a pod without a duration keeps running; deleting it gracefully finishes the deletion
    kube.create(PODS, pod_manifest("long", "default", None, gpus=1))
    kube.bind("default", "long", names[1])
    eventually(lambda: kube.get(PODS, "long", "default")["status"].get("phase") == "Running")
    kube.delete(PODS, "long", "default")
    eventually(lambda: _gone(kube, "long"))
    assert node_side.started == 2 and node_side.completed == 1


def _ready_untainted(kube: Kube, name: str) -> dict | None:
    node = kube.get(NODES, name)
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node["status"].get("conditions") or []
    )
    return node if ready and not node["spec"].get("taints") else None


def _gone(kube: Kube, name: str) -> bool:
    try:
        kube.get(PODS, name, "default")
    except ApiError as exc:
        return exc.status == 404
    return False


def test_kubelet_admission_refuses_what_does_not_fit(kube: Kube, node_side: Kubelet) -> None:
    (name,) = create_nodes(kube, 1, NodeShape(gpus=2, cpu="8", max_pods=4), prefix="small")
    eventually(lambda: _ready_untainted(kube, name))

    def phase(pod: str) -> str | None:
        return kube.get(PODS, pod, "default")["status"].get("phase")

    for pod in ("g1", "g2"):
        kube.create(PODS, pod_manifest(pod, "default", None, gpus=1, cpu="1"))
        kube.bind("default", pod, name)
        eventually(lambda p=pod: phase(p) == "Running")
    # a third GPU: Failed as a kubelet does, with the reason and message it writes
    kube.create(PODS, pod_manifest("g3", "default", None, gpus=1, cpu="1"))
    kube.bind("default", "g3", name)
    eventually(lambda: phase("g3") == "Failed")
    status = kube.get(PODS, "g3", "default")["status"]
    assert status["reason"] == "OutOfnvidia.com/gpu"
    assert status["message"] == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 1, used: 2, capacity: 2"
    )
    # cpu (6 of 8 left) and the pod slots count as well
    kube.create(PODS, pod_manifest("big-cpu", "default", None, cpu="6500m"))
    kube.bind("default", "big-cpu", name)
    eventually(lambda: phase("big-cpu") == "Failed")
    assert kube.get(PODS, "big-cpu", "default")["status"]["reason"] == "OutOfcpu"
    kube.create(PODS, pod_manifest("c3", "default", None, cpu="1"))
    kube.bind("default", "c3", name)
    eventually(lambda: phase("c3") == "Running")
    kube.create(PODS, pod_manifest("c4", "default", None, cpu="1"))
    kube.bind("default", "c4", name)
    kube.create(PODS, pod_manifest("c5", "default", None, cpu="1"))
    kube.bind("default", "c5", name)
    eventually(lambda: phase("c5") == "Failed")  # 4 pod slots: g1, g2, c3, c4
    assert kube.get(PODS, "c5", "default")["status"]["reason"] == "OutOfpods"
    # a finished pod frees its room: the GPU of g1 goes to g4
    kube.delete(PODS, "g1", "default")
    eventually(lambda: _gone(kube, "g1"))
    kube.create(PODS, pod_manifest("g4", "default", None, gpus=1, cpu="1"))
    kube.bind("default", "g4", name)
    eventually(lambda: phase("g4") == "Running")
    assert node_side.rejected == 3


def test_reservation_pods_on_a_watch_of_their_own(kube: Kube) -> None:
    # the layout of kai.sim.system: workload pods on one watch, the reservation namespace on
    # another; a reservation pod still gets its GPU UUID, and it counts in the node's admission
    # next to the workload pods of the other watch
    from kai.kube.resources import NAMESPACES
    from kai.reconcilers.binder import GPU_INDEX_ANNOTATION
    from kai.reconcilers.snapshot_builder import RESERVATION_NAMESPACE

    kube.create(NAMESPACES, {"metadata": {"name": RESERVATION_NAMESPACE}})
    informers = InformerSet(kube)
    nodes = informers.add("nodes", NODES)
    pods = informers.add(
        "pods", PODS, field_selector=f"metadata.namespace!={RESERVATION_NAMESPACE}"
    )
    reservations = informers.add("reservation-pods", PODS, namespace=RESERVATION_NAMESPACE)
    lifecycle = NodeLifecycle(kube, nodes)
    informers.start()
    assert informers.wait_synced(10)
    kubelet = Kubelet(kube, pods, nodes, reservations=reservations).start()
    try:
        (name,) = create_nodes(kube, 1, NodeShape(gpus=2), prefix="split")
        eventually(lambda: _ready_untainted(kube, name))
        kube.create(PODS, pod_manifest("gpu-reservation-a", RESERVATION_NAMESPACE, None, gpus=1))
        kube.bind(RESERVATION_NAMESPACE, "gpu-reservation-a", name)
        reserved = eventually(
            lambda: (
                (pod := kube.get(PODS, "gpu-reservation-a", RESERVATION_NAMESPACE))["status"].get(
                    "phase"
                )
                == "Running"
                and pod
            )
        )
        assert reserved["metadata"]["annotations"][GPU_INDEX_ANNOTATION].startswith("GPU-")
        assert pods.get("gpu-reservation-a", RESERVATION_NAMESPACE) is None  # not on that watch
        for pod in ("w1", "w2"):
            kube.create(PODS, pod_manifest(pod, "default", None, gpus=1))
            kube.bind("default", pod, name)
        eventually(lambda: kube.get(PODS, "w1", "default")["status"].get("phase") == "Running")
        eventually(lambda: kube.get(PODS, "w2", "default")["status"].get("phase") == "Failed")
        assert kube.get(PODS, "w2", "default")["status"]["reason"] == "OutOfnvidia.com/gpu"
    finally:
        kubelet.stop()
        lifecycle.stop()
        informers.stop()
