"""Argo Workflows: the Workflow's queue and priority on its pods; a step's fan-out as a gang
when the template asks with ``kai.scheduler/gang-fan-out``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_grouping_kinds import group, uid_of
from workloads_fixtures import argo_pod, workflow

from kai.reconcilers.grouping import GroupingError

WF_LABELS = {"kai.scheduler/queue": "research", "priorityClassName": "build"}


def train(gang: str | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {
        "name": "train",
        "inputs": {"parameters": [{"name": "shard"}]},
        "container": {"image": "trainer:1", "args": ["{{inputs.parameters.shard}}"]},
    }
    if gang is not None:
        t["metadata"] = {"annotations": {"kai.scheduler/gang-fan-out": gang}}
    return t


def steps(step: dict[str, Any], parallelism: int | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "main", "steps": [[step]]}
    if parallelism:
        t["parallelism"] = parallelism
    return t


ITEMS = {
    "name": "shard",
    "template": "train",
    "arguments": {"parameters": [{"name": "shard", "value": "{{item}}"}]},
    "withItems": ["a", "b", "c", "d"],
}


def fan_out_pods(wf: dict[str, Any], template: dict[str, Any], n: int) -> list[dict[str, Any]]:
    name = wf["metadata"]["name"]
    items = "abcdefgh"
    return [
        argo_pod(wf, template, f"{name}[0].shard({i}:{items[i]})", f"{1000 + i}") for i in range(n)
    ]


def test_pods_get_the_workflows_queue_and_priority_one_group_each() -> None:
    t = train()
    wf = workflow("sweep-x1", [steps(ITEMS), t], labels=WF_LABELS)
    pods = fan_out_pods(wf, t, 4)
    pg, _, unknown = group(pods[0], wf)
    assert pg["metadata"]["name"] == f"pg-{pods[0]['metadata']['name']}-{uid_of(pods[0])}"
    assert pg["spec"]["queue"] == "research" and pg["spec"]["priorityClassName"] == "build"
    assert pg["spec"]["minMember"] == 1 and unknown is None


def test_with_items_fan_out_is_one_gang() -> None:
    t = train("true")
    wf = workflow("sweep-x2", [steps(ITEMS), t], labels=WF_LABELS)
    groups = [group(p, wf)[0] for p in fan_out_pods(wf, t, 4)]
    assert len({g["metadata"]["name"] for g in groups}) == 1
    pg = groups[0]
    assert pg["metadata"]["name"].startswith("pg-sweep-x2-shard-")
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["queue"] == "research"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Workflow"


def test_parallelism_caps_the_gang() -> None:
    t = train("true")
    wf = workflow("sweep-x3", [steps(ITEMS, parallelism=2), t])
    assert group(fan_out_pods(wf, t, 1)[0], wf)[0]["spec"]["minMember"] == 2
    wf = workflow("sweep-x4", [steps(ITEMS), t], parallelism=3)
    assert group(fan_out_pods(wf, t, 1)[0], wf)[0]["spec"]["minMember"] == 3


def test_with_param_counts_the_fan_out_nodes() -> None:
    t = train("true")
    step = {**{k: v for k, v in ITEMS.items() if k != "withItems"}}
    step["withParam"] = "{{steps.list.outputs.result}}"
    nodes = {
        f"sweep-x5-{i}": {
            "id": f"sweep-x5-{i}",
            "name": f"sweep-x5[0].shard({i}:{i})",
            "displayName": f"shard({i}:{i})",
            "type": "Pod",
            "phase": "Pending",
        }
        for i in range(3)
    }
    wf = workflow("sweep-x5", [steps(step), t], nodes=nodes)
    pod = argo_pod(wf, t, "sweep-x5[0].shard(1:1)", "77")
    assert group(pod, wf)[0]["spec"]["minMember"] == 3


def test_dag_with_sequence_and_an_explicit_size() -> None:
    t = train("true")
    dag = {
        "name": "main",
        "dag": {"tasks": [{"name": "shard", "template": "train", "withSequence": {"count": "5"}}]},
    }
    wf = workflow("dag-x6", [dag, t])
    pod = argo_pod(wf, t, "dag-x6.shard(2:2)", "42")
    assert group(pod, wf)[0]["spec"]["minMember"] == 5
    pod["metadata"]["annotations"]["kai.scheduler/gang-fan-out"] = "2"
    assert group(pod, wf)[0]["spec"]["minMember"] == 2


def test_nested_fan_outs_are_separate_gangs() -> None:
    t = train("true")
    wf = workflow("nest-x7", [steps(ITEMS), t])
    a = argo_pod(wf, t, "nest-x7[0].outer(0:a)[0].shard(0:a)", "1")
    b = argo_pod(wf, t, "nest-x7[0].outer(1:b)[0].shard(0:a)", "2")
    assert group(a, wf)[0]["metadata"]["name"] != group(b, wf)[0]["metadata"]["name"]


def test_bad_annotation_and_unknown_step_are_errors() -> None:
    t = train("sometimes")
    wf = workflow("bad-x8", [steps(ITEMS), t])
    with pytest.raises(GroupingError, match="gang-fan-out='sometimes'"):
        group(fan_out_pods(wf, t, 1)[0], wf)
    t = train("true")
    wf = workflow("bad-x9", [steps(ITEMS), t])
    pod = argo_pod(wf, t, "bad-x9[0].other(0:a)", "3")
    with pytest.raises(GroupingError, match="Workflow ml/bad-x9 step 'other': no step"):
        group(pod, wf)
