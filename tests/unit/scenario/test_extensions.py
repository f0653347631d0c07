# ruff: noqa: E501
"""The kai extensions of the scenario format (docs/scenario-format.md, marked *extension*):
``request.gpuDevices``, ``minSubGroup`` on jobs and inner subgroups, ``topologies[].aliases``,
the preferred (soft) affinity terms of tasks.

Validity cases follow test_validity_rules.py: a case edits ``data/base.yaml`` (a valid file) and
lists every line ``kai simulate`` must print, ``F`` standing for the file name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kai.commands.simulate import execute
from kai.scenario import Scenario, ScenarioError, load_scenario, to_snapshot
from kai.scheduler import snapshot as core

from .conftest import document, job, node, task

BASE = (Path(__file__).parent / "data" / "base.yaml").read_text()
TOPO = "topologies:\n- name: topo\n  levels: [zone, rack]\n"
SHARED = "request: {gpuFraction: 0.5,"
PENDING = "    request: {gpus: 1,"
RUNNING_SHARED = "    gpuGroups: [node0/0]\n    " + SHARED

#: (id, [(old, new), ...] applied in order, each old text occurring once, expected lines)
CASES: list[tuple[str, list[tuple[str, str]], list[str]]] = [
    # --- preferredNodeAffinity / preferredPodAffinity / preferredPodAntiAffinity
    (
        "preferred_weight_zero",
        [
            (
                PENDING,
                "    preferredNodeAffinity: [{weight: 0, key: zone, operator: In, values: [a]}]\n"
                + PENDING,
            )
        ],
        [
            "F:68:38: jobs[0].tasks[1].preferredNodeAffinity[0].weight: must be an integer from 1 to 100, got 0"
        ],
    ),
    (
        "preferred_weight_above_100",
        [
            (
                PENDING,
                "    preferredPodAffinity: [{weight: 101, topologyKey: zone, matchLabels: {a: b}}]\n"
                + PENDING,
            )
        ],
        [
            "F:68:37: jobs[0].tasks[1].preferredPodAffinity[0].weight: must be an integer from 1 to 100, got 101"
        ],
    ),
    (
        "preferred_empty_list",
        [(PENDING, "    preferredPodAntiAffinity: []\n" + PENDING)],
        ["F:68:31: jobs[0].tasks[1].preferredPodAntiAffinity: must be a non-empty list"],
    ),
    (
        "preferred_node_operator",
        [
            (
                PENDING,
                "    preferredNodeAffinity: [{weight: 5, key: zone, operator: NotIn, values: [a]}]\n"
                + PENDING,
            )
        ],
        [
            "F:68:62: jobs[0].tasks[1].preferredNodeAffinity[0].operator: must be one of In, got 'NotIn'"
        ],
    ),
    (
        "preferred_weight_missing",
        [
            (
                PENDING,
                "    preferredPodAffinity: [{topologyKey: zone, matchLabels: {a: b}}]\n" + PENDING,
            )
        ],
        ["F:68:28: jobs[0].tasks[1].preferredPodAffinity[0].weight: required key is missing"],
    ),
    # --- request.gpuDevices
    (
        "gpu_devices_zero",
        [(SHARED, "request: {gpuDevices: 0, gpuFraction: 0.5,")],
        ["F:65:27: jobs[0].tasks[0].request.gpuDevices: must be an integer >= 1, got 0"],
    ),
    (
        "gpu_devices_float",
        [(SHARED, "request: {gpuDevices: 1.5, gpuFraction: 0.5,")],
        ["F:65:27: jobs[0].tasks[0].request.gpuDevices: must be an integer >= 1, got 1.5"],
    ),
    (
        "gpu_devices_bool",
        [(SHARED, "request: {gpuDevices: true, gpuFraction: 0.5,")],
        ["F:65:27: jobs[0].tasks[0].request.gpuDevices: must be an integer >= 1, got true"],
    ),
    (
        "gpu_devices_with_whole_gpus",
        [("request: {gpus: 1,", "request: {gpus: 1, gpuDevices: 2,")],
        [
            "F:68:36: jobs[0].tasks[1].request.gpuDevices: only together with gpuFraction or gpuMemoryMiB (the number of shared devices)"
        ],
    ),
    (
        "gpu_devices_with_mig",
        [("request: {mig:", "request: {gpuDevices: 2, mig:")],
        [
            "F:81:27: jobs[1].tasks[0].request.gpuDevices: only together with gpuFraction or gpuMemoryMiB (the number of shared devices)"
        ],
    ),
    (
        "gpu_devices_cpu_only",
        [("request: {gpus: 1,", "request: {gpuDevices: 1,")],
        [
            "F:68:27: jobs[0].tasks[1].request.gpuDevices: only together with gpuFraction or gpuMemoryMiB (the number of shared devices)"
        ],
    ),
    (
        "gpu_groups_fewer_than_devices",
        [(SHARED, "request: {gpuDevices: 2, gpuFraction: 0.5,")],
        [
            "F:64:16: jobs[0].tasks[0].gpuGroups: must name 2 distinct devices (gpuDevices: 2), got 1"
        ],
    ),
    (
        "gpu_groups_more_than_devices",
        [
            (
                RUNNING_SHARED,
                "    gpuGroups: [node0/0, node0/1, node0/2]\n    request: {gpuDevices: 2, gpuFraction: 0.5,",
            )
        ],
        [
            "F:64:16: jobs[0].tasks[0].gpuGroups: must name 2 distinct devices (gpuDevices: 2), got 3"
        ],
    ),
    (
        "gpu_groups_two_for_a_single_device",
        [("gpuGroups: [node0/0]", "gpuGroups: [node0/0, node0/1]")],
        [
            "F:64:16: jobs[0].tasks[0].gpuGroups: must name exactly one device (the request has no gpuDevices), got 2"
        ],
    ),
    (
        "gpu_groups_repeated_device",
        [
            (
                RUNNING_SHARED,
                "    gpuGroups: [node0/0, node0/0]\n    request: {gpuDevices: 2, gpuFraction: 0.5,",
            )
        ],
        ["F:64:26: jobs[0].tasks[0].gpuGroups[1]: device 'node0/0' is listed twice"],
    ),
    # --- minSubGroup
    (
        "min_subgroup_on_a_job_without_subgroups",
        [("  minAvailable: 1\n  topology:", "  minAvailable: 1\n  minSubGroup: 1\n  topology:")],
        [
            "F:59:16: jobs[0].minSubGroup: only on a job with subGroups (the number of top-level subgroups that must be satisfied); this job has none"
        ],
    ),
    (
        "min_subgroup_job_negative",
        [("  createdMinutesAgo: 1\n", "  createdMinutesAgo: 1\n  minSubGroup: -1\n")],
        ["F:74:16: jobs[1].minSubGroup: must be an integer >= 0, got -1"],
    ),
    (
        "min_subgroup_job_not_an_integer",
        [("  createdMinutesAgo: 1\n", "  createdMinutesAgo: 1\n  minSubGroup: 0.5\n")],
        ["F:74:16: jobs[1].minSubGroup: must be an integer >= 0, got 0.5"],
    ),
    (
        "min_subgroup_on_a_leaf",
        [
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minAvailable: 1, minSubGroup: 1}",
            )
        ],
        [
            "F:76:64: jobs[1].subGroups[1].minSubGroup: only on an inner subgroup (the parent of another subgroup); a leaf has minAvailable"
        ],
    ),
    (
        "min_subgroup_on_a_leaf_without_min_available",
        [
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minSubGroup: 1}",
            )
        ],
        [
            "F:76:5: jobs[1].subGroups[1].minAvailable: required on a leaf subgroup",
            "F:76:47: jobs[1].subGroups[1].minSubGroup: only on an inner subgroup (the parent of another subgroup); a leaf has minAvailable",
        ],
    ),
    (
        "min_subgroup_inner_string",
        [("{name: inner, parent: null}", "{name: inner, parent: null, minSubGroup: '1'}")],
        ["F:75:46: jobs[1].subGroups[0].minSubGroup: must be an integer >= 0, got '1'"],
    ),
    (
        "min_subgroup_inner_negative",
        [("{name: inner, parent: null}", "{name: inner, parent: null, minSubGroup: -2}")],
        ["F:75:46: jobs[1].subGroups[0].minSubGroup: must be an integer >= 0, got -2"],
    ),
    (
        "leaf_min_available_negative",
        [
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minAvailable: -1}",
            )
        ],
        ["F:76:48: jobs[1].subGroups[1].minAvailable: must be an integer >= 0, got -1"],
    ),
    # --- topologies[].aliases
    (
        "alias_of_an_unknown_level",
        [(TOPO, TOPO + "  aliases: {r: row}\n")],
        [
            "F:18:16: topologies[0].aliases.r: 'row' is not a level of this topology (levels: zone, rack)"
        ],
    ),
    (
        "alias_equal_to_a_level",
        [(TOPO, TOPO + "  aliases: {zone: rack}\n")],
        [
            "F:18:13: topologies[0].aliases.zone: alias 'zone' equals the node label key of a level; an alias must differ from every level"
        ],
    ),
    (
        "two_aliases_for_one_level",
        [(TOPO, TOPO + "  aliases: {r: rack, rk: rack}\n")],
        [
            "F:18:26: topologies[0].aliases.rk: level 'rack' already has the alias 'r' (one alias per level)"
        ],
    ),
    (
        "alias_repeated",
        [(TOPO, TOPO + "  aliases: {r: rack, r: zone}\n")],
        ["F:18:22: topologies[0].aliases.r: key 'r' is repeated in this mapping"],
    ),
    (
        "aliases_not_a_mapping",
        [(TOPO, TOPO + "  aliases: [rack]\n")],
        ["F:18:12: topologies[0].aliases: must be a mapping of strings to strings, got a list"],
    ),
    (
        "alias_of_an_empty_level",
        [(TOPO, TOPO + "  aliases: {r: ''}\n")],
        ["F:18:16: topologies[0].aliases.r: must be a level of the topology, got ''"],
    ),
    (
        "aliases_with_bad_levels_report_the_levels_only",
        [(TOPO, "topologies:\n- name: topo\n  levels: []\n  aliases: {r: rack}\n")],
        ["F:17:11: topologies[0].levels: must be a non-empty list"],
    ),
    (
        "unknown_level_lists_the_aliases",
        [
            (TOPO, TOPO + "  aliases: {z: zone}\n"),
            ("requiredLevel: rack}", "requiredLevel: row}"),
        ],
        [
            "F:60:45: jobs[0].topology.requiredLevel: 'row' is not a level of topology 'topo' (levels: zone, rack; aliases: z)"
        ],
    ),
    (
        "alias_of_another_topology",
        [
            (TOPO, TOPO + "- name: other\n  levels: [zone, rack]\n  aliases: {r: rack}\n"),
            ("requiredLevel: rack}", "requiredLevel: r}"),
        ],
        [
            "F:62:45: jobs[0].topology.requiredLevel: 'r' is not a level of topology 'topo' (levels: zone, rack)"
        ],
    ),
    (
        "subgroup_level_alias_unknown",
        [
            (TOPO, TOPO + "  aliases: {r: rack}\n"),
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minAvailable: 1, topology: {topology: topo, preferredLevel: z}}",
            ),
        ],
        [
            "F:77:94: jobs[1].subGroups[1].topology.preferredLevel: 'z' is not a level of topology 'topo' (levels: zone, rack; aliases: r)"
        ],
    ),
]


def _edit(edits: list[tuple[str, str]]) -> str:
    text = BASE
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} must occur exactly once"
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(("edits", "lines"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(tmp_path: Path, edits: list[tuple[str, str]], lines: list[str]) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(_edit(edits))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert caught.value.lines == [line.replace("F:", f"{path}:", 1) for line in lines]


def test_the_command_prints_the_lines_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(_edit([(TOPO, TOPO + "  aliases: {zone: rack}\n")]))
    outcome = execute(str(path), output="json", check=True)
    assert (outcome.code, outcome.stdout) == (2, "")
    assert outcome.stderr.startswith(f"{path}:18:13: topologies[0].aliases.zone: ")


# --- valid files and what they become in the core's snapshot


def _valid(tmp_path: Path, edits: list[tuple[str, str]]) -> Scenario:
    path = tmp_path / "valid.yaml"
    path.write_text(_edit(edits))
    return load_scenario(str(path))


def test_multi_device_request_reaches_the_core(tmp_path: Path) -> None:
    scenario = _valid(
        tmp_path,
        [
            (
                RUNNING_SHARED,
                "    gpuGroups: [node0/1, node0/0]\n    request: {gpuDevices: 2, gpuFraction: 0.5,",
            ),
            ("request: {gpus: 1,", "request: {gpuMemoryMiB: 30, gpuDevices: 3,"),
        ],
    )
    running, pending, _ = scenario.tasks()
    assert running.gpu_groups == ("node0/1", "node0/0")
    assert (running.request.gpu_devices, pending.request.gpu_devices) == (2, 3)
    tasks = {t.uid: t for j in to_snapshot(scenario).jobs for t in j.tasks}
    assert tasks["job0-0"].gpu == core.GpuRequest(fraction=0.5, num_devices=2)
    assert tasks["job0-0"].gpu_groups == ("node0/1", "node0/0")
    assert tasks["job0-1"].gpu == core.GpuRequest(memory_mib=30, num_devices=3)
    assert tasks["job1-0"].gpu.num_devices == 1


def test_gpu_devices_one_is_the_default(tmp_path: Path) -> None:
    explicit = _valid(tmp_path, [(SHARED, "request: {gpuDevices: 1, gpuFraction: 0.5,")])
    assert next(explicit.tasks()).request.gpu_devices == 1
    tasks = {t.uid: t for j in to_snapshot(explicit).jobs for t in j.tasks}
    assert tasks["job0-0"].gpu == core.GpuRequest(fraction=0.5)


def test_min_subgroup_reaches_the_core_and_leaves_may_need_zero(tmp_path: Path) -> None:
    scenario = _valid(
        tmp_path,
        [
            ("  createdMinutesAgo: 1\n", "  createdMinutesAgo: 1\n  minSubGroup: 1\n"),
            ("{name: inner, parent: null}", "{name: inner, parent: null, minSubGroup: 0}"),
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minAvailable: 0}\n  - {name: solo, parent: null, minAvailable: 0}",
            ),
        ],
    )
    job1 = scenario.jobs[1]
    assert job1.min_subgroup == 1
    assert [(s.name, s.min_subgroup, s.min_available) for s in job1.subgroups] == [
        ("inner", 0, None),
        ("leafa", None, 0),
        ("solo", None, 0),
    ]
    spec = to_snapshot(scenario).jobs[1]
    assert spec.min_subgroup == 1
    assert [(s.name, s.min_subgroup, s.min_available) for s in spec.subgroups] == [
        ("inner", 0, None),
        ("leafa", None, 0),
        ("solo", None, 0),
    ]
    assert to_snapshot(scenario).jobs[0].min_subgroup is None


def test_aliases_are_accepted_for_levels_and_passed_to_the_core(tmp_path: Path) -> None:
    scenario = _valid(
        tmp_path,
        [
            (TOPO, TOPO + "  aliases: {rk: rack, z: zone}\n"),
            ("requiredLevel: rack}", "requiredLevel: rk, preferredLevel: z}"),
            (
                "{name: leafa, parent: inner, minAvailable: 1}",
                "{name: leafa, parent: inner, minAvailable: 1, topology: {topology: topo, requiredLevel: zone, preferredLevel: rk}}",
            ),
        ],
    )
    assert scenario.topologies[0].aliases == (("rk", "rack"), ("z", "zone"))
    assert scenario.topologies[0].level_label("rk") == "rack"
    assert scenario.topologies[0].level_label("zone") == "zone"
    assert scenario.topologies[0].level_label("rack2") is None
    snap = to_snapshot(scenario)
    assert snap.topologies == [
        core.TopologySpec(name="topo", levels=["zone", "rack"], aliases={"rk": "rack", "z": "zone"})
    ]
    assert snap.jobs[0].topology == core.TopologyConstraint("topo", "rk", "z")
    assert snap.jobs[1].subgroups[1].topology == core.TopologyConstraint("topo", "zone", "rk")


def test_an_alias_schedules_like_its_label(write_scenario: Callable[..., str]) -> None:
    """The same job under ``requiredLevel: rack`` and under its alias gives the same outcome."""
    nodes = [
        node("n0", 2, labels={"rack": "r1"}),
        node("n1", 2, labels={"rack": "r2"}),
        node("n2", 2, labels={"rack": "r2"}),
    ]

    def run(level: str) -> str:
        gang = job(
            "j",
            [task("t0", request={"gpus": 2}), task("t1", request={"gpus": 2})],
            topology={"topology": "topo", "requiredLevel": level},
        )
        data = document(
            nodes,
            [gang],
            topologies=[{"name": "topo", "levels": ["rack"], "aliases": {"r": "rack"}}],
        )
        outcome = execute(write_scenario(data), output="json")
        assert outcome.code == 0, outcome.stderr
        return outcome.stdout

    by_label, by_alias = run("rack"), run("r")
    assert by_label == by_alias
    result = json.loads(by_label)["rounds"][0]["result"]
    assert {t["status"] for t in result["tasks"].values()} == {"Binding"}
    assert {t["node"] for t in result["tasks"].values()} == {"n1", "n2"}  # rack r2, not r1


def test_a_placed_multi_device_task_holds_every_device(write_scenario: Callable[..., str]) -> None:
    """Node figures count each distinct device of a multi-device task once."""
    shared = {"gpuFraction": 0.5, "gpuDevices": 2}
    data = document(
        [node("n0", 4)],
        [
            job(
                "a",
                [task("a0", "Running", node="n0", request=shared, gpuGroups=["n0/0", "n0/1"])],
            ),
            job(
                "b",
                [task("b0", "Releasing", node="n0", request=shared, gpuGroups=["n0/1", "n0/2"])],
            ),
        ],
        actions=["stalegangeviction"],
    )
    outcome = execute(write_scenario(data), output="json")
    assert outcome.code == 0, outcome.stderr
    result = json.loads(outcome.stdout)["rounds"][0]["result"]
    assert result["tasks"]["a0"]["gpuGroups"] == ["n0/0", "n0/1"]
    # devices 0, 1, 2 are used; only device 2 has nothing but releasing tasks on it
    assert result["nodes"] == {"n0": {"idleGpus": 1, "releasingGpus": 1}}


def test_preferred_terms_reach_the_core(tmp_path: Path) -> None:
    scenario = _valid(
        tmp_path,
        [
            (
                PENDING,
                "    preferredNodeAffinity: [{weight: 30, key: zone, operator: In, values: [a, b]}]\n"
                "    preferredPodAffinity: [{weight: 7, topologyKey: zone, matchLabels: {app: db}}]\n"
                "    preferredPodAntiAffinity: [{weight: 2, topologyKey: host, matchLabels: {app: x}}]\n"
                + PENDING,
            )
        ],
    )
    tasks = {t.uid: t for j in to_snapshot(scenario).jobs for t in j.tasks}
    pending = tasks["job0-1"]
    assert pending.preferred_node_affinity == (
        core.WeightedNodeTerm(
            30, core.NodeSelectorTerm((core.Requirement("zone", "In", ("a", "b")),))
        ),
    )
    assert pending.preferred_pod_affinity == (
        core.WeightedPodAffinityTerm(7, core.PodAffinityTerm("zone", (("app", "db"),))),
    )
    assert pending.preferred_pod_anti_affinity == (
        core.WeightedPodAffinityTerm(2, core.PodAffinityTerm("host", (("app", "x"),))),
    )
    assert tasks["job0-0"].preferred_node_affinity == ()
