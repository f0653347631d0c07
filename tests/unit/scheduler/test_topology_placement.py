"""Topology-aware allocation, hierarchical PodGroups, multi-device fractions, sharing modes."""

from __future__ import annotations

from builders import cluster, job, node, statuses, task  # type: ignore[import-not-found]

from kai.scheduler.session import run_session
from kai.scheduler.sharing_modes import node_sharing_modes, sharing_mode
from kai.scheduler.snapshot import (
    GpuRequest,
    SubGroupSpec,
    TopologyConstraint,
    TopologySpec,
)

ZONE, RACK = "k8s.io/zone", "k8s.io/rack"


def racks(gpus: int = 2) -> list:  # type: ignore[type-arg]
    """node0, node1 in rack r1; node2, node3 in rack r2; one zone."""
    return [
        node(f"node{i}", gpus=gpus, labels={ZONE: "z1", RACK: "r1" if i < 2 else "r2"})
        for i in range(4)
    ]


def with_topology(snap, aliases: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    snap.topologies = [TopologySpec("t", [ZONE, RACK], dict(aliases or {}))]
    return snap


def test_required_rack_goes_where_the_gang_fits() -> None:
    running = job("r", [task("r-0", gpus=2, status="Running", node_name="node0")])
    j = job("j", [task("j-0", gpus=2), task("j-1", gpus=2)])
    j.topology = TopologyConstraint("t", RACK)
    result = run_session(with_topology(cluster(racks(), [running, j])))
    assert {statuses(result)["j-0"][1], statuses(result)["j-1"][1]} == {"node2", "node3"}


def test_alias_is_the_same_level_as_its_label() -> None:
    running = job("r", [task("r-0", gpus=2, status="Running", node_name="node0")])
    j = job("j", [task("j-0", gpus=2), task("j-1", gpus=2)])
    j.topology = TopologyConstraint("t", "rack")
    result = run_session(with_topology(cluster(racks(), [running, j]), {"rack": RACK}))
    assert {statuses(result)["j-0"][1], statuses(result)["j-1"][1]} == {"node2", "node3"}


def test_unknown_topology_is_the_job_reason() -> None:
    j = job("j", [task("j-0")])
    j.topology = TopologyConstraint("nope", RACK)
    result = run_session(with_topology(cluster(racks(), [j])))
    assert statuses(result)["j-0"][0] == "Pending"
    (reason,) = result.job_reasons["j"]
    assert reason.code == "TopologyDoesNotExist"
    assert "Requested topology 'nope' does not exist" in reason.message


def test_unknown_level_is_the_job_reason() -> None:
    j = job("j", [task("j-0")])
    j.topology = TopologyConstraint("t", "rack")  # no alias defined
    result = run_session(with_topology(cluster(racks(), [j])))
    (reason,) = result.job_reasons["j"]
    assert reason.code == "TopologyLevelDoesNotExist"
    assert "'rack' is not a level of topology 't'" in reason.message


def test_no_domain_fits_names_the_constraint() -> None:
    j = job("j", [task(f"j-{i}", gpus=2) for i in range(3)])
    j.topology = TopologyConstraint("t", RACK)
    result = run_session(with_topology(cluster(racks(), [j])))
    (reason,) = result.job_reasons["j"]
    assert reason.code == "NoTopologyDomainFits"
    assert "required level k8s.io/rack" in reason.message


def test_subgroup_sets_with_required_rack_each_fill_a_rack() -> None:
    subgroups = [
        SubGroupSpec("ga", topology=TopologyConstraint("t", RACK)),
        SubGroupSpec("a1", "ga", 1),
        SubGroupSpec("a2", "ga", 1),
        SubGroupSpec("gb", topology=TopologyConstraint("t", RACK)),
        SubGroupSpec("b1", "gb", 1),
        SubGroupSpec("b2", "gb", 1),
    ]
    tasks = [task(f"j-{leaf}", gpus=2, subgroup=leaf) for leaf in ("a1", "a2", "b1", "b2")]
    result = run_session(with_topology(cluster(racks(), [job("j", tasks, subgroups=subgroups)])))
    placed = statuses(result)
    rack_of = {"node0": "r1", "node1": "r1", "node2": "r2", "node3": "r2"}
    assert all(status == "Binding" for status, _ in placed.values())
    assert rack_of[placed["j-a1"][1]] == rack_of[placed["j-a2"][1]]  # type: ignore[index]
    assert rack_of[placed["j-b1"][1]] == rack_of[placed["j-b2"][1]]  # type: ignore[index]


def test_failed_zone_is_rolled_back_and_the_next_zone_tried() -> None:
    # Zone z1 passes the aggregate fit test (4 free GPUs for 4 tasks) and is tried first, but
    # once leaf "a" takes rack r1, leaf "b" finds no rack with 2 free GPUs: the whole zone is
    # rolled back and zone z2 hosts both leaves.
    nodes = [
        node("node0", gpus=3, labels={ZONE: "z1", RACK: "r1"}),
        node("node1", gpus=1, labels={ZONE: "z1", RACK: "r2"}),
        node("node2", gpus=2, labels={ZONE: "z2", RACK: "r3"}),
        node("node3", gpus=2, labels={ZONE: "z2", RACK: "r4"}),
    ]
    subgroups = [
        SubGroupSpec(leaf, min_available=2, topology=TopologyConstraint("t", RACK))
        for leaf in ("a", "b")
    ]
    tasks = [task(f"j-{leaf}{i}", subgroup=leaf) for leaf in ("a", "b") for i in range(2)]
    j = job("j", tasks, subgroups=subgroups)
    j.topology = TopologyConstraint("t", ZONE)
    placed = statuses(run_session(with_topology(cluster(nodes, [j]))))
    assert {placed["j-a0"][1], placed["j-a1"][1]} in ({"node2"}, {"node3"})
    assert {placed["j-b0"][1], placed["j-b1"][1]} in ({"node2"}, {"node3"})
    assert placed["j-a0"][1] != placed["j-b0"][1]


def test_min_subgroup_at_the_root() -> None:
    subgroups = [SubGroupSpec(name, min_available=2) for name in ("a", "b", "c")]
    tasks = [task(f"j-{name}{i}", subgroup=name) for name in ("a", "b", "c") for i in range(2)]
    snap = cluster([node("node0", gpus=4)], [job("j", tasks, subgroups=subgroups, min_subgroup=2)])
    placed = statuses(run_session(snap))
    assert [placed[f"j-{n}{i}"][0] for n in "abc" for i in range(2)] == ["Binding"] * 4 + [
        "Pending"
    ] * 2


def test_min_subgroup_on_an_inner_set() -> None:
    subgroups = [
        SubGroupSpec("g", min_subgroup=1),
        SubGroupSpec("g1", "g", 1),
        SubGroupSpec("g2", "g", 1),
        SubGroupSpec("w", min_available=1),
    ]
    tasks = [task(f"j-{name}", subgroup=name) for name in ("g1", "g2", "w")]
    snap = cluster([node("node0", gpus=2)], [job("j", tasks, subgroups=subgroups)])
    placed = statuses(run_session(snap))
    assert (placed["j-g1"][0], placed["j-g2"][0], placed["j-w"][0]) == (
        "Binding",
        "Pending",
        "Binding",
    )


def test_multi_device_fraction_gets_distinct_devices_and_bind_fields() -> None:
    snap = cluster([node("node0", gpus=2)], [job("j", [task("j-0", fraction=0.5, num_devices=2)])])
    result = run_session(snap)
    (bind,) = result.binds
    assert bind.received_resource_type == "Fraction"
    assert bind.gpu_count == 2 and bind.gpu_portion == 0.5
    assert sorted(bind.gpu_groups) == ["node0/0", "node0/1"]


def test_multi_device_fraction_needs_devices_on_one_node() -> None:
    snap = cluster(
        [node("node0", gpus=1), node("node1", gpus=1)],
        [job("j", [task("j-0", fraction=0.5, num_devices=2)])],
    )
    assert statuses(run_session(snap))["j-0"] == ("Pending", None)


def test_mig_bind_is_a_mig_instance() -> None:
    from kai.scheduler.snapshot import MigSpec

    mig = MigSpec("mixed", 1, (("nvidia.com/mig-1g.10gb", 7),))
    snap = cluster(
        [node("node0", gpus=0, mig=mig)],
        [job("j", [task("j-0", mig={"nvidia.com/mig-1g.10gb": 2})])],
    )
    (bind,) = run_session(snap).binds
    assert bind.received_resource_type == "MigInstance"
    assert bind.mig == (("nvidia.com/mig-1g.10gb", 2),)


# ---------------------------------------------------------------- sharing modes (SharingPolicy)


def test_sharing_mode_of_requests() -> None:
    assert sharing_mode(task("t", fraction=0.5)) == "fraction"
    assert sharing_mode(task("t", gpu_memory=10)) == "gpu-memory"
    assert sharing_mode(task("t", mig={"nvidia.com/mig-1g.10gb": 1})) == "mig"
    assert sharing_mode(task("t", gpus=1)) is None


def test_node_sharing_modes_from_policies() -> None:
    nodes = [
        node("a", labels={"kai.scheduler/node-pool": "shared"}),
        node("b", labels={"kai.scheduler/node-pool": "train"}),
        node("c", labels={}),
    ]
    assert node_sharing_modes({}, nodes) == [None, None, None]
    got = node_sharing_modes({"shared": ["fraction", "gpu-memory"], "": ["mig"]}, nodes)
    assert got == [frozenset({"fraction", "gpu-memory"}), frozenset(), frozenset({"mig"})]


def test_unknown_sharing_mode_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="unknown GPU sharing mode"):
        node_sharing_modes({"p": ["halves"]}, [node("a")])


