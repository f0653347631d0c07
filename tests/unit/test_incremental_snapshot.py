"""The incremental snapshot equals a from-scratch build after every step of random sequences of
adds, updates and deletes of nodes, pods, PodGroups, Queues, BindRequests, PriorityClasses,
Topologies, PersistentVolumeClaims and PersistentVolumes (with and without a shard's node pool,
with and without sharing policies)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.reconcilers.incremental_snapshot import KINDS, IncrementalSnapshot, Key, dict_source
from kai.reconcilers.shard import NodePool
from kai.reconcilers.snapshot_builder import BuiltSnapshot, SnapshotBuilder
from kai.reconcilers.volume_claims import VolumeIndex
from kai.sim.nodes import NodeShape, node_manifest, ready_conditions
from kai.sim.workloads import pod_manifest

NAME = "kai-scheduler"
POOL_LABEL = "kai.scheduler/node-pool"
NOW = 1_800_000_000.0

names = st.sampled_from
pool_labels = st.sampled_from([{}, {POOL_LABEL: "a"}, {POOL_LABEL: "b"}])


@st.composite
def nodes(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["n0", "n1", "n2"]))
    if draw(st.integers(0, 5)) == 0:
        return ("nodes", ("", name), None)
    node = node_manifest(name, int(name[1]), NodeShape(gpus=draw(st.sampled_from([1, 4, 8]))))
    md = node["metadata"]
    md.update(uid=f"uid-{name}", resourceVersion=str(draw(st.integers(1, 4))))
    md.setdefault("labels", {}).update(draw(pool_labels))
    if draw(st.booleans()):
        md["labels"]["nvidia.com/gpu.memory"] = draw(st.sampled_from(["40000", "bad"]))
    node["status"]["conditions"] = ready_conditions() if draw(st.booleans()) else []
    return ("nodes", ("", name), node)


@st.composite
def pods(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["p0", "p1", "p2", "p3", "p4", "p5"]))
    ns = draw(st.sampled_from(["ns", "ns", "kai-resource-reservation"]))
    if draw(st.integers(0, 5)) == 0:
        return ("pods", (ns, name), None)
    fraction = draw(st.sampled_from([None, None, 0.5, 2.5]))  # 2.5: not understood
    pod = pod_manifest(
        name,
        ns,
        "q0",
        gpus=draw(st.sampled_from([0, 1, 2])) if fraction is None else 0,
        fraction=fraction,
        cpu=draw(st.sampled_from(["100m", "1", "250m"])),
        scheduler_name=draw(st.sampled_from([NAME, NAME, "default-scheduler"])),
        labels=draw(pool_labels),
    )
    md = pod["metadata"]
    md.update(
        uid=f"uid-{ns}-{name}",
        resourceVersion=str(draw(st.integers(1, 6))),
        creationTimestamp="2026-01-01T00:00:00Z",
    )
    group = draw(st.sampled_from([None, "g0", "g1", "g2"]))
    if group:
        md.setdefault("annotations", {})["pod-group-name"] = group
    if draw(st.booleans()):
        md["labels"]["runai-gpu-group"] = draw(st.sampled_from(["grp-a", "grp-b"]))
    node = draw(st.sampled_from([None, None, "n0", "n1", "n2", "n9"]))
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]))}
    if draw(st.integers(0, 6)) == 0:
        md["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    if draw(st.integers(0, 6)) == 0:
        pod["spec"]["schedulingGates"] = [{"name": "wait"}]
    if draw(st.integers(0, 3)) == 0:
        claim = draw(st.sampled_from(["c0", "c1"]))
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return ("pods", (ns, name), pod)


STORAGE = ("persistentvolumeclaims", "persistentvolumes")  # not informer-tracked by the snapshot


@st.composite
def claims(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["c0", "c1"]))
    if draw(st.integers(0, 4)) == 0:
        return ("persistentvolumeclaims", ("ns", name), None)
    volume = draw(st.sampled_from([None, "v0", "v1"]))
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound" if volume else "Pending"},
    }
    if volume:
        claim["spec"]["volumeName"] = volume
    return ("persistentvolumeclaims", ("ns", name), claim)


@st.composite
def persistent_volumes(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["v0", "v1"]))
    if draw(st.integers(0, 4)) == 0:
        return ("persistentvolumes", ("", name), None)
    volume: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]},
    }
    node = draw(st.sampled_from([None, "n0", "n1"]))
    if node:
        term = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        volume["spec"]["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
        }
    return ("persistentvolumes", ("", name), volume)


@st.composite
def podgroups(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    # pg-p0-uid-ns-p0: the PodGroup of the bare pod p0 of namespace ns, found by its owner
    name = draw(names(["g0", "g1", "g2", "pg-p0-uid-ns-p0"]))
    if draw(st.integers(0, 4)) == 0:
        return ("podgroups", ("ns", name), None)
    spec: dict[str, Any] = {"minMember": draw(st.integers(1, 3))}
    if draw(st.integers(0, 5)):
        spec["queue"] = "q0"  # else: not understood (no queue)
    if draw(st.booleans()):
        spec["priorityClassName"] = draw(st.sampled_from(["high", "low", "missing"]))
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-pg-{name}",
            "resourceVersion": str(draw(st.integers(1, 5))),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": draw(pool_labels),
        },
        "spec": spec,
    }
    if name.startswith("pg-") and draw(st.integers(0, 3)):
        pg["metadata"]["annotations"] = {"kai.scheduler/pods-by-owner": "true"}
        pg["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p0", "uid": "uid-ns-p0"}
        ]
    return ("podgroups", ("ns", name), pg)


@st.composite
def queues(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["q0", "q1"]))
    if draw(st.integers(0, 4)) == 0:
        return ("queues", ("", name), None)
    resources = {
        r: {"quota": draw(st.sampled_from([-1, 0, 4])), "limit": -1, "overQuotaWeight": 1}
        for r in ("gpu", "cpu", "memory")
    }
    queue = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": draw(
                st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"])
            ),
            "labels": draw(pool_labels),
        },
        "spec": {"resources": resources} if draw(st.integers(0, 5)) else {},
    }
    return ("queues", ("", name), queue)


@st.composite
def bind_requests(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    pod = draw(names(["p0", "p1", "p2", "p3"]))
    if draw(st.integers(0, 3)) == 0:
        return ("bindrequests", ("ns", pod), None)
    br = {
        "metadata": {"name": pod, "namespace": "ns", "uid": f"uid-br-{pod}"},
        "spec": {
            "podName": pod,
            "selectedNode": draw(st.sampled_from(["n0", "n1", "n9"])),
            "selectedGPUGroups": draw(st.sampled_from([[], ["grp-a"]])),
        },
        "status": {"phase": draw(st.sampled_from(["Pending", "Succeeded", "Failed"]))},
    }
    return ("bindrequests", ("ns", pod), br)


@st.composite
def in_flight(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    """A BindRequest the scheduler created that the informer does not show yet."""
    _, key, br = draw(bind_requests())
    if br is not None:
        br = {**br, "status": {}}
    return ("in-flight", key, br)


@st.composite
def priority_classes(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["high", "low"]))
    if draw(st.integers(0, 3)) == 0:
        return ("priorityclasses", ("", name), None)
    pc = {
        "metadata": {"name": name},
        "value": draw(st.sampled_from([10, 50, 150])),
        "globalDefault": draw(st.booleans()),
    }
    return ("priorityclasses", ("", name), pc)


@st.composite
def topologies(draw: Any) -> tuple[str, Key, dict[str, Any] | None]:
    name = draw(names(["t0", "t1"]))
    if draw(st.integers(0, 3)) == 0:
        return ("topologies", ("", name), None)
    levels = [{"nodeLabel": "zone"}] if draw(st.integers(0, 4)) else [{"alias": "x"}]
    return ("topologies", ("", name), {"metadata": {"name": name}, "spec": {"levels": levels}})


_random_steps = st.lists(
    st.one_of(
        pods(),
        pods(),
        pods(),
        nodes(),
        podgroups(),
        podgroups(),
        queues(),
        bind_requests(),
        in_flight(),
        priority_classes(),
        topologies(),
        claims(),
        persistent_volumes(),
    ),
    min_size=1,
    max_size=40,
)


# most sequences start from a cluster where pods can be tasks (a queue, nodes, PodGroups, pods,
# claims and volumes), so that the random steps change something the scheduler reads
_setup = st.tuples(
    queues(),
    nodes(),
    nodes(),
    podgroups(),
    podgroups(),
    pods(),
    pods(),
    pods(),
    claims(),
    persistent_volumes(),
).map(list)
steps = st.one_of(_random_steps, st.tuples(_setup, _random_steps).map(lambda p: p[0] + p[1]))


def _comparable(built: BuiltSnapshot) -> dict[str, Any]:
    def key(obj: dict[str, Any]) -> tuple[str, str]:
        md = obj["metadata"]
        return (md.get("namespace") or "", md["name"])

    return {
        "now": built.snapshot.now,
        "nodes": built.snapshot.nodes,
        "queues": built.snapshot.queues,
        "jobs": built.snapshot.jobs,
        "topologies": built.snapshot.topologies,
        "config": built.snapshot.config,
        "problems": sorted(p.text for p in built.problems),
        "pods": built.pods,
        "podgroups": built.podgroups,
        "bind_requests": built.bind_requests,
        "stale_bind_requests": sorted(key(b) for b in built.stale_bind_requests),
        "ungrouped": [key(p) for p in built.ungrouped],
        "existing_groups": built.existing_groups,
    }


def _from_scratch(
    objects: dict[str, dict[Key, dict[str, Any]]],
    flying: dict[Key, dict[str, Any]],
    pool: NodePool,
    modes: Any,
) -> BuiltSnapshot:
    builder = SnapshotBuilder(NAME, pool=pool)
    builder.sharing_modes = modes
    return builder.build(
        pods=list(objects["pods"].values()),
        nodes=list(objects["nodes"].values()),
        podgroups=list(objects["podgroups"].values()),
        queues=list(objects["queues"].values()),
        # the live scheduler's view: the informer's, then those in flight it does not show
        bind_requests=list(objects["bindrequests"].values())
        + [br for key, br in flying.items() if key not in objects["bindrequests"]],
        topologies=list(objects["topologies"].values()),
        priority_classes=list(objects["priorityclasses"].values()),
        now=NOW,
        volumes=_volumes(objects),
    )


def _volumes(objects: dict[str, dict[Key, dict[str, Any]]]) -> VolumeIndex:
    return VolumeIndex(
        list(objects["persistentvolumeclaims"].values()),
        list(objects["persistentvolumes"].values()),
    )


def _check(ops: list[tuple[str, Key, dict[str, Any] | None]], pool: NodePool, modes: Any) -> None:
    objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in (*KINDS, *STORAGE)}
    builder = SnapshotBuilder(NAME, pool=pool)
    builder.sharing_modes = modes
    flying: dict[Key, dict[str, Any]] = {}
    incremental = IncrementalSnapshot(
        builder,
        {k: dict_source(objects[k]) for k in KINDS},
        lambda: {k: br for k, br in flying.items() if k not in objects["bindrequests"]},
        volumes=lambda: _volumes(objects),
    )
    for step, (kind, key, obj) in enumerate(ops):
        if kind == "in-flight":
            if obj is None:
                flying.pop(key, None)
            else:
                flying[key] = obj
            got = _comparable(incremental.build(now=NOW))
            want = _comparable(_from_scratch(objects, flying, pool, modes))
            assert got == want, f"step {step} (in flight {key})"
            continue
        old = objects[kind].get(key)
        if obj is not None:  # as an API server does: every write a new resourceVersion
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(step + 1)}}
        if obj is None:
            objects[kind].pop(key, None)
        else:
            objects[kind][key] = obj
        changed = obj or old
        if changed is not None and kind not in STORAGE:
            incremental.changed(kind, changed)
        got = _comparable(incremental.build(now=NOW))
        want = _comparable(_from_scratch(objects, flying, pool, modes))
        for part in want:
            assert got[part] == want[part], (
                f"step {step} ({kind} {key}): {part} differs:\n{got[part]}\n{want[part]}"
            )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_equals_a_full_build_after_every_step(ops: list[Any]) -> None:
    _check(ops, NodePool(), {})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from([{}, {"a": ["fraction"], "": []}]))
def test_equals_a_full_build_in_a_shard_with_sharing_policies(ops: list[Any], modes: Any) -> None:
    _check(ops, NodePool(shard="s", partition="a", label_key=POOL_LABEL), modes)


def test_unchanged_objects_are_not_derived_again() -> None:
    objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind in KINDS}
    node = node_manifest("n0", 0, NodeShape(gpus=8))
    node["metadata"].update(uid="n0", resourceVersion="1")
    node["status"]["conditions"] = ready_conditions()
    objects["nodes"][("", "n0")] = node
    pg = {
        "metadata": {"name": "g0", "namespace": "ns", "uid": "g0", "resourceVersion": "1"},
        "spec": {"queue": "q0", "minMember": 1},
    }
    objects["podgroups"][("ns", "g0")] = pg
    for i in range(3):
        pod = pod_manifest(f"p{i}", "ns", "q0", gpus=1)
        pod["metadata"].update(
            uid=f"p{i}", resourceVersion="1", annotations={"pod-group-name": "g0"}
        )
        objects["pods"][("ns", f"p{i}")] = pod
    incremental = IncrementalSnapshot(
        SnapshotBuilder(NAME), {k: dict_source(objects[k]) for k in KINDS}
    )
    first = incremental.build(now=NOW)
    second = incremental.build(now=NOW)
    # nothing changed: the very same specs (no parse, no copy)
    assert [t for j in first.snapshot.jobs for t in j.tasks] == [
        t for j in second.snapshot.jobs for t in j.tasks
    ]
    assert all(
        a is b
        for a, b in zip(
            (t for j in first.snapshot.jobs for t in j.tasks),
            (t for j in second.snapshot.jobs for t in j.tasks),
            strict=True,
        )
    )
    assert first.snapshot.nodes[0] is second.snapshot.nodes[0]
    # one pod bound: its task is new, the others' are the same objects
    objects["pods"][("ns", "p1")]["spec"]["nodeName"] = "n0"
    incremental.changed("pods", objects["pods"][("ns", "p1")])
    third = incremental.build(now=NOW)
    tasks = {t.name: t for j in third.snapshot.jobs for t in j.tasks}
    before = {t.name: t for j in second.snapshot.jobs for t in j.tasks}
    assert tasks["p0"] is before["p0"] and tasks["p2"] is before["p2"]
    assert tasks["p1"] is not before["p1"] and tasks["p1"].node == "n0"


def test_a_reservation_pod_counts_only_while_no_task_holds_its_group() -> None:
    """A GPU reservation pod's device counts on its node until a fractional task of ours in
    its GPU group is placed there (then the group's device stands for it), and again once that
    task is gone: the node is derived again each time, as a full build counts it."""
    node = node_manifest("n0", 0, NodeShape(gpus=8))
    node["metadata"]["uid"] = "n0"
    node["status"]["conditions"] = ready_conditions()
    pg = {
        "metadata": {"name": "g0", "namespace": "ns", "uid": "g0"},
        "spec": {"queue": "q0", "minMember": 1},
    }
    reservation = pod_manifest("r0", "kai-resource-reservation", "q0", gpus=1)
    reservation["metadata"].update(uid="r0", labels={"runai-gpu-group": "grp-a"})
    reservation["spec"]["nodeName"] = "n0"
    reservation["status"] = {"phase": "Running"}
    task = pod_manifest("p0", "ns", "q0", fraction=0.5)
    task["metadata"].update(
        uid="p0",
        annotations={"pod-group-name": "g0"},
        labels={**task["metadata"].get("labels", {}), "runai-gpu-group": "grp-a"},
    )
    task["spec"]["nodeName"] = "n0"
    task["status"] = {"phase": "Running"}
    other = pod_manifest("p1", "ns", "q0", fraction=0.5)  # another group: no effect on r0
    other["metadata"].update(
        uid="p1",
        annotations={"pod-group-name": "g0"},
        labels={**other["metadata"].get("labels", {}), "runai-gpu-group": "grp-b"},
    )
    other["spec"]["nodeName"] = "n0"
    other["status"] = {"phase": "Running"}
    ops: list[tuple[str, Key, dict[str, Any] | None]] = [
        ("nodes", ("", "n0"), node),
        ("podgroups", ("ns", "g0"), pg),
        ("pods", ("kai-resource-reservation", "r0"), reservation),
        ("pods", ("ns", "p1"), other),
        ("pods", ("ns", "p0"), task),  # the task's group: r0's device no longer counts
        ("pods", ("ns", "p1"), None),
        ("pods", ("ns", "p0"), None),  # gone: r0's device counts again
        ("pods", ("ns", "p0"), task),
        ("podgroups", ("ns", "g0"), None),  # no PodGroup: p0 is no task, r0 counts again
    ]
    _check(ops, NodePool(), {})
