"""The scheduler ConfigMap is checked as a whole before any of it is used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai.api.scheduler_configmap import InvalidSchedulerConfig, read_scheduler_configmap
from kai.gitops.compile import compile_documents
from kai.gitops.validate import validate_paths
from kai.reconcilers.shard import NodePool

EXAMPLES = Path(__file__).parents[3] / "examples" / "gitops"


def _cm(**docs: Any) -> dict[str, Any]:
    return {"data": {k: v if isinstance(v, str) else yaml.safe_dump(v) for k, v in docs.items()}}


def test_the_rendered_example_is_valid_for_every_pool_it_names() -> None:
    report = validate_paths([str(EXAMPLES)])
    cm = next(o for o in compile_documents(report.documents) if o["kind"] == "ConfigMap")
    pools = {yaml.safe_load(v).get("nodePool", "") for k, v in cm["data"].items() if "policy" in k}
    for pool in pools:
        read_scheduler_configmap(cm, pool)


def test_each_pool_reads_its_own_section_and_every_pools_sharing_modes() -> None:
    cm = _cm(
        **{
            "scheduler-policy.a.yaml": {"name": "a", "nodePool": "", "actions": ["allocate"]},
            "scheduler-policy.b.yaml": {"name": "b", "nodePool": "b", "actions": ["reclaim"]},
            "sharing-policy.b.yaml": {"nodePool": "b", "modes": ["fraction"]},
        }
    )
    assert read_scheduler_configmap(cm, "").config.actions == ("allocate",)
    b = read_scheduler_configmap(cm, "b")
    assert b.config.actions == ("reclaim",)
    assert b.policy == "b"
    assert b.sharing_modes == {"b": ("fraction",)}
    assert read_scheduler_configmap(cm, "c").policy is None  # a pool without policy: defaults


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"actions": "allocate"}, ".actions: expected a list of action names"),
        ({"actions": ["allocate", "dance"]}, ".actions[1]: 'dance' is not one of"),
        ({"plugins": {"nosuch": {}}}, ".plugins.nosuch: unknown plugin"),
        ({"plugins": {"gpupack": {"priority": "high"}}}, ".plugins.gpupack.priority: expected"),
        ({"plugins": {"proportion": {"arguments": {"kValue": "x"}}}}, "'kValue': 'x' is not a"),
        ({"placementStrategy": {"gpu": "scatter"}}, ".placementStrategy.gpu: 'scatter'"),
        ({"minRuntime": {"preemptMinRuntime": "soon"}}, ".minRuntime.preemptMinRuntime:"),
        ({"queueDepthPerAction": {"allocate": 0}}, ".queueDepthPerAction.allocate: must be >= 1"),
        ({"surprise": 1}, ".surprise: unknown field"),
    ],
)
def test_a_bad_policy_of_any_pool_refuses_the_whole_configmap(
    doc: dict[str, Any], words: str
) -> None:
    cm = _cm(
        **{
            "scheduler-policy.good.yaml": {"name": "good", "nodePool": ""},
            "scheduler-policy.bad.yaml": {"name": "bad", "nodePool": "other", **doc},
        }
    )
    with pytest.raises(InvalidSchedulerConfig) as caught:
        read_scheduler_configmap(cm, "")  # our own section is fine, another pool's is not
    assert "data[scheduler-policy.bad.yaml]" in str(caught.value)
    assert words in str(caught.value)


def test_sharing_duplicates_and_unknown_keys_are_refused() -> None:
    with pytest.raises(InvalidSchedulerConfig, match=r"modes\[0\]: 'halves' is not one of"):
        read_scheduler_configmap(_cm(**{"sharing-policy.s.yaml": {"modes": ["halves"]}}))
    with pytest.raises(InvalidSchedulerConfig, match="already has data"):
        read_scheduler_configmap(
            _cm(**{"scheduler-policy.a.yaml": {"name": "a"}, "scheduler-policy.b.yaml": {}})
        )
    with pytest.raises(InvalidSchedulerConfig, match=r"data\[notes.txt\]: unknown key"):
        read_scheduler_configmap(_cm(**{"notes.txt": "hello"}))
    with pytest.raises(InvalidSchedulerConfig, match="not YAML"):
        read_scheduler_configmap(_cm(**{"scheduler-policy.a.yaml": "a: [b"}))


def test_a_node_pool_selects_by_label_value_and_empty_means_unlabelled() -> None:
    # no shard: KAI's default pool, as the default SchedulingShard (other pools left alone)
    unsharded = NodePool()
    assert unsharded.holds({}) and not unsharded.holds({"kai.scheduler/node-pool": "x"})
    default = NodePool(shard="default", partition="")
    assert default.holds({}) and not default.holds({"kai.scheduler/node-pool": "x"})
    x = NodePool(shard="x", partition="x", label_key="pool")
    assert x.holds({"pool": "x"}) and not x.holds({}) and not x.holds({"pool": "y"})
    assert default.lease_name("kai-scheduler") == "kai-scheduler"
    assert x.lease_name("kai-scheduler") == "kai-scheduler-x"
    assert default.name == "default" and x.name == "x"
