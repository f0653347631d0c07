"""Workload kinds end to end, on the embedded API server and on a real one: a PyTorchJob, a
RayCluster, a JobSet and an Argo Workflow fan-out go through grouping, scheduling and binding.

The operators' CRDs are minimal ones written from their upstream shape (group, names, scope,
an open schema); the tests create the pods as each operator would (names, labels, owner
references). On the real server the Job controller creates the JobSet's pods itself.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import queue
from live_helpers import eventually

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "grouping"))

from workloads_fixtures import (
    argo_pod,
    jobset,
    pytorchjob,
    ray_pods,
    raycluster_spec,
    ref,
    training_pods,
    workflow,
)

from kai.kube.client import ApiError, Kube, Resource
from kai.kube.resources import CRDS, JOBS, NAMESPACES, PODGROUPS, PODS, QUEUES
from kai.kube.writes import create_if_absent
from kai.sim.system import System, SystemOptions, bootstrap, wait_for_crds

PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", True, "PyTorchJob")
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters", True, "RayCluster")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")
WORKFLOWS = Resource("argoproj.io", "v1alpha1", "workflows", True, "Workflow")
QUEUE = "wk-team"
NODES = 3
GPUS = 4


def crd(res: Resource, short: list[str] | None = None) -> dict[str, Any]:
    """A CRD of the operator's group and names, with an open schema and a status subresource."""
    singular = res.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{res.plural}.{res.group}"},
        "spec": {
            "group": res.group,
            "names": {
                "kind": res.kind,
                "listKind": f"{res.kind}List",
                "plural": res.plural,
                "singular": singular,
                **({"shortNames": short} if short else {}),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": res.version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


@dataclass
class Live:
    kind: str  # embedded or real
    kube: Kube
    ns: str

    def create(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body`` in the test's namespace (its made-up uid dropped)."""
        body = dict(body)
        md = {k: v for k, v in body["metadata"].items() if k != "uid"}
        md["namespace"] = self.ns
        body["metadata"] = md
        created = self.kube.create(res, body)
        created.setdefault("apiVersion", body["apiVersion"])
        created.setdefault("kind", body["kind"])
        return created

    def create_pod(self, pod: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
        pod = dict(pod)
        pod["metadata"] = {**pod["metadata"], "ownerReferences": [ref(owner)]}
        spec = pod["spec"]
        for container in spec["containers"]:
            container["resources"] = {
                "requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"},
            }
        pod["metadata"].setdefault("labels", {})["kai.scheduler/queue"] = QUEUE
        return self.create(PODS, pod)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.kube.list(PODS, self.ns)["items"])

    def podgroup_of(self, name: str) -> dict[str, Any]:
        pg_name = eventually(
            lambda: (self.kube.get(PODS, name, self.ns)["metadata"].get("annotations") or {}).get(
                "pod-group-name"
            ),
            timeout=30,
        )
        return self.kube.get(PODGROUPS, pg_name, self.ns)

    def all_bound(self, count: int) -> list[dict[str, Any]]:
        return eventually(
            lambda: (
                pods
                if len(pods := self.pods()) == count
                and all(p["spec"].get("nodeName") for p in pods)
                else None
            ),
            timeout=60,
        )

    def none_bound_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert not any(p["spec"].get("nodeName") for p in self.pods()), "a gang started early"
            time.sleep(0.2)


def _embedded(tmp_path: Path) -> Iterator[tuple[Kube, System]]:
    from kai.sim.nodes import NodeShape, create_nodes
    from kube_emulator import ApiServer

    server = ApiServer(bookmark_interval=0.2).start()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    kube = Kube.from_kubeconfig(kubeconfig)
    try:
        bootstrap(kube)
        create_nodes(kube, NODES, NodeShape(gpus=GPUS), prefix="wk-node")
        system = System(kubeconfig, _options(("scheduler", "binder", "podgrouper", "nodes")))
        yield kube, system
    finally:
        kube.close()
        server.stop()


def _options(components: tuple[str, ...]) -> SystemOptions:
    return SystemOptions(
        period=0.2,
        status_period=0.3,
        lease_duration=2.0,
        renew_period=0.5,
        retry_period=0.1,
        components=components,
    )


@pytest.fixture(params=["embedded", "real"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    if request.param == "embedded":
        gen = _embedded(tmp_path)
        kube, system = next(gen)
    else:
        from kubernetes import config as kconfig

        from helpers.real_cluster import add_fake_nodes

        cluster = request.getfixturevalue("real_cluster")
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        bootstrap(kube)
        api = kconfig.new_client_from_config(str(cluster.kubeconfig))
        add_fake_nodes(api, [f"wk-node-{i}" for i in range(NODES)], gpus=GPUS)
        api.close()
        system = System(str(cluster.kubeconfig), _options(("scheduler", "binder", "podgrouper")))
        gen = None
    crds = [crd(PYTORCHJOBS), crd(RAYCLUSTERS), crd(JOBSETS), crd(WORKFLOWS, ["wf"])]
    for c in crds:
        create_if_absent(kube, CRDS, c)
    wait_for_crds(kube, [c["metadata"]["name"] for c in crds])
    create_if_absent(kube, QUEUES, queue(QUEUE))
    ns = f"wk-{uuid.uuid4().hex[:8]}"
    create_if_absent(
        kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    system.start()
    try:
        yield Live(request.param, kube, ns)
    finally:
        system.stop()
        if gen is not None:
            with contextlib.suppress(StopIteration):
                next(gen)
        else:  # leave the session's real cluster free: no kubelet finishes these pods
            for pod in kube.list(PODS, ns)["items"]:
                with contextlib.suppress(ApiError):
                    kube.delete(PODS, pod["metadata"]["name"], ns, grace_period_seconds=0)
            kube.delete(NAMESPACES, ns)
            kube.close()


def test_pytorchjob_gang_with_subgroups(live: Live) -> None:
    job = live.create(PYTORCHJOBS, pytorchjob("bert", 1, 3, labels={"kai.scheduler/queue": QUEUE}))
    master = training_pods(job, "master", 1)
    workers = training_pods(job, "worker", 3)
    for pod in [*master, *workers[:2]]:
        live.create_pod(pod, job)
    pg = live.podgroup_of("bert-master-0")
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["queue"] == QUEUE
    assert {s["name"]: s["minMember"] for s in pg["spec"]["subGroups"]} == {
        "master": 1,
        "worker": 3,
    }
    live.none_bound_for(2.0)  # 3 of 4: the gang waits
    live.create_pod(workers[2], job)
    pods = live.all_bound(4)
    subgroups = {
        p["metadata"]["name"]: p["metadata"]["labels"].get("kai.scheduler/subgroup-name")
        for p in pods
    }
    assert subgroups["bert-master-0"] == "master" and subgroups["bert-worker-2"] == "worker"


def test_raycluster_head_and_workers(live: Live) -> None:
    spec = raycluster_spec([{"groupName": "gpu", "replicas": 2, "minReplicas": 2}])
    cluster = live.create(
        RAYCLUSTERS,
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "rc", "labels": {"kai.scheduler/queue": QUEUE}},
            "spec": spec,
        },
    )
    for pod in [*ray_pods(cluster, "headgroup", 1), *ray_pods(cluster, "gpu", 2)]:
        live.create_pod(pod, cluster)
    pods = live.all_bound(3)
    pg = live.podgroup_of(pods[0]["metadata"]["name"])
    assert pg["spec"]["minMember"] == 3
    assert {s["name"] for s in pg["spec"]["subGroups"]} == {"head", "gpu"}
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in pods} == {
        pg["metadata"]["name"]
    }


def test_jobset_replicated_jobs(live: Live) -> None:
    js_body, jobs = jobset("train", [("workers", 2, 2)], labels={"kai.scheduler/queue": QUEUE})
    js = live.create(JOBSETS, js_body)
    created_jobs = []
    for job in jobs["workers"]:
        labels = job["metadata"]["labels"]
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job["metadata"]["name"],
                "labels": labels,
                "ownerReferences": [ref(js)],
            },
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"labels": {**labels, "kai.scheduler/queue": QUEUE}},
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {
                                    "requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ],
                    },
                },
            },
        }
        created_jobs.append(live.create(JOBS, body))
    if live.kind == "embedded" and not _pods_appear(live, 3.0):
        # no Job controller here: create the pods as it would
        from workloads_fixtures import jobset_pod

        for job in created_jobs:
            for index in range(2):
                pod = jobset_pod(
                    {**job, "metadata": {**job["metadata"], "labels": job["metadata"]["labels"]}},
                    index,
                )
                live.create_pod(pod, job)
    pods = live.all_bound(4)
    pg = live.podgroup_of(pods[0]["metadata"]["name"])
    assert pg["spec"]["minSubGroup"] == 1
    subs = {s["name"]: s for s in pg["spec"]["subGroups"]}
    assert subs["workers-replica-1"]["minMember"] == 2
    assert {p["metadata"]["labels"]["kai.scheduler/subgroup-name"] for p in pods} == {
        "workers-replica-0",
        "workers-replica-1",
    }


