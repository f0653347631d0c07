"""The minimal pod-grouper: bare pods, batch/v1 Jobs, queue/priority rules, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from live_helpers import eventually

from kai.kube.client import ApiError, Kube, Resource
from kai.kube.events import EventRecorder
from kai.kube.informer import InformerSet
from kai.kube.resources import CRDS, EVENTS, JOBS, NAMESPACES, PODGROUPS, PODS, QUEUES
from kai.reconcilers.group_by_owner import BY_OWNER_ANNOTATION, group_of
from kai.reconcilers.podgrouper import PodGrouper
from kai.sim.system import bootstrap, wait_for_crds
from kai.sim.workloads import QUEUE_LABEL, pod_manifest, submit_job


@pytest.fixture
def grouper(kube: Kube) -> Iterator[PodGrouper]:
    bootstrap(kube)
    informers = InformerSet(kube)
    pods = informers.add("pods", PODS, field_selector="spec.schedulerName=kai-scheduler")
    jobs = informers.add("jobs", JOBS)
    pgs = informers.add("podgroups", PODGROUPS)
    queues = informers.add("queues", QUEUES)
    recorder = EventRecorder(kube, "kai-podgrouper").start()
    informers.start()
    assert informers.wait_synced(10)
    g = PodGrouper(kube, pods, jobs, pgs, recorder, workers=2, queues=queues).start()
    try:
        yield g
    finally:
        g.stop()
        recorder.stop()
        informers.stop()


def _pg_of(kube: Kube, name: str) -> str | None:
    return _pg_of_in(kube, name, "default")


def test_bare_pod_gets_its_own_podgroup(kube: Kube, grouper: PodGrouper) -> None:
    body = pod_manifest("solo", "default", "team-a", gpus=1, priority_class="build")
    body["metadata"]["labels"]["kai.scheduler/preemptibility"] = "preemptible"
    created = kube.create(PODS, body)
    pg_name = eventually(lambda: _pg_of(kube, "solo"))
    assert pg_name == f"pg-solo-{created['metadata']['uid']}"
    pg = kube.get(PODGROUPS, pg_name, "default")
    assert pg["spec"]["queue"] == "team-a"
    assert pg["spec"]["minMember"] == 1
    assert pg["spec"]["priorityClassName"] == "build"
    assert pg["spec"]["preemptibility"] == "preemptible"
    assert pg["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]


def test_defaults_queue_and_priority(kube: Kube, grouper: PodGrouper) -> None:
    kube.create(PODS, pod_manifest("plain", "default", None))
    pg = kube.get(PODGROUPS, eventually(lambda: _pg_of(kube, "plain")), "default")
    assert pg["spec"]["queue"] == "default-queue"
    assert pg["spec"]["priorityClassName"] == "train"
    assert "preemptibility" not in pg["spec"]


def test_other_schedulers_pods_and_user_groups_are_left_alone(
    kube: Kube, grouper: PodGrouper
) -> None:
    kube.create(PODS, pod_manifest("theirs", "default", "q", scheduler_name="default-scheduler"))
    kube.create(
        PODS, pod_manifest("mine", "default", "q", annotations={"pod-group-name": "my-own"})
    )
    kube.create(PODS, pod_manifest("marker", "default", "q"))
    eventually(lambda: _pg_of(kube, "marker"))
    assert _pg_of(kube, "theirs") is None
    assert _pg_of(kube, "mine") == "my-own"
    names = {p["metadata"]["name"] for p in kube.list(PODGROUPS, "default")["items"]}
    assert not any("theirs" in n or "mine" in n for n in names)


def test_one_podgroup_per_job_with_batch_min_member(kube: Kube, grouper: PodGrouper) -> None:
    pods = submit_job(kube, "gang", "default", "team-b", pods=3, min_member=3)
    job_uid = kube.get(JOBS, "gang", "default")["metadata"]["uid"]
    for name in pods:
        assert eventually(lambda n=name: _pg_of(kube, n)) == f"pg-gang-{job_uid}"
    pg = kube.get(PODGROUPS, f"pg-gang-{job_uid}", "default")
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "team-b"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert (
        len(
            [p for p in kube.list(PODGROUPS, "default")["items"] if "gang" in p["metadata"]["name"]]
        )
        == 1
    )


def test_malformed_workload_gets_an_event_and_no_podgroup(kube: Kube, grouper: PodGrouper) -> None:
    body = pod_manifest("odd", "default", "q")
    body["metadata"]["labels"]["kai.scheduler/preemptibility"] = "sometimes"
    kube.create(PODS, body)
    event = eventually(
        lambda: next(
            (
                e
                for e in kube.list(EVENTS, "default")["items"]
                if e["involvedObject"]["name"] == "odd" and e["reason"] == "PodGrouperWarning"
            ),
            None,
        )
    )
    assert "kai.scheduler/preemptibility" in event["message"]
    assert _pg_of(kube, "odd") is None
    # the grouper keeps working for everyone else
    kube.create(PODS, pod_manifest("fine", "default", "q"))
    eventually(lambda: _pg_of(kube, "fine"))


def test_namespace_bound_by_a_queue_tree_gives_the_queue(kube: Kube, grouper: PodGrouper) -> None:
    """A QueueTree leaf's namespaces (recorded on its Queue by kai controller) pick the queue of
    a pod without a queue label; an explicit label still wins."""
    kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-nlp"}}
    )
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    kube.create(
        QUEUES,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {
                "name": "nlp",
                "annotations": {"gitops.kai.scheduler/namespaces": "team-nlp,nlp-dev"},
            },
            "spec": {"resources": {r: unlimited for r in ("gpu", "cpu", "memory")}},
        },
    )
    eventually(lambda: grouper.queues is not None and grouper.queues.get("nlp"))
    kube.create(PODS, pod_manifest("unlabelled", "team-nlp", None))
    kube.create(PODS, pod_manifest("labelled", "team-nlp", "other"))
    unlabelled = eventually(lambda: _pg_of_in(kube, "unlabelled", "team-nlp"))
    labelled = eventually(lambda: _pg_of_in(kube, "labelled", "team-nlp"))
    assert kube.get(PODGROUPS, unlabelled, "team-nlp")["spec"]["queue"] == "nlp"
    assert kube.get(PODGROUPS, labelled, "team-nlp")["spec"]["queue"] == "other"
    # a namespace nobody binds still goes to default-queue
    kube.create(PODS, pod_manifest("elsewhere", "default", None))
    pg = eventually(lambda: _pg_of(kube, "elsewhere"))
    assert kube.get(PODGROUPS, pg, "default")["spec"]["queue"] == "default-queue"


def _pg_of_in(kube: Kube, name: str, namespace: str) -> str | None:
    """The pod's PodGroup as the scheduler finds it: the ``pod-group-name`` annotation, else
    the PodGroup of its owner marked pods-by-owner (the pod-grouper leaves such pods alone)."""
    pod = kube.get(PODS, name, namespace)

    def podgroup(pg_name: str) -> dict[str, Any] | None:
        try:
            return kube.get(PODGROUPS, pg_name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    return group_of(pod, podgroup)


def _annotation(kube: Kube, name: str) -> str | None:
    pod = kube.get(PODS, name, "default")
    return (pod["metadata"].get("annotations") or {}).get("pod-group-name")


def test_pods_grouped_by_owner_are_not_patched(kube: Kube, grouper: PodGrouper) -> None:
    """A bare pod and a Job's pods: their PodGroup is marked pods-by-owner and the pods get no
    ``pod-group-name`` PATCH (the scheduler finds the group and writes it in the Binding); a pod
    of an unknown owner kind keeps the annotation, and its PodGroup is not marked."""
    solo = kube.create(PODS, pod_manifest("by-owner", "default", "q", gpus=1))
    pods = submit_job(kube, "by-owner-job", "default", "q", pods=2, min_member=2)
    job_uid = kube.get(JOBS, "by-owner-job", "default")["metadata"]["uid"]
    solo_pg = eventually(lambda: _pg_of(kube, "by-owner"))
    assert solo_pg == f"pg-by-owner-{solo['metadata']['uid']}"
    for name in pods:
        assert eventually(lambda n=name: _pg_of(kube, n)) == f"pg-by-owner-job-{job_uid}"
    for pg_name in (solo_pg, f"pg-by-owner-job-{job_uid}"):
        pg = kube.get(PODGROUPS, pg_name, "default")
        assert pg["metadata"]["annotations"][BY_OWNER_ANNOTATION] == "true"
    time.sleep(0.5)
    for name in ("by-owner", *pods):
        assert _annotation(kube, name) is None
        assert kube.get(PODS, name, "default")["metadata"].get("generation", 1) == 1
    frob = _create(
        kube,
        Resource("", "v1", "configmaps", True, "ConfigMap"),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm-owner", "namespace": "default"},
        },
    )
    kube.create(PODS, _owned_pod("cm-owned", frob))
    named = eventually(lambda: _annotation(kube, "cm-owned"))
    pg = kube.get(PODGROUPS, named, "default")
    assert BY_OWNER_ANNOTATION not in (pg["metadata"].get("annotations") or {})


def _owned_pod(name: str, owner: dict[str, Any], **kw: Any) -> dict[str, Any]:
    body = pod_manifest(name, "default", "q", **kw)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    return body


def _create(kube: Kube, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
    created = kube.create(res, body)
    created.setdefault("apiVersion", body["apiVersion"])
    created.setdefault("kind", body["kind"])
    return created


def test_unknown_owner_kind_one_group_and_a_warning(kube: Kube, grouper: PodGrouper) -> None:
    frobs = Resource("example.com", "v1", "frobnicators", True, "Frobnicator")
    kube.create(
        CRDS,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "frobnicators.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Frobnicator", "plural": "frobnicators", "singular": "frob"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        },
    )
    wait_for_crds(kube, ["frobnicators.example.com"])
    frob = _create(
        kube,
        frobs,
        {
            "apiVersion": "example.com/v1",
            "kind": "Frobnicator",
            "metadata": {"name": "frob", "namespace": "default", "labels": {QUEUE_LABEL: "fq"}},
            "spec": {"workers": 3},
        },
    )
    for i in range(3):
        kube.create(PODS, _owned_pod(f"frob-{i}", frob))
    names = {eventually(lambda i=i: _pg_of(kube, f"frob-{i}")) for i in range(3)}
    assert names == {f"pg-frob-{frob['metadata']['uid']}"}
    pg = kube.get(PODGROUPS, names.pop(), "default")
    assert pg["spec"]["queue"] == "fq" and pg["spec"]["minMember"] == 1
    event = eventually(
        lambda: next(
            (
                e
                for e in kube.list(EVENTS, "default")["items"]
                if e["reason"] == "PodGrouperUnknownKind"
            ),
            None,
        )
    )
    assert event["involvedObject"]["kind"] == "Frobnicator"
    assert "example.com/v1/Frobnicator" in event["message"] and "no gang" in event["message"]


def test_owned_pods_keep_their_own_podgroup_and_skip_annotation(
    kube: Kube, grouper: PodGrouper
) -> None:
    job = _create(
        kube,
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "mine", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        },
    )
    kube.create(PODS, _owned_pod("mine-a", job, annotations={"pod-group-name": "user-pg"}))
    skipped = _create(
        kube,
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "external",
                "namespace": "default",
                "annotations": {"kai.scheduler/skip-podgrouper": "true"},
            },
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        },
    )
    kube.create(PODS, _owned_pod("external-a", skipped))
    kube.create(PODS, _owned_pod("mine-b", job))  # grouped: proves the grouper has run
    assert eventually(lambda: _pg_of(kube, "mine-b")) == f"pg-mine-{job['metadata']['uid']}"
    time.sleep(0.5)
    assert _pg_of(kube, "mine-a") == "user-pg"
    assert _pg_of(kube, "external-a") is None


def test_deployment_owner_read_through_the_api(kube: Kube, grouper: PodGrouper) -> None:
    deployments = Resource("apps", "v1", "deployments", True, "Deployment")
    replicasets = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
    selector = {"matchLabels": {"app": "web"}}
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    dep = _create(
        kube,
        deployments,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {QUEUE_LABEL: "srv"}},
            "spec": {"selector": selector, "template": template},
        },
    )
    rs_body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-5d8f", "namespace": "default"},
        "spec": {"selector": selector, "template": template},
    }
    rs_body["metadata"]["ownerReferences"] = _owned_pod("x", dep)["metadata"]["ownerReferences"]
    rs = _create(kube, replicasets, rs_body)
    created = kube.create(PODS, _owned_pod("web-5d8f-abcde", rs))
    pg_name = eventually(lambda: _pg_of(kube, "web-5d8f-abcde"))
    assert pg_name == f"pg-web-5d8f-abcde-{created['metadata']['uid']}"
    pg = kube.get(PODGROUPS, pg_name, "default")
    assert pg["spec"]["priorityClassName"] == "inference" and pg["spec"]["queue"] == "srv"
