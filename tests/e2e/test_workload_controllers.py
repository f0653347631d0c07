"""The embedded API server's workload controllers against kube-controller-manager: the same
tests run on the embedded server (``workload_controllers=True``) and unchanged on the real
control plane (fixture ``real_cluster``; skipped where absent). There is no kubelet on either:
the tests set pod phases as one would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.polling import eventually
from kai.kube.client import Kube
from kai.kube.resources import JOBS, NAMESPACES, PODS, PVCS, Resource
from kube_emulator import ApiServer

DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
STATEFULSETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")
CONTAINERS = [{"name": "main", "image": "busybox:1.36"}]
TRACKING = "batch.kubernetes.io/job-tracking"


@pytest.fixture(scope="module", params=["embedded", "real"])
def kube(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kube]:
    if request.param == "real":
        kubeconfig = str(request.getfixturevalue("real_cluster").kubeconfig)
        client = Kube.from_kubeconfig(kubeconfig)
        yield client
        client.close()
        return
    server = ApiServer(workload_controllers=True).start()
    path: Path = server.write_kubeconfig(tmp_path_factory.mktemp("wc") / "kubeconfig")
    client = Kube.from_kubeconfig(str(path))
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = f"wc-{uuid.uuid4().hex[:8]}"
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, name)


def pods_of(kube: Kube, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
    items = kube.list(PODS, ns, label_selector=selector)["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def set_phase(kube: Kube, pod: dict[str, Any], phase: str, ready: bool = False) -> None:
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["conditions"] = [
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "PodScheduled", "status": "True"},
        ]
    md = pod["metadata"]
    kube.patch(PODS, md["name"], {"status": status}, md["namespace"], sub="status")


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return dict(cond)
    return None


def job(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            **spec,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "containers": CONTAINERS},
            },
        },
    }


def test_job_runs_parallelism_pods_until_completions_succeeded(kube: Kube, ns: str) -> None:
    created = kube.create(JOBS, job("train", ns, parallelism=2, completions=3), ns)
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {
        "matchLabels": {"batch.kubernetes.io/controller-uid": uid}
    }
    assert created["spec"]["backoffLimit"] == 6
    assert created["spec"]["completionMode"] == "NonIndexed"
    first = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    for pod in first:
        md = pod["metadata"]
        assert md["name"].startswith("train-") and len(md["name"]) == len("train-") + 5
        assert md["labels"] == {
            "app": "train",
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": "train",
            "controller-uid": uid,
            "job-name": "train",
        }
        assert md["ownerReferences"] == [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert md["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        set_phase(kube, pod, "Succeeded")
    eventually(lambda: len(pods_of(kube, ns)) == 3)
    third = [
        p
        for p in pods_of(kube, ns)
        if p["metadata"]["name"] not in {q["metadata"]["name"] for q in first}
    ]
    assert len(third) == 1
    set_phase(kube, third[0], "Succeeded")
    done = eventually(
        lambda: condition(kube.get(JOBS, "train", ns), "Complete") and kube.get(JOBS, "train", ns),
        timeout=30,
    )
    assert done["status"]["succeeded"] == 3
    assert "active" not in done["status"]
    assert done["status"].get("completionTime")
    assert condition(done, "SuccessCriteriaMet")
    eventually(lambda: all(not p["metadata"].get("finalizers") for p in pods_of(kube, ns)))


def test_deleting_a_job_deletes_its_pods_finalizer_and_all(kube: Kube, ns: str) -> None:
    """The tracking finalizer does not keep a deleted Job's pods Terminating: the Job
    controller drops it from the pods of a Job that is gone (as kube-controller-manager does),
    whatever the pods' state (pending, running, bound to a node or not)."""
    kube.create(JOBS, job("gone", ns, parallelism=3, completions=3), ns)
    pods = eventually(lambda: len(pods_of(kube, ns)) == 3 and pods_of(kube, ns))
    set_phase(kube, pods[0], "Running", ready=True)
    assert all(p["metadata"]["finalizers"] == [TRACKING] for p in pods)
    kube.delete(JOBS, "gone", ns, propagation_policy="Background")
    eventually(lambda: not pods_of(kube, ns), timeout=45)


def test_indexed_job_pods_carry_their_completion_index(kube: Kube, ns: str) -> None:
    kube.create(JOBS, job("idx", ns, parallelism=2, completions=2, completionMode="Indexed"), ns)
    pods = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    by_index = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods
    }
    assert sorted(by_index) == ["0", "1"]
    for index, pod in by_index.items():
        assert pod["metadata"]["name"].startswith(f"idx-{index}-")
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"idx-{index}"
        set_phase(kube, pod, "Succeeded")
    done = eventually(
        lambda: condition(kube.get(JOBS, "idx", ns), "Complete") and kube.get(JOBS, "idx", ns),
        timeout=30,
    )
    assert done["status"]["completedIndexes"] == "0,1"  # "0-2" from three on


