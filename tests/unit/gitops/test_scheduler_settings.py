"""Rendered policy settings -> the scheduler core's SchedulerConfig."""

from __future__ import annotations

import pytest

from kai.api.scheduler_settings import parse_duration, to_scheduler_config
from kai.gitops.compile import scheduler_settings, sharing_settings
from kai.scheduler.snapshot import SchedulerConfig


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("-5m", -300.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "1d"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_defaults_give_the_core_defaults() -> None:
    config = to_scheduler_config(scheduler_settings("default", {}))
    default = SchedulerConfig()
    assert config.actions == default.actions
    assert (config.placement_gpu, config.placement_cpu) == ("binpack", "binpack")
    assert config.staleness_grace_period == 60.0
    assert config.k_value == 1.0
    assert config.max_consolidation_preemptees == default.max_consolidation_preemptees


def test_policy_values_reach_the_config() -> None:
    spec = {
        "placementStrategy": {"gpu": "spread"},
        "actions": {"preempt": {"priority": 900}},
        "plugins": {"proportion": {"enabled": False}},
        "queueDepthPerAction": {"allocate": 10},
        "minRuntime": {"preemptMinRuntime": "5m", "reclaimResolveMethod": "queue"},
        "fairshare": {"kValue": 2.5},
        "staleGangGracePeriod": "-1s",
        "maxConsolidationPreemptees": 4,
        "reclaimerUtilizationMultiplier": 1.5,
    }
    sharing = sharing_settings("pool", {"defaultPlacement": "spread"})
    config = to_scheduler_config(scheduler_settings("s", spec), sharing)
    assert config.actions == ("preempt", "allocate", "reclaim", "stalegangeviction")
    assert config.placement_gpu == "spread" and config.proportion is False
    assert config.queue_depth_per_action == {"allocate": 10}
    assert config.default_preempt_min_runtime == 300.0
    assert config.reclaim_min_runtime_resolve == "queue"
    assert config.k_value == 2.5 and config.staleness_grace_period == -1.0
    assert config.max_consolidation_preemptees == 4
    assert config.reclaimer_saturation_multiplier == 1.5
    assert config.gpu_sharing_placement == "spread"


def test_plugin_arguments_reach_the_config_and_kai_misspelt_key_is_an_alias(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = {
        "plugins": {
            "proportion": {"arguments": {"relcaimerSaturationMultiplier": "1.5", "kValue": "3"}},
            "minruntime": {"arguments": {"defaultReclaimMinRuntime": "2m"}},
        }
    }
    with caplog.at_level("WARNING"):
        config = to_scheduler_config(scheduler_settings("s", spec))
    assert config.reclaimer_saturation_multiplier == 1.5
    assert config.k_value == 3.0
    assert config.default_reclaim_min_runtime == 120.0
    assert any("relcaimerSaturationMultiplier" in r.getMessage() for r in caplog.records)


def test_bad_plugin_argument_is_refused_with_its_name() -> None:
    from kai.api.plugin_arguments import PluginArgumentError

    spec = {"plugins": {"minruntime": {"arguments": {"reclaimResolveMethod": "nearest"}}}}
    with pytest.raises(PluginArgumentError, match="reclaimResolveMethod"):
        to_scheduler_config(scheduler_settings("s", spec))
