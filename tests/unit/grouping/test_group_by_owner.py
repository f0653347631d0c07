"""Pods found in their PodGroup from their owner (kai.reconcilers.group_by_owner), and which
plans the pod-grouper marks so (podgrouper.grouped_by_owner)."""

from __future__ import annotations

from typing import Any

from kai.reconcilers.group_by_owner import (
    BY_OWNER_ANNOTATION,
    derived_group,
    group_of,
    owner_podgroup_name,
)
from kai.reconcilers.grouping import Chain, plan_for
from kai.reconcilers.grouping.base import NODE_POOL_LABEL, Settings, manifest
from kai.reconcilers.podgrouper import grouped_by_owner


def _obj(kind: str, name: str, uid: str, api: str = "v1", **md: Any) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": uid, **md},
    }


def _owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def _pg(name: str, owner_uid: str, marked: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {BY_OWNER_ANNOTATION: "true"} if marked else {},
            "ownerReferences": [{"uid": owner_uid}],
        }
    }


def _lookup(*pgs: dict[str, Any]) -> Any:
    by_name = {pg["metadata"]["name"]: pg for pg in pgs}
    return by_name.get


def test_a_bare_pod_and_a_jobs_pod_find_their_marked_podgroup() -> None:
    pod = _obj("Pod", "solo", "p1")
    assert derived_group(pod, _lookup(_pg("pg-solo-p1", "p1"))) == "pg-solo-p1"
    job = _obj("Job", "train", "j1", "batch/v1")
    member = _owned_by(_obj("Pod", "train-0", "p2"), job)
    assert derived_group(member, _lookup(_pg("pg-train-j1", "j1"))) == "pg-train-j1"


def test_only_a_marked_podgroup_of_that_owner_is_derived() -> None:
    job = _obj("Job", "train", "j1", "batch/v1")
    member = _owned_by(_obj("Pod", "train-0", "p2"), job)
    assert derived_group(member, _lookup()) is None  # not made yet: waits for the pod-grouper
    assert derived_group(member, _lookup(_pg("pg-train-j1", "j1", marked=False))) is None
    assert derived_group(member, _lookup(_pg("pg-train-j1", "someone-else"))) is None


def test_the_annotation_wins() -> None:
    pod = _obj("Pod", "solo", "p1", annotations={"pod-group-name": "mine"})
    assert group_of(pod, _lookup(_pg("pg-solo-p1", "p1"))) == "mine"
    assert group_of(_obj("Pod", "solo", "p1"), _lookup(_pg("pg-solo-p1", "p1"))) == "pg-solo-p1"


def _marked(pod: dict[str, Any], owners: list[dict[str, Any]]) -> bool:
    chain = Chain(pod, owners)
    plan = plan_for(chain)
    desired = manifest(chain, plan, Settings())
    return grouped_by_owner(chain, plan, desired, NODE_POOL_LABEL)


def test_the_pod_grouper_marks_only_groups_that_follow_from_the_owner() -> None:
    assert _marked(_obj("Pod", "solo", "p1", labels={"kai.scheduler/queue": "q"}), [])
    job = _obj("Job", "train", "j1", "batch/v1")
    assert _marked(_owned_by(_obj("Pod", "train-0", "p2"), job), [job])
    rs = _obj("ReplicaSet", "rs", "r1", "apps/v1")
    assert _marked(_owned_by(_obj("Pod", "rs-x", "p3"), rs), [rs])
    # a Deployment's replica: one PodGroup per pod, owned by the pod
    dep = _obj("Deployment", "web", "d1", "apps/v1")
    rs2 = _owned_by(_obj("ReplicaSet", "web-5d", "r2", "apps/v1"), dep)
    assert _marked(_owned_by(_obj("Pod", "web-5d-x", "p4"), rs2), [rs2, dep])
    # an owner kind no grouper knows: one PodGroup per owner, but nothing says all its pods
    # belong there: annotated
    frob = _obj("Frobnicator", "f", "f1", "example.com/v1")
    assert not _marked(_owned_by(_obj("Pod", "f-0", "p5"), frob), [frob])
    # a Job under a CronJob: grouped by the Job, which is not the top owner
    cron = _obj("CronJob", "nightly", "c1", "batch/v1")
    run = _owned_by(_obj("Job", "nightly-1", "j2", "batch/v1"), cron)
    assert not _marked(_owned_by(_obj("Pod", "nightly-1-x", "p6"), run), [run, cron])
    # Spark pods share a PodGroup named after their application: annotated
    spark = _obj(
        "Pod", "driver", "p7", labels={"spark-app-selector": "app-1", "spark-app-name": "a"}
    )
    assert not _marked(spark, [])
    # a sharded workload keeps the annotation (each shard's scheduler tells its pods by it)
    pooled = _obj("Pod", "pooled", "p8", labels={NODE_POOL_LABEL: "pool-a"})
    assert not _marked(pooled, [])


def test_default_names() -> None:
    assert owner_podgroup_name("solo", "p1") == "pg-solo-p1"
    assert len(owner_podgroup_name("x" * 300, "u")) == 253