def test_job_fails_once_its_backoff_limit_is_exceeded(kube: Kube, ns: str) -> None:
    kube.create(JOBS, job("flaky", ns, parallelism=1, completions=1, backoffLimit=0), ns)
    pod = eventually(lambda: pods_of(kube, ns) and pods_of(kube, ns)[0])
    set_phase(kube, pod, "Failed")
    failed = eventually(lambda: condition(kube.get(JOBS, "flaky", ns), "Failed"), timeout=30)
    assert failed["reason"] == "BackoffLimitExceeded"
    assert kube.get(JOBS, "flaky", ns)["status"]["failed"] == 1


def test_deployment_makes_a_replicaset_per_template_and_scales_it(kube: Kube, ns: str) -> None:
    kube.create(
        DEPLOYMENTS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": CONTAINERS},
                },
            },
        },
        ns,
    )
    rs = eventually(
        lambda: kube.list(REPLICASETS, ns)["items"] and kube.list(REPLICASETS, ns)["items"][0]
    )
    digest = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{digest}"
    assert len(digest) >= 8 and all(c in "bcdfghjklmnpqrstvwxz2456789" for c in digest)
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": digest}
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    pods = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"web-{digest}-")
        assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": digest}
        assert pod["metadata"]["ownerReferences"][0]["name"] == f"web-{digest}"
    kube.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 3}}, ns)
    eventually(lambda: len(pods_of(kube, ns)) == 3)


def test_replicaset_replaces_a_deleted_pod(kube: Kube, ns: str) -> None:
    kube.create(
        REPLICASETS,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "rs", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "rs"}},
                "template": {
                    "metadata": {"labels": {"app": "rs"}},
                    "spec": {"containers": CONTAINERS},
                },
            },
        },
        ns,
    )
    pods = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    kube.delete(PODS, pods[0]["metadata"]["name"], ns)
    names = {p["metadata"]["name"] for p in pods}
    eventually(
        lambda: (
            len(pods_of(kube, ns)) == 2
            and {p["metadata"]["name"] for p in pods_of(kube, ns)} != names
        )
    )


def test_statefulset_creates_ordinals_in_order(kube: Kube, ns: str) -> None:
    kube.create(
        STATEFULSETS,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": CONTAINERS},
                },
            },
        },
        ns,
    )
    first = eventually(lambda: pods_of(kube, ns) and pods_of(kube, ns))
    assert [p["metadata"]["name"] for p in first] == ["db-0"]
    pod = first[0]
    labels = pod["metadata"]["labels"]
    assert labels["apps.kubernetes.io/pod-index"] == "0"
    assert labels["statefulset.kubernetes.io/pod-name"] == "db-0"
    assert labels["controller-revision-hash"].startswith("db-")
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("db-0", "db")
    set_phase(kube, pod, "Running", ready=False)
    with pytest.raises(AssertionError):  # OrderedReady: db-1 waits for db-0 to be Ready
        eventually(lambda: len(pods_of(kube, ns)) == 2, timeout=2)
    set_phase(kube, pod, "Running", ready=True)
    pods = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    assert [p["metadata"]["name"] for p in pods] == ["db-0", "db-1"]


def test_statefulset_volume_claim_templates_make_one_claim_per_ordinal(kube: Kube, ns: str) -> None:
    claim_spec = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    kube.create(
        STATEFULSETS,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {
                "replicas": 2,
                "podManagementPolicy": "Parallel",
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {
                        "containers": CONTAINERS,
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {
                            "name": "data",
                            "labels": {"tier": "storage"},
                            "annotations": {"note": "x"},
                        },
                        "spec": claim_spec,
                    },
                    {
                        "metadata": {"name": "logs"},
                        "spec": {**claim_spec, "storageClassName": None},
                    },
                ],
            },
        },
        ns,
    )
    names = ["data-db-0", "data-db-1", "logs-db-0", "logs-db-1"]

    def claims() -> list[dict[str, Any]]:
        items = kube.list(PVCS, ns)["items"]
        return sorted(items, key=lambda c: c["metadata"]["name"])

    found = eventually(lambda: [c["metadata"]["name"] for c in claims()] == names and claims())
    data = found[0]
    assert data["metadata"]["labels"] == {"app": "db", "tier": "storage"}
    assert data["metadata"]["annotations"]["note"] == "x"
    assert not data["metadata"].get("ownerReferences")  # retention policy Retain
    assert data["spec"]["storageClassName"] == "fast"
    assert data["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert data["spec"]["volumeMode"] == "Filesystem"
    assert found[2]["metadata"]["labels"] == {"app": "db"}
    assert eventually(lambda: all(c.get("status", {}).get("phase") == "Pending" for c in claims()))
    pods = eventually(lambda: len(pods_of(kube, ns)) == 2 and pods_of(kube, ns))
    volumes = [v for v in pods[1]["spec"]["volumes"] if not v["name"].startswith("kube-api")]
    # the claim volumes come first; among them kube-controller-manager's order is a Go map's
    assert sorted(volumes[:2], key=lambda v: v["name"]) == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-1"}},
        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-db-1"}},
    ]
    assert volumes[2] == {"name": "scratch", "emptyDir": {}}
    # scale down: the pod goes, its claims stay
    kube.patch(STATEFULSETS, "db", {"spec": {"replicas": 1}}, ns)
    eventually(lambda: [p["metadata"]["name"] for p in pods_of(kube, ns)] == ["db-0"])
    assert [c["metadata"]["name"] for c in claims()] == names
