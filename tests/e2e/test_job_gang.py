"""A batch Job gang through the whole system: the Job controller makes the pods, the
pod-grouper one PodGroup (minMember from ``kai.scheduler/batch-min-member``), the scheduler
places the gang, the binder binds it, the simulated kubelet runs the pods to completion and the
Job completes. The same test runs on the embedded API server (its workload controllers) and
unchanged on the real control plane (kube-controller-manager's Job controller)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.polling import eventually
from kai.kube.client import ApiError, Kube
from kai.kube.resources import JOBS, NAMESPACES, NODES, PODGROUPS, PODS, QUEUES
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.system import System, SystemOptions, bootstrap
from kai.sim.workloads import ensure_namespace
from kube_emulator import ApiServer


@pytest.fixture(params=["embedded", "real"])
def kubeconfig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "real":
        yield str(request.getfixturevalue("real_cluster").kubeconfig)
        return
    server = ApiServer(workload_controllers=True, bookmark_interval=0.2).start()
    try:
        yield str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    finally:
        server.stop()


def gang_job(name: str, ns: str, queue: str, nodes: list[str], size: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"kai.scheduler/queue": queue},
            "annotations": {"kai.scheduler/batch-min-member": str(size)},
        },
        "spec": {
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {"kai.scheduler/queue": queue},
                    "annotations": {"kai.sim/duration-seconds": "1"},
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "restartPolicy": "Never",
                    # only this test's nodes (a shared real cluster may hold other tests' ones)
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": nodes,
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_batch_job_gang_is_grouped_scheduled_bound_and_completes(kubeconfig: str) -> None:
    kube = Kube.from_kubeconfig(kubeconfig)
    tag = uuid.uuid4().hex[:6]
    ns, queue = f"gang-{tag}", f"gang-{tag}"
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    bootstrap(kube)
    nodes = create_nodes(kube, 2, NodeShape(gpus=8), prefix=f"gang-{tag}")
    kube.create(
        QUEUES,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}},
        },
    )
    ensure_namespace(kube, ns)
    options = SystemOptions(period=0.2, status_period=0.3, leader_election=False)
    system = System(kubeconfig, options).start()
    try:
        job = kube.create(JOBS, gang_job("train", ns, queue, nodes, size=3), ns)
        uid = job["metadata"]["uid"]
        group = eventually(
            lambda: kube.list(PODGROUPS, ns)["items"] and kube.list(PODGROUPS, ns)["items"][0],
            timeout=30,
        )
        assert group["metadata"]["name"] == f"pg-train-{uid}"
        assert group["spec"]["minMember"] == 3
        assert group["spec"]["queue"] == queue
        pods = eventually(
            lambda: (
                len(items := kube.list(PODS, ns)["items"]) == 3
                and all(p["spec"].get("nodeName") for p in items)
                and items
            ),
            timeout=60,
        )
        for pod in pods:
            md = pod["metadata"]
            assert md["ownerReferences"][0]["uid"] == uid
            assert md["labels"]["batch.kubernetes.io/job-name"] == "train"
            assert md["annotations"]["pod-group-name"] == group["metadata"]["name"]
        # 3 x 4 GPUs on 2 nodes x 8: the gang spans both nodes
        assert {p["spec"]["nodeName"] for p in pods} == set(nodes)
        done = eventually(
            lambda: (
                any(
                    c.get("type") == "Complete" and c.get("status") == "True"
                    for c in (kube.get(JOBS, "train", ns).get("status") or {}).get("conditions")
                    or []
                )
                and kube.get(JOBS, "train", ns)
            ),
            timeout=60,
        )
        assert done["status"]["succeeded"] == 3
        assert "failed" not in done["status"]
    finally:
        system.stop()
        with contextlib.suppress(ApiError):
            kube.delete(JOBS, "train", ns)
        kube.delete(NAMESPACES, ns)
        kube.delete(QUEUES, queue)
        for name in nodes:
            with contextlib.suppress(ApiError):
                kube.delete(NODES, name)
        kube.close()
