"""Raw objects -> the core's Snapshot: preferred affinity terms, PersistentVolumeClaims."""

from __future__ import annotations

from typing import Any

from test_snapshot_builder import QUEUE, _node, _pg, _pod

from kai.reconcilers.snapshot_builder import SnapshotBuilder
from kai.reconcilers.volume_claims import VolumeIndex
from kai.scheduler.snapshot import (
    NodeSelectorTerm,
    Requirement,
    TaskSpec,
    VolumeConstraint,
)

HOST = "kubernetes.io/hostname"


def _build(pods: list[dict[str, Any]], volumes: VolumeIndex | None = None) -> Any:
    return SnapshotBuilder("kai-scheduler").build(
        pods=pods,
        nodes=[_node("n0"), _node("n1", 1)],
        podgroups=[_pg("pg")],
        queues=[QUEUE],
        bind_requests=[],
        volumes=volumes,
    )


def _task(built: Any, name: str) -> TaskSpec:
    return next(t for j in built.snapshot.jobs for t in j.tasks if t.name == name)


def test_preferred_terms_are_read() -> None:
    pod = _pod("p", "pg", gpus=1)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 40,
                    "preference": {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]
                    },
                }
            ]
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 7,
                    "podAffinityTerm": {
                        "topologyKey": HOST,
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    },
                }
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 3,
                    "podAffinityTerm": {
                        "topologyKey": "zone",
                        "labelSelector": {
                            "matchExpressions": [{"key": "app", "operator": "Exists"}]
                        },
                    },
                }
            ]
        },
    }
    built = _build([pod])
    assert not built.problems
    task = _task(built, "p")
    (node_term,) = task.preferred_node_affinity
    assert node_term.weight == 40
    assert node_term.term == NodeSelectorTerm((Requirement("zone", "In", ("a",)),))
    (near,) = task.preferred_pod_affinity
    assert (near.weight, near.term.topology_key, near.term.match_labels) == (
        7,
        HOST,
        (("app", "web"),),
    )
    (away,) = task.preferred_pod_anti_affinity
    assert away.weight == 3 and away.term.match_expressions == (Requirement("app", "Exists"),)


def test_a_bad_weight_is_a_problem_naming_the_field() -> None:
    pod = _pod("p", "pg", gpus=1)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 0, "preference": {"matchExpressions": []}}
            ]
        }
    }
    (problem,) = _build([pod]).problems
    assert problem.field == (
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
    )
    assert "1 to 100" in problem.message


def _claim(name: str, volume: str | None = None, storage_class: str | None = None) -> dict:  # type: ignore[type-arg]
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    if volume:
        spec["volumeName"] = volume
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _volume(name: str, *hosts: str) -> dict[str, Any]:
    required = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOST, "operator": "In", "values": list(hosts)}]}
        ]
    }
    return {"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": required}}}


def _class(name: str, mode: str, provisioner: str = "example.com/csi", **extra: Any) -> dict:  # type: ignore[type-arg]
    return {
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        **extra,
    }


