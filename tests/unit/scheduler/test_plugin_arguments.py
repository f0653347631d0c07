"""Plugin arguments that set session knobs, including KAI's misspelt multiplier key."""

from __future__ import annotations

import pytest

from kai.api.plugin_arguments import (
    PluginArgumentError,
    apply_plugin_arguments,
    parse_duration,
)
from kai.scheduler.snapshot import SchedulerConfig


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("-2m", -120.0),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "m", "1h 30m", "s5"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_documented_multiplier_key() -> None:
    config, warnings = apply_plugin_arguments(
        SchedulerConfig(), {"proportion": {"reclaimerUtilizationMultiplier": "1.5"}}
    )
    assert config.reclaimer_saturation_multiplier == 1.5
    assert warnings == []


def test_misspelt_kai_key_is_a_deprecated_alias() -> None:
    config, warnings = apply_plugin_arguments(
        SchedulerConfig(), {"proportion": {"relcaimerSaturationMultiplier": "2"}}
    )
    assert config.reclaimer_saturation_multiplier == 2.0
    assert len(warnings) == 1 and "deprecated" in warnings[0]


def test_documented_key_wins_over_the_alias() -> None:
    config, warnings = apply_plugin_arguments(
        SchedulerConfig(),
        {
            "proportion": {
                "relcaimerSaturationMultiplier": "3",
                "reclaimerUtilizationMultiplier": "1.25",
            }
        },
    )
    assert config.reclaimer_saturation_multiplier == 1.25
    assert "ignored" in warnings[0]


def test_multiplier_below_one_becomes_one() -> None:
    config, warnings = apply_plugin_arguments(
        SchedulerConfig(), {"proportion": {"reclaimerUtilizationMultiplier": "0.5"}}
    )
    assert config.reclaimer_saturation_multiplier == 1.0
    assert "below 1" in warnings[0]


def test_min_runtime_arguments() -> None:
    config, warnings = apply_plugin_arguments(
        SchedulerConfig(),
        {
            "minruntime": {
                "defaultPreemptMinRuntime": "5m",
                "defaultReclaimMinRuntime": "90s",
                "reclaimResolveMethod": "queue",
                "colour": "blue",
            }
        },
    )
    assert config.default_preempt_min_runtime == 300.0
    assert config.default_reclaim_min_runtime == 90.0
    assert config.reclaim_min_runtime_resolve == "queue"
    assert warnings == ["plugin 'minruntime': unknown argument 'colour' is ignored"]


def test_every_bad_argument_is_reported_by_name() -> None:
    with pytest.raises(PluginArgumentError) as info:
        apply_plugin_arguments(
            SchedulerConfig(),
            {
                "proportion": {"reclaimerUtilizationMultiplier": "lots", "kValue": "-1"},
                "minruntime": {"defaultPreemptMinRuntime": "-5m", "reclaimResolveMethod": "x"},
            },
        )
    text = str(info.value)
    assert len(info.value.problems) == 4
    for word in (
        "reclaimerUtilizationMultiplier",
        "kValue",
        "defaultPreemptMinRuntime",
        "reclaimResolveMethod",
    ):
        assert word in text


def test_other_plugins_are_not_touched() -> None:
    config, warnings = apply_plugin_arguments(SchedulerConfig(), {"gpupack": {"x": "1"}})
    assert config == SchedulerConfig()
    assert warnings == []
