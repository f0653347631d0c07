"""The live scheduler reads its settings from the ConfigMap that `kai render` produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.gitops.compile import compile_documents
from kai.gitops.validate import validate_paths
from kai.reconcilers.scheduler import config_from_configmap
from kai.scheduler.snapshot import SchedulerConfig

EXAMPLES = Path(__file__).parents[3] / "examples" / "gitops"


def test_rendered_example_policy_becomes_the_session_config() -> None:
    report = validate_paths([str(EXAMPLES)])
    assert report.ok
    cm = next(o for o in compile_documents(report.documents) if o["kind"] == "ConfigMap")
    config = config_from_configmap(cm)
    assert config.actions == (
        "allocate",
        "consolidation",
        "reclaim",
        "preempt",
        "stalegangeviction",
    )
    assert config.k_value == 1.5
    assert config.queue_depth_per_action["allocate"] == 25
    assert config.staleness_grace_period == 90.0
    assert config.default_reclaim_min_runtime == 600.0
    assert config.gpu_sharing_placement == "pack"  # the default pool's SharingPolicy


def test_no_policy_means_kai_defaults() -> None:
    assert config_from_configmap({"data": {}}) == SchedulerConfig()


def test_bad_policy_names_the_key() -> None:
    cm = {"data": {"scheduler-policy.x.yaml": "nodePool: ''\nstaleGangGracePeriod: soon\n"}}
    with pytest.raises(ValueError, match="soon"):
        config_from_configmap(cm)
    with pytest.raises(ValueError, match=r"data\[scheduler-policy.y.yaml\]"):
        config_from_configmap({"data": {"scheduler-policy.y.yaml": "- a list"}})
