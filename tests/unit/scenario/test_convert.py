"""The scenario -> Snapshot mapping."""

from __future__ import annotations

from collections.abc import Callable

from kai.scenario import NOW, Scenario, TaskState, to_snapshot
from kai.scheduler import snapshot as core

from .conftest import document, job, node, task


def _scenario(make: Callable[..., Scenario]) -> Scenario:
    data = document(
        [
            node("n0", 2, labels={"zone": "z1"}),
            node(
                "n1",
                0,
                mig={
                    "strategy": "mixed",
                    "physicalGpus": 1,
                    "devices": {"nvidia.com/mig-1g.10gb": 7},
                },
            ),
        ],
        [
            job(
                "j0",
                [
                    task(
                        "a", "Running", node="n0", request={"gpuFraction": 0.25}, gpuGroups=["n0/0"]
                    ),
                    task(
                        "b",
                        priority=3,
                        labels={"app": "x"},
                        nodeAffinity={"key": "zone", "operator": "In", "values": ["z1", "z2"]},
                        podAffinity={"topologyKey": "zone", "matchLabels": {"app": "x"}},
                        podAntiAffinity={"topologyKey": "host", "matchLabels": {"app": "y"}},
                    ),
                ],
                minAvailable=1,
                createdMinutesAgo=3,
                staleForSeconds=20,
                topology={"topology": "t", "requiredLevel": "zone"},
                namespace="ns",
            ),
            {
                "name": "j1",
                "queue": "q",
                "priority": 125,
                "preemptible": False,
                "createdMinutesAgo": 0.5,
                "deleted": True,
                "subGroups": [
                    {"name": "g", "parent": None},
                    {"name": "l", "parent": "g", "minAvailable": 1},
                ],
                "tasks": [
                    task("c", subGroup="l", request={"gpuMemoryMiB": 40}),
                    task("d", subGroup="l", request={"mig": {"nvidia.com/mig-1g.10gb": 2}}),
                ],
            },
        ],
        topologies=[{"name": "t", "levels": ["zone"]}],
    )
    data["queues"][0]["gpu"] = {"quota": 3, "limit": 5, "overQuotaWeight": 2}
    data["config"]["placement"] = "none"
    data["config"]["maxConsolidationPreemptees"] = -1
    data["config"]["fairShareKValue"] = 0.5
    return make(data)


def test_snapshot_fields(make_scenario: Callable[..., Scenario]) -> None:
    snap = to_snapshot(_scenario(make_scenario))
    assert snap.now == NOW
    assert [n.name for n in snap.nodes] == ["n0", "n1"]
    assert snap.nodes[0].labels == {"zone": "z1"} and snap.nodes[0].max_pods == 110
    assert snap.nodes[1].mig == core.MigSpec("mixed", 1, (("nvidia.com/mig-1g.10gb", 7),))
    queue = snap.queues[0]
    assert queue.resources["gpu"] == core.QueueResource(3, 5, 2)
    assert queue.resources["cpu"] == core.QueueResource(-1, -1, 1)
    assert queue.resources["memory"] == core.QueueResource(-1, -1, 1)
    config = snap.config
    assert (config.placement_gpu, config.placement_cpu) == ("none", "none")
    assert config.max_consolidation_preemptees == -1 and config.k_value == 0.5
    assert config.actions == ("allocate",) and config.staleness_grace_period == 60
    j0, j1 = snap.jobs
    assert j0.uid == "j0" and j0.created_at == NOW - 180 and j0.stale_since == NOW - 20
    assert j0.min_available == 1 and j0.namespace == "ns"
    assert j0.topology == core.TopologyConstraint("t", "zone", None)
    assert j1.stale_since is None and j1.deleted and not j1.preemptible and j1.priority == 125
    assert [(s.name, s.parent, s.min_available) for s in j1.subgroups] == [
        ("g", None, None),
        ("l", "g", 1),
    ]
    a, b = j0.tasks
    assert a.status is core.TaskStatus.RUNNING and a.node == "n0" and a.gpu_groups == ("n0/0",)
    assert a.gpu == core.GpuRequest(fraction=0.25) and a.created_at == j0.created_at
    assert b.priority == 3 and b.labels == {"app": "x"} and b.gpu == core.GpuRequest(whole=1)
    assert b.node_affinity == (
        core.NodeSelectorTerm((core.Requirement("zone", "In", ("z1", "z2")),)),
    )
    assert b.pod_affinity == (core.PodAffinityTerm("zone", (("app", "x"),)),)
    assert b.pod_anti_affinity == (core.PodAffinityTerm("host", (("app", "y"),)),)
    c, d = j1.tasks
    assert c.gpu == core.GpuRequest(memory_mib=40) and c.subgroup == "l" and c.job == "j1"
    assert d.gpu == core.GpuRequest(mig=(("nvidia.com/mig-1g.10gb", 2),))
    assert snap.topologies == [core.TopologySpec("t", ["zone"])]


def test_state_overrides_the_file(make_scenario: Callable[..., Scenario]) -> None:
    scenario = _scenario(make_scenario)
    state = {t.name: TaskState(t.status, t.node, t.gpu_groups) for t in scenario.tasks()}
    state["a"] = TaskState("Pending", None, ())
    state["b"] = TaskState("Running", "n0", ())
    j0 = to_snapshot(scenario, state).jobs[0]
    assert [(t.status, t.node, t.gpu_groups) for t in j0.tasks] == [
        (core.TaskStatus.PENDING, None, ()),
        (core.TaskStatus.RUNNING, "n0", ()),
    ]
