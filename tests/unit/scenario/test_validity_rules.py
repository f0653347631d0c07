# ruff: noqa: E501
"""Every validity rule of docs/scenario-format.md, each with the exact error lines it produces.

A case replaces one piece of ``data/base.yaml`` (a valid file) and lists every line ``kai
simulate`` must print on standard error, ``F`` standing for the file name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.commands.simulate import execute
from kai.scenario import ScenarioError, load_scenario

BASE = (Path(__file__).parent / "data" / "base.yaml").read_text()

CASES: list[tuple[str, str, str, list[str]]] = [
    (
        "format_version",
        "formatVersion: 1",
        "formatVersion: 2",
        [
            "F:1:16: formatVersion: must be 1, got 2",
        ],
    ),
    (
        "rounds_missing",
        "mode: single-session",
        "mode: rounds",
        [
            "F:1:1: rounds: required key is missing (mode is rounds)",
        ],
    ),
    (
        "rounds_in_single",
        "mode: single-session\n",
        "mode: single-session\nrounds: {untilMatch: 1, afterMatch: 0}\n",
        [
            "F:4:9: rounds: only allowed with mode: rounds (mode is single-session)",
        ],
    ),
    (
        "rounds_bad_values",
        "mode: single-session\n",
        "mode: rounds\nrounds: {untilMatch: 0, afterMatch: -1}\n",
        [
            "F:4:22: rounds.untilMatch: must be an integer >= 1, got 0",
            "F:4:37: rounds.afterMatch: must be an integer >= 0, got -1",
        ],
    ),
    (
        "mode_unknown",
        "mode: single-session",
        "mode: cycles",
        [
            "F:3:7: mode: must be one of single-session, rounds, got 'cycles'",
        ],
    ),
    (
        "unknown_top_key",
        "id: unit/base\n",
        "id: unit/base\nident: x\n",
        [
            "F:3:1: ident: unknown key 'ident'; allowed keys: actions, config, expected, formatVersion, id, jobs, mode, nodes, notes, queues, rounds, source, topologies",
        ],
    ),
    (
        "missing_top_key",
        "actions: [allocate]\n",
        "",
        [
            "F:1:1: actions: required key is missing",
        ],
    ),
    (
        "empty_id",
        "id: unit/base",
        "id: ''",
        [
            "F:2:5: id: must be a non-empty string, got ''",
        ],
    ),
    (
        "action_unknown",
        "actions: [allocate]",
        "actions: [allocate, alocate]",
        [
            "F:4:21: actions[1]: must be one of allocate, consolidation, reclaim, preempt, stalegangeviction, got 'alocate'",
        ],
    ),
    (
        "actions_empty",
        "actions: [allocate]",
        "actions: []",
        [
            "F:4:10: actions: must be a non-empty list",
        ],
    ),
    (
        "config_missing_key",
        "  fairShareKValue: 1\n",
        "",
        [
            "F:6:3: config.fairShareKValue: required key is missing",
        ],
    ),
    (
        "placement_value",
        "placement: {gpu: binpack, cpu: binpack}",
        "placement: {gpu: pack, cpu: binpack}",
        [
            "F:9:20: config.placement.gpu: must be one of binpack, spread, got 'pack'",
        ],
    ),
    (
        "placement_string",
        "placement: {gpu: binpack, cpu: binpack}",
        "placement: binpack",
        [
            "F:9:14: config.placement: must be none or a mapping {gpu: binpack|spread, cpu: ...}, got 'binpack'",
        ],
    ),
    (
        "sharing_placement",
        "gpuSharingPlacement: pack",
        "gpuSharingPlacement: packed",
        [
            "F:10:24: config.gpuSharingPlacement: must be one of pack, spread, none, got 'packed'",
        ],
    ),
    (
        "kai_plugins_empty",
        "kaiPlugins: default",
        "kaiPlugins: []",
        [
            "F:6:15: config.kaiPlugins: must be a non-empty list",
        ],
    ),
    (
        "kai_plugins_name",
        "kaiPlugins: default",
        "kaiPlugins: defaults",
        [
            "F:6:15: config.kaiPlugins: must be one of default, default-without-predicates, got 'defaults'",
        ],
    ),
    (
        "grace_negative",
        "stalenessGracePeriodSeconds: 60",
        "stalenessGracePeriodSeconds: -1",
        [
            "F:11:32: config.stalenessGracePeriodSeconds: must be a number >= 0, got -1",
        ],
    ),
    (
        "preemptees",
        "maxConsolidationPreemptees: 16",
        "maxConsolidationPreemptees: -2",
        [
            "F:12:31: config.maxConsolidationPreemptees: must be a number >= 0 or -1, got -2",
        ],
    ),
    (
        "predicates_not_bool",
        "predicates: true",
        "predicates: 'yes'",
        [
            "F:7:15: config.predicates: must be true or false, got 'yes'",
        ],
    ),
    (
        "topology_levels_empty",
        "levels: [zone, rack]",
        "levels: []",
        [
            "F:17:11: topologies[0].levels: must be a non-empty list",
        ],
    ),
    (
        "topology_duplicate",
        "topologies:\n- name: topo\n  levels: [zone, rack]\n",
        "topologies:\n- name: topo\n  levels: [zone, rack]\n- name: topo\n  levels: [zone]\n",
        [
            "F:18:9: topologies[1].name: topology 'topo' is defined twice (first at topologies[0])",
            "F:61:45: jobs[0].topology.requiredLevel: 'rack' is not a level of topology 'topo' (levels: zone)",
        ],
    ),
    (
        "node_duplicate",
        "- name: node1",
        "- name: node0",
        [
            "F:26:9: nodes[1].name: node 'node0' is defined twice (first at nodes[0])",
            "F:85:40: expected.tasks.job1-0.kaiNode: node 'node1' does not exist",
        ],
    ),
    (
        "mixed_mig_gpus",
        "  gpus: 0\n",
        "  gpus: 1\n",
        [
            "F:27:9: nodes[1].gpus: must be 0 on a node with MIG strategy mixed, got 1",
        ],
    ),
    (
        "node_cpu_negative",
        "  cpuMillis: 1000\n  memoryBytes: 1000\n  gpuMemoryMiB: 100\n  maxPods: 10\n  labels: {zone",
        "  cpuMillis: -5\n  memoryBytes: 1000\n  gpuMemoryMiB: 100\n  maxPods: 10\n  labels: {zone",
        [
            "F:21:14: nodes[0].cpuMillis: must be a number >= 0, got -5",
        ],
    ),
    (
        "node_gpus_float",
        "  gpus: 2\n",
        "  gpus: 1.5\n",
        [
            "F:20:9: nodes[0].gpus: must be an integer >= 0, got 1.5",
        ],
    ),
    (
        "node_gpus_bool",
        "  gpus: 2\n",
        "  gpus: true\n",
        [
            "F:20:9: nodes[0].gpus: must be an integer >= 0, got true",
        ],
    ),
    (
        "node_missing_max_pods",
        "  maxPods: 10\n  labels: {zone",
        "  labels: {zone",
        [
            "F:19:3: nodes[0].maxPods: required key is missing",
        ],
    ),
    (
        "label_not_string",
        "{zone: z1, rack: r1}",
        "{zone: z1, rack: 1}",
        [
            "F:25:28: nodes[0].labels.rack: must be a string, got 1",
        ],
    ),
    (
        "mig_strategy",
        "strategy: mixed",
        "strategy: mix",
        [
            "F:34:15: nodes[1].mig.strategy: must be one of single, mixed, got 'mix'",
        ],
    ),
    (
        "mig_device_count",
        "devices: {nvidia.com/mig-1g.10gb: 7}",
        "devices: {nvidia.com/mig-1g.10gb: -1}",
        [
            "F:36:39: nodes[1].mig.devices.nvidia.com/mig-1g.10gb: must be an integer >= 0, got -1",
        ],
    ),
    (
        "queue_parent_unknown",
        "parent: root",
        "parent: rooot",
        [
            "F:46:11: queues[1].parent: queue 'rooot' does not exist",
        ],
    ),
    (
        "queue_cycle",
        "- name: root\n  parent: null",
        "- name: root\n  parent: leaf",
        [
            "F:39:11: queues[0].parent: the queue tree has a cycle: root -> leaf -> root",
            "F:54:10: jobs[0].queue: queue 'leaf' has child queues; jobs belong to leaf queues",
            "F:70:10: jobs[1].queue: queue 'leaf' has child queues; jobs belong to leaf queues",
        ],
    ),
    (
        "queue_duplicate",
        "- name: leaf\n",
        "- name: root\n",
        [
            "F:45:9: queues[1].name: queue 'root' is defined twice (first at queues[0])",
            "F:46:11: queues[1].parent: a queue cannot be its own parent",
            "F:54:10: jobs[0].queue: queue 'leaf' does not exist",
            "F:70:10: jobs[1].queue: queue 'leaf' does not exist",
        ],
    ),
    (
        "queue_quota",
        "gpu: {quota: 1, limit: 2",
        "gpu: {quota: -2, limit: 2",
        [
            "F:49:16: queues[1].gpu.quota: must be a number >= 0 or -1, got -2",
        ],
    ),
    (
        "queue_resource_missing",
        "gpu: {quota: 1, limit: 2, overQuotaWeight: 1}",
        "gpu: {quota: 1, limit: 2}",
        [
            "F:49:8: queues[1].gpu.overQuotaWeight: required key is missing",
        ],
    ),
    (
        "queue_priority_float",
        "  priority: 100\n  creationRank: 1",
        "  priority: 1.5\n  creationRank: 1",
        [
            "F:47:13: queues[1].priority: must be an integer, got 1.5",
        ],
    ),
    (
        "queue_implicit",
        "  creationRank: 0\n",
        "  creationRank: 0\n  implicit: 1\n",
        [
            "F:42:13: queues[0].implicit: must be true or false, got 1",
        ],
    ),
    (
        "job_queue_not_leaf",
        "- name: job0\n  queue: leaf",
        "- name: job0\n  queue: root",
        [
            "F:54:10: jobs[0].queue: queue 'root' has child queues; jobs belong to leaf queues",
        ],
    ),
    (
        "job_queue_unknown",
        "- name: job0\n  queue: leaf",
        "- name: job0\n  queue: leaf9",
        [
            "F:54:10: jobs[0].queue: queue 'leaf9' does not exist",
        ],
    ),
    (
        "job_duplicate",
        "- name: job1\n",
        "- name: job0\n",
        [
            "F:69:9: jobs[1].name: job 'job0' is defined twice (first at jobs[0])",
        ],
    ),
    (
        "job_both_gang_keys",
        "  createdMinutesAgo: 1\n",
        "  createdMinutesAgo: 1\n  minAvailable: 1\n",
        [
            "F:76:3: jobs[1].subGroups: a job has minAvailable or subGroups, not both",
        ],
    ),
    (
        "job_no_gang_key",
        "  minAvailable: 1\n  topology:",
        "  topology:",
        [
            "F:53:3: jobs[0].minAvailable: a job needs minAvailable or subGroups (neither is given)",
        ],
    ),
    (
        "job_min_available_too_big",
        "  minAvailable: 1\n  topology:",
        "  minAvailable: 3\n  topology:",
        [
            "F:58:17: jobs[0].minAvailable: must not exceed the number of tasks (2), got 3",
        ],
    ),
    (
        "job_created_negative",
        "createdMinutesAgo: 2",
        "createdMinutesAgo: -2",
        [
            "F:57:22: jobs[0].createdMinutesAgo: must be a number >= 0, got -2",
        ],
    ),
    (
        "job_stale_negative",
        "createdMinutesAgo: 2\n",
        "createdMinutesAgo: 2\n  staleForSeconds: -1\n",
        [
            "F:58:20: jobs[0].staleForSeconds: must be a number >= 0, got -1",
        ],
    ),
    (
        "job_deleted_not_bool",
        "createdMinutesAgo: 2\n",
        "createdMinutesAgo: 2\n  deleted: 'no'\n",
        [
            "F:58:12: jobs[0].deleted: must be true or false, got 'no'",
        ],
    ),
    (
        "job_preemptible_missing",
        "  preemptible: true\n  createdMinutesAgo: 2",
        "  createdMinutesAgo: 2",
        [
            "F:53:3: jobs[0].preemptible: required key is missing",
        ],
    ),
    (
        "inner_subgroup_min",
        "{name: inner, parent: null}",
        "{name: inner, parent: null, minAvailable: 1}",
        [
            "F:75:47: jobs[1].subGroups[0].minAvailable: an inner subgroup (the parent of another subgroup) has no minAvailable",
        ],
    ),
    (
        "leaf_subgroup_no_min",
        "{name: leafa, parent: inner, minAvailable: 1}",
        "{name: leafa, parent: inner}",
        [
            "F:76:5: jobs[1].subGroups[1].minAvailable: required on a leaf subgroup",
        ],
    ),
    (
        "subgroup_parent_unknown",
        "parent: inner,",
        "parent: outer,",
        [
            "F:75:5: jobs[1].subGroups[0].minAvailable: required on a leaf subgroup",
            "F:76:27: jobs[1].subGroups[1].parent: subgroup 'outer' does not exist in this job",
        ],
    ),
    (
        "subgroup_duplicate",
        "  - {name: leafa, parent: inner, minAvailable: 1}\n",
        "  - {name: leafa, parent: inner, minAvailable: 1}\n  - {name: leafa, parent: inner, minAvailable: 1}\n",
        [
            "F:77:12: jobs[1].subGroups[2].name: subgroup 'leafa' is defined twice in this job",
        ],
    ),
    (
        "subgroup_cycle",
        "{name: inner, parent: null}",
        "{name: inner, parent: leafa}",
        [
            "F:75:27: jobs[1].subGroups[0].parent: the subgroup tree has a cycle",
            "F:76:27: jobs[1].subGroups[1].parent: the subgroup tree has a cycle",
            "F:76:48: jobs[1].subGroups[1].minAvailable: an inner subgroup (the parent of another subgroup) has no minAvailable",
        ],
    ),
    (
        "task_subgroup_inner",
        "subGroup: leafa",
        "subGroup: inner",
        [
            "F:80:15: jobs[1].tasks[0].subGroup: subgroup 'inner' is not a leaf subgroup of job 'job1'",
        ],
    ),
    (
        "task_subgroup_unknown",
        "subGroup: leafa",
        "subGroup: leafz",
        [
            "F:80:15: jobs[1].tasks[0].subGroup: subgroup 'leafz' does not exist in job 'job1'",
        ],
    ),
    (
        "task_subgroup_missing",
        "    subGroup: leafa\n",
        "",
        [
            "F:78:5: jobs[1].tasks[0].subGroup: required: job 'job1' has subGroups",
        ],
    ),
    (
        "task_subgroup_without_subgroups",
        "    status: Pending\n    request: {gpus: 1",
        "    status: Pending\n    subGroup: leafa\n    request: {gpus: 1",
        [
            "F:68:15: jobs[0].tasks[1].subGroup: job 'job0' has no subGroups",
        ],
    ),
    (
        "topology_unknown",
        "{topology: topo,",
        "{topology: topox,",
        [
            "F:59:24: jobs[0].topology.topology: topology 'topox' does not exist",
        ],
    ),
    (
        "topology_level_unknown",
        "requiredLevel: rack",
        "requiredLevel: row",
        [
            "F:59:45: jobs[0].topology.requiredLevel: 'row' is not a level of topology 'topo' (levels: zone, rack)",
        ],
    ),
    (
        "topology_no_level",
        "{topology: topo, requiredLevel: rack}",
        "{topology: topo}",
        [
            "F:59:13: jobs[0].topology: needs requiredLevel or preferredLevel (or both)",
        ],
    ),
    (
        "task_duplicate",
        "  - name: job1-0\n",
        "  - name: job0-1\n",
        [
            "F:78:11: jobs[1].tasks[0].name: task 'job0-1' is defined twice (first at jobs[0].tasks[1])",
            "F:85:5: expected.tasks.job1-0: task 'job1-0' does not exist",
        ],
    ),
    (
        "task_status",
        "    status: Pending\n    request: {gpus: 1",
        "    status: Waiting\n    request: {gpus: 1",
        [
            "F:67:13: jobs[0].tasks[1].status: must be one of Pending, Running, Releasing, Binding, Pipelined, Allocated, Bound, Failed, Gated, Succeeded, Unknown, Deleted, got 'Waiting'",
        ],
    ),
    (
        "placed_without_node",
        "    node: node0\n",
        "",
        [
            "F:61:5: jobs[0].tasks[0].node: required for a task with status Running",
        ],
    ),
    (
        "placed_null_node",
        "    node: node0\n",
        "    node: null\n",
        [
            "F:63:11: jobs[0].tasks[0].node: required for a task with status Running, got null",
        ],
    ),
    (
        "unplaced_with_node",
        "    status: Pending\n    request: {gpus: 1",
        "    status: Pending\n    node: node0\n    request: {gpus: 1",
        [
            "F:68:11: jobs[0].tasks[1].node: a task with status Pending is not placed and has no node",
        ],
    ),
    (
        "task_node_unknown",
        "    node: node0\n",
        "    node: node9\n",
        [
            "F:63:11: jobs[0].tasks[0].node: node 'node9' does not exist",
        ],
    ),
    (
        "request_two_forms",
        "{gpus: 1, cpuMillis",
        "{gpus: 1, gpuMemoryMiB: 10, cpuMillis",
        [
            "F:68:38: jobs[0].tasks[1].request.gpuMemoryMiB: at most one of gpus, gpuFraction, gpuMemoryMiB; found gpus, gpuMemoryMiB",
        ],
    ),
    (
        "request_missing_memory",
        "{gpus: 1, cpuMillis: 10, memoryBytes: 10}",
        "{gpus: 1, cpuMillis: 10}",
        [
            "F:68:14: jobs[0].tasks[1].request.memoryBytes: required key is missing",
        ],
    ),
    (
        "fraction_too_big",
        "gpuFraction: 0.5",
        "gpuFraction: 1.5",
        [
            "F:65:28: jobs[0].tasks[0].request.gpuFraction: must be > 0 and < 1, got 1.5",
        ],
    ),
    (
        "fraction_zero",
        "gpuFraction: 0.5",
        "gpuFraction: 0",
        [
            "F:65:28: jobs[0].tasks[0].request.gpuFraction: must be > 0 and < 1, got 0",
        ],
    ),
    (
        "gpu_groups_missing",
        "    gpuGroups: [node0/0]\n",
        "",
        [
            "F:61:5: jobs[0].tasks[0].gpuGroups: required on a placed shared-GPU task",
        ],
    ),
    (
        "gpu_groups_on_pending",
        "    status: Pending\n    request: {gpus: 1",
        "    status: Pending\n    gpuGroups: [node0/0]\n    request: {gpus: 1",
        [
            "F:68:16: jobs[0].tasks[1].gpuGroups: only placed shared-GPU tasks have gpuGroups; this task is not placed",
        ],
    ),
    (
        "gpu_groups_prefix",
        "gpuGroups: [node0/0]",
        "gpuGroups: [node1/0]",
        [
            "F:64:17: jobs[0].tasks[0].gpuGroups[0]: must be 'node0/<id>' (the task's node), got 'node1/0'",
        ],
    ),
    (
        "gpu_groups_empty",
        "gpuGroups: [node0/0]",
        "gpuGroups: []",
        [
            "F:64:16: jobs[0].tasks[0].gpuGroups: must name the device of a placed shared-GPU task",
        ],
    ),
    (
        "mig_request_with_gpus",
        "{mig: {nvidia.com/mig-1g.10gb: 1},",
        "{gpus: 1, mig: {nvidia.com/mig-1g.10gb: 1},",
        [
            "F:81:29: jobs[1].tasks[0].request.mig: a MIG request comes with gpus: 0 or without gpus, and no other GPU form",
        ],
    ),
    (
        "mig_request_count_zero",
        "{mig: {nvidia.com/mig-1g.10gb: 1},",
        "{mig: {nvidia.com/mig-1g.10gb: 0},",
        [
            "F:81:45: jobs[1].tasks[0].request.mig.nvidia.com/mig-1g.10gb: must be an integer >= 1, got 0",
        ],
    ),
    (
        "node_affinity_operator",
        "    subGroup: leafa\n",
        "    subGroup: leafa\n    nodeAffinity: {key: zone, operator: NotIn, values: [z1]}\n",
        [
            "F:81:41: jobs[1].tasks[0].nodeAffinity.operator: must be one of In, got 'NotIn'",
        ],
    ),
    (
        "node_affinity_values_empty",
        "    subGroup: leafa\n",
        "    subGroup: leafa\n    nodeAffinity: {key: zone, operator: In, values: []}\n",
        [
            "F:81:53: jobs[1].tasks[0].nodeAffinity.values: must be a non-empty list",
        ],
    ),
    (
        "pod_affinity_missing_key",
        "    subGroup: leafa\n",
        "    subGroup: leafa\n    podAffinity: {matchLabels: {app: a}}\n",
        [
            "F:81:18: jobs[1].tasks[0].podAffinity.topologyKey: required key is missing",
        ],
    ),
    (
        "task_priority_float",
        "    subGroup: leafa\n",
        "    subGroup: leafa\n    priority: 1.5\n",
        [
            "F:81:15: jobs[1].tasks[0].priority: must be an integer, got 1.5",
        ],
    ),
    (
        "expected_node_and_kai_node",
        "job1-0: {status: Binding, kaiNode: node1}",
        "job1-0: {status: Binding, node: node1, kaiNode: node1}",
        [
            "F:85:53: expected.tasks.job1-0.kaiNode: an expectation has node or kaiNode, not both",
        ],
    ),
    (
        "expected_node_unplaced",
        "job1-0: {status: Binding, kaiNode: node1}",
        "job1-0: {status: Pending, node: node1}",
        [
            "F:85:37: expected.tasks.job1-0.node: a task expected Pending is not placed and has no node",
        ],
    ),
    (
        "expected_unknown_task",
        "    job0-0: {status",
        "    job9-0: {status",
        [
            "F:84:5: expected.tasks.job9-0: task 'job9-0' does not exist",
        ],
    ),
    (
        "expected_unknown_node_key",
        "    node0: {idleGpus",
        "    node7: {idleGpus",
        [
            "F:87:5: expected.nodes.node7: node 'node7' does not exist",
        ],
    ),
    (
        "expected_unknown_node_value",
        "kaiNode: node1}",
        "kaiNode: node8}",
        [
            "F:85:40: expected.tasks.job1-0.kaiNode: node 'node8' does not exist",
        ],
    ),
    (
        "expected_status",
        "job0-0: {status: Running",
        "job0-0: {status: Runing",
        [
            "F:84:22: expected.tasks.job0-0.status: must be one of Pending, Running, Releasing, Binding, Pipelined, Allocated, Bound, Failed, Gated, Succeeded, Unknown, Deleted, got 'Runing'",
        ],
    ),
    (
        "expected_figures_missing",
        "{idleGpus: 1, releasingGpus: 0}",
        "{idleGpus: 1}",
        [
            "F:87:12: expected.nodes.node0.releasingGpus: required key is missing",
        ],
    ),
    (
        "repeated_key",
        "  priority: 50\n  preemptible: true\n  createdMinutesAgo: 2",
        "  priority: 50\n  priority: 50\n  preemptible: true\n  createdMinutesAgo: 2",
        [
            "F:56:3: jobs[0].priority: key 'priority' is repeated in this mapping",
        ],
    ),
]


def test_base_is_valid() -> None:
    scenario = load_scenario(str(Path(__file__).parent / "data" / "base.yaml"))
    assert scenario.id == "unit/base"
    assert [t.name for t in scenario.tasks()] == ["job0-0", "job0-1", "job1-0"]


@pytest.mark.parametrize(("old", "new", "lines"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(tmp_path: Path, old: str, new: str, lines: list[str]) -> None:
    assert BASE.count(old) == 1, "the case must change exactly one place of base.yaml"
    path = tmp_path / "case.yaml"
    path.write_text(BASE.replace(old, new))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert caught.value.lines == [line.replace("F:", f"{path}:", 1) for line in lines]


@pytest.mark.parametrize(
    ("old", "new", "lines"), [c[1:] for c in CASES[:3]], ids=[c[0] for c in CASES[:3]]
)
def test_command_exits_2_with_the_lines_on_stderr(
    tmp_path: Path, old: str, new: str, lines: list[str]
) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(BASE.replace(old, new))
    outcome = execute(str(path), output="json")
    assert outcome.code == 2
    assert outcome.stdout == ""
    assert outcome.stderr == "".join(line.replace("F:", f"{path}:", 1) + "\n" for line in lines)