def test_pool_without_fraction_mode_keeps_fractions_off() -> None:
    whole_only = node("node0", gpus=4)
    whole_only.sharing_modes = frozenset()
    shared = node("node1", gpus=1)
    shared.sharing_modes = frozenset({"fraction"})
    snap = cluster(
        [whole_only, shared],
        [
            job("f", [task("f-0", fraction=0.5)], age=2),
            job("m", [task("m-0", gpu_memory=10)], age=1),
        ],
    )
    result = run_session(snap)
    placed = statuses(result)
    assert placed["f-0"] == ("Binding", "node1")
    assert placed["m-0"] == ("Pending", None)
    assert "SharingPolicy" in result.job_reasons["m"][0].message


def test_gpu_request_default_is_whole() -> None:
    assert GpuRequest().is_shared is False


# ---------------------------------------------------------------- stale gangs and minSubGroup


def _stale_snapshot(min_subgroup: int | None):  # type: ignore[no-untyped-def]
    subgroups = [SubGroupSpec("a", min_available=1), SubGroupSpec("b", min_available=1)]
    tasks = [
        task("j-a", subgroup="a", status="Running", node_name="node0"),
        task("j-b", subgroup="b"),
    ]
    snap = cluster(
        [node("node0", gpus=1)], [job("j", tasks, subgroups=subgroups, min_subgroup=min_subgroup)]
    )
    snap.config.staleness_grace_period = 0.0
    return snap