def _pods_appear(live: Live, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if live.pods():
            return True
        time.sleep(0.2)
    return False


def test_argo_fan_out_is_one_gang(live: Live) -> None:
    train = {
        "name": "train",
        "metadata": {"annotations": {"kai.scheduler/gang-fan-out": "true"}},
        "container": {"image": "trainer:1", "args": ["{{item}}"]},
    }
    main = {
        "name": "main",
        "steps": [[{"name": "shard", "template": "train", "withItems": ["a", "b", "c", "d"]}]],
    }
    wf = live.create(
        WORKFLOWS,
        workflow(
            "sweep",
            [main, train],
            labels={"kai.scheduler/queue": QUEUE, "priorityClassName": "build"},
        ),
    )
    pods = [
        argo_pod(wf, train, f"sweep[0].shard({i}:{'abcd'[i]})", f"{3000 + i}") for i in range(4)
    ]
    for pod in pods[:3]:
        live.create_pod(pod, wf)
    pg = live.podgroup_of(pods[0]["metadata"]["name"])
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["priorityClassName"] == "build"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Workflow"
    live.none_bound_for(2.0)  # 3 of the 4 items: the fan-out waits
    live.create_pod(pods[3], wf)
    bound = live.all_bound(4)
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in bound} == {
        pg["metadata"]["name"]
    }