def _with_claims(name: str, *claims: str) -> dict[str, Any]:
    pod = _pod(name, "pg", gpus=1)
    pod["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ] + [{"name": "scratch", "emptyDir": {}}]
    return pod


def _on(*hosts: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm((Requirement(HOST, "In", hosts),)),)


def test_volume_constraints_per_claim_state() -> None:
    index = VolumeIndex(
        claims=[
            _claim("bound", volume="pv-local"),
            _claim("dangling", volume="pv-gone"),
            _claim("later", storage_class="wffc"),
            _claim("zonal", storage_class="zoned"),
            _claim("now", storage_class="immediate"),
            _claim("static", storage_class="local"),
            _claim("defaulted"),
        ],
        volumes=[_volume("pv-local", "n1")],
        classes=[
            _class("wffc", "WaitForFirstConsumer"),
            _class(
                "zoned",
                "WaitForFirstConsumer",
                allowedTopologies=[
                    {"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}
                ],
            ),
            _class("immediate", "Immediate"),
            _class("local", "WaitForFirstConsumer", provisioner="kubernetes.io/no-provisioner"),
        ],
    )
    assert index.constraint("ns", ("bound",)) == VolumeConstraint(node_affinity=(_on("n1"),))
    assert index.constraint("ns", ("dangling", "nope")) == VolumeConstraint(
        missing=("dangling", "nope")
    )
    assert index.constraint("ns", ("later",)) == VolumeConstraint()
    zoned = index.constraint("ns", ("zonal",))
    assert zoned.node_affinity == ((NodeSelectorTerm((Requirement("zone", "In", ("a", "b")),)),),)
    for name in ("now", "defaulted"):
        assert index.constraint("ns", (name,)) == VolumeConstraint(unbound=(name,))
    # a pre-provisioned class with no volume for the claim: no node
    assert index.constraint("ns", ("static",)) == VolumeConstraint(available=((),))
    # a claim of another namespace is not found
    assert index.constraint("other", ("bound",)).missing == ("bound",)


def _local(name: str, host: str, size: str = "10Gi", **spec: Any) -> dict[str, Any]:
    volume = _volume(name, host)
    volume["spec"].update(
        {
            "storageClassName": "local",
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            **spec,
        }
    )
    return volume


def test_pre_provisioned_volumes_that_could_be_bound_say_where_the_pod_may_go() -> None:
    claim = _claim("data", storage_class="local")
    claim["spec"]["resources"] = {"requests": {"storage": "5Gi"}}
    taken = {"name": "other", "namespace": "ns", "uid": "u-other"}
    index = VolumeIndex(
        claims=[claim],
        volumes=[
            _local("fits-n1", "n1"),
            _local("fits-n2", "n2", "5Gi"),
            _local("too-small", "n3", "1Gi"),
            _local("taken", "n4", claimRef=taken),
            _local("read-only", "n5", accessModes=["ReadOnlyMany"]),
            _local("block", "n6", volumeMode="Block"),
            {**_local("released", "n7"), "status": {"phase": "Released"}},
        ],
        classes=[
            _class("local", "WaitForFirstConsumer", provisioner="kubernetes.io/no-provisioner")
        ],
    )
    (terms,) = index.constraint("ns", ("data",)).available
    assert terms == (*_on("n1"), *_on("n2"))
    # a volume with no node affinity: anywhere, no constraint at all
    index = VolumeIndex(
        claims=[claim],
        volumes=[
            {
                "metadata": {"name": "nfs"},
                "spec": {**_local("x", "n1")["spec"], "nodeAffinity": None},
            }
        ],
        classes=[
            _class("local", "WaitForFirstConsumer", provisioner="kubernetes.io/no-provisioner")
        ],
    )
    assert index.constraint("ns", ("data",)) == VolumeConstraint()


def test_builder_attaches_volume_constraints_to_tasks() -> None:
    index = VolumeIndex(claims=[_claim("data", volume="pv")], volumes=[_volume("pv", "n1")])
    plain = _pod("plain", "pg", gpus=1)
    built = _build([_with_claims("db", "data"), _with_claims("lost", "missing"), plain], index)
    assert not built.problems
    assert _task(built, "db").volumes == VolumeConstraint(node_affinity=(_on("n1"),))
    assert _task(built, "lost").volumes == VolumeConstraint(missing=("missing",))
    assert _task(built, "plain").volumes is None
    # without any index the claims do not exist
    assert _task(_build([_with_claims("db", "data")]), "db").volumes == VolumeConstraint(
        missing=("data",)
    )


def test_an_unreadable_volume_is_a_problem_of_the_pod() -> None:
    bad = _volume("pv", "n1")
    bad["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0][
        "operator"
    ] = "Near"
    index = VolumeIndex(claims=[_claim("data", volume="pv")], volumes=[bad])
    built = _build([_with_claims("db", "data")], index)
    (problem,) = built.problems
    assert problem.field == "spec.nodeAffinity.required"
    assert "PersistentVolume pv" in problem.message and "'Near'" in problem.message
    assert built.snapshot.jobs == []


def test_generic_ephemeral_volume_claim_is_named_after_pod_and_volume() -> None:
    pod = _pod("web-0", "pg", gpus=1)
    pod["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    built = _build([pod], VolumeIndex())
    assert _task(built, "web-0").volumes == VolumeConstraint(missing=("web-0-scratch",))


def test_a_cluster_snapshot_keeps_the_claims_and_rebuilds_the_constraint() -> None:
    from kai.reconcilers.cluster_snapshot import from_caches, from_document

    pod = _with_claims("db", "data")
    pod["spec"]["volumes"].append({"name": "cfg", "secret": {"secretName": "token"}})
    caches = {
        "pods": [pod],
        "nodes": [_node("n0"), _node("n1", 1)],
        "podgroups": [_pg("pg")],
        "queues": [QUEUE],
        "persistentvolumeclaims": [_claim("data", volume="pv")],
        "persistentvolumes": [_volume("pv", "n1")],
    }
    snap = from_caches(caches, scheduler_name="kai-scheduler", config_map="kai-scheduler/cm")
    (saved,) = snap.objects["pods"]
    assert saved["spec"]["volumes"] == [
        {"name": "v0", "persistentVolumeClaim": {"claimName": "data"}}
    ]  # the secret volume and the emptyDir are gone
    again = from_document(snap.to_document())
    built = again.build()
    assert _task(built, "db").volumes == VolumeConstraint(node_affinity=(_on("n1"),))