def test_stale_gang_detection_honours_min_subgroup() -> None:
    # Root minSubGroup 1 with leaf a running: satisfied, so not stale (KAI would evict it).
    placed = statuses(run_session(_stale_snapshot(1), ["stalegangeviction"]))
    assert placed["j-a"] == ("Running", "node0")


def test_stale_gang_without_min_subgroup_is_evicted() -> None:
    placed = statuses(run_session(_stale_snapshot(None), ["stalegangeviction"]))
    assert placed["j-a"] == ("Releasing", "node0")


def test_preferred_level_gathers_tasks_in_the_subdomain_with_most_room() -> None:
    nodes = [
        node("node0", gpus=4, labels={ZONE: "z1", RACK: "r1"}),
        node("node1", gpus=4, labels={ZONE: "z1", RACK: "r2"}),
        node("node2", gpus=4, labels={ZONE: "z2", RACK: "r3"}),
        node("node3", gpus=4, labels={ZONE: "z2", RACK: "r4"}),
    ]
    running = job("r", [task("r-0", gpus=2, status="Running", node_name="node2")])
    j = job("j", [task(f"j-{i}", gpus=2) for i in range(3)])
    j.topology = TopologyConstraint("t", ZONE, RACK)
    placed = statuses(run_session(with_topology(cluster(nodes, [running, j]))))
    # zone z2 is the fuller zone that fits 6 GPUs; inside it rack r4 (4 free) scores above r3,
    # although plain binpack would pick node2 (the node with less room) first.
    assert [placed[f"j-{i}"][1] for i in range(3)] == ["node3", "node3", "node2"]


def test_subgroups_inherit_their_ancestors_preferred_tiers() -> None:
    nodes = [
        node("node0", gpus=2, labels={ZONE: "z1", RACK: "r1"}),
        node("node1", gpus=8, labels={ZONE: "z1", RACK: "r2"}),
    ]
    subgroups = [SubGroupSpec("a", min_available=1), SubGroupSpec("b", min_available=1)]
    tasks = [task("j-a", subgroup="a"), task("j-b", subgroup="b")]
    j = job("j", tasks, subgroups=subgroups)
    j.topology = TopologyConstraint("t", None, RACK)
    placed = statuses(run_session(with_topology(cluster(nodes, [j], placement_gpu="spread"))))
    # rack r1 is the fullest rack that fits both and is tried first; gpu spread alone would pick
    # node1, but both leaves (without constraints of their own) stay in the chosen rack.
    assert (placed["j-a"][1], placed["j-b"][1]) == ("node0", "node0")
