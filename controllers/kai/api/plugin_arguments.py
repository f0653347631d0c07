"""KAI plugin arguments (``plugins[].arguments`` of the scheduler config, string -> string) that
set session knobs: the proportion plugin's reclaimer saturation multiplier and ``kValue``, and
the minruntime plugin's defaults and resolve method.

KAI's code reads the multiplier from the misspelt key ``relcaimerSaturationMultiplier`` while
its documentation advertises ``reclaimerUtilizationMultiplier`` (which KAI ignores). Here the
documented key is the key; the misspelt one is accepted as a deprecated alias with a warning,
and the documented key wins when both are given. Values below 1 become 1, as in KAI.

Bad values raise :class:`PluginArgumentError` naming the plugin, the argument and the value
(every problem at once); unknown arguments of these two plugins only warn, as KAI ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kai.api.duration import parse_duration
from kai.api.scheduler_config import SchedulerConfig

MULTIPLIER = "reclaimerUtilizationMultiplier"
MULTIPLIER_KAI_MISSPELT = "relcaimerSaturationMultiplier"
K_VALUE = "kValue"
PREEMPT_MIN_RUNTIME = "defaultPreemptMinRuntime"
RECLAIM_MIN_RUNTIME = "defaultReclaimMinRuntime"
RESOLVE_METHOD = "reclaimResolveMethod"

_KNOWN = {
    "proportion": {MULTIPLIER, MULTIPLIER_KAI_MISSPELT, K_VALUE},
    "minruntime": {PREEMPT_MIN_RUNTIME, RECLAIM_MIN_RUNTIME, RESOLVE_METHOD},
}


class PluginArgumentError(ValueError):
    """One or more plugin arguments cannot be used; ``problems`` holds one message each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def apply_plugin_arguments(
    config: SchedulerConfig, plugins: Mapping[str, Mapping[str, str]]
) -> tuple[SchedulerConfig, list[str]]:
    """``config`` with the knobs set by ``plugins`` (plugin name -> its arguments), and the
    warnings to log."""
    problems: list[str] = []
    warnings: list[str] = []
    changes: dict[str, object] = {}

    def number(plugin: str, key: str, value: str, minimum: float) -> float | None:
        try:
            parsed = float(value)
        except ValueError:
            problems.append(f"plugin {plugin!r} argument {key!r}: {value!r} is not a number")
            return None
        if parsed != parsed or parsed < minimum:
            problems.append(f"plugin {plugin!r} argument {key!r}: must be >= {minimum:g}")
            return None
        return parsed

    def duration(plugin: str, key: str, value: str) -> float | None:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            problems.append(f"plugin {plugin!r} argument {key!r}: {exc}")
            return None
        if seconds < 0:
            problems.append(f"plugin {plugin!r} argument {key!r}: must not be negative")
            return None
        return seconds

    for plugin in sorted(plugins):
        known = _KNOWN.get(plugin)
        if known is None:
            continue
        arguments = plugins[plugin]
        for key in sorted(set(arguments) - known):
            warnings.append(f"plugin {plugin!r}: unknown argument {key!r} is ignored")
    proportion = plugins.get("proportion", {})
    key = MULTIPLIER
    if MULTIPLIER_KAI_MISSPELT in proportion:
        if MULTIPLIER in proportion:
            warnings.append(
                f"plugin 'proportion': {MULTIPLIER_KAI_MISSPELT!r} (KAI's misspelt key) is "
                f"ignored because {MULTIPLIER!r} is set"
            )
        else:
            key = MULTIPLIER_KAI_MISSPELT
            warnings.append(
                f"plugin 'proportion': argument {MULTIPLIER_KAI_MISSPELT!r} is deprecated "
                f"(KAI's misspelling); use {MULTIPLIER!r}"
            )
    if key in proportion:
        multiplier = number("proportion", key, proportion[key], float("-inf"))
        if multiplier is not None:
            if multiplier < 1:
                warnings.append(
                    f"plugin 'proportion' argument {key!r}: {multiplier:g} is below 1; using 1"
                )
                multiplier = 1.0
            changes["reclaimer_saturation_multiplier"] = multiplier
    if K_VALUE in proportion:
        k_value = number("proportion", K_VALUE, proportion[K_VALUE], 0.0)
        if k_value is not None:
            changes["k_value"] = k_value
    minruntime = plugins.get("minruntime", {})
    for arg, field in (
        (PREEMPT_MIN_RUNTIME, "default_preempt_min_runtime"),
        (RECLAIM_MIN_RUNTIME, "default_reclaim_min_runtime"),
    ):
        if arg in minruntime:
            seconds = duration("minruntime", arg, minruntime[arg])
            if seconds is not None:
                changes[field] = seconds
    if RESOLVE_METHOD in minruntime:
        method = minruntime[RESOLVE_METHOD]
        if method in ("lca", "queue"):
            changes["reclaim_min_runtime_resolve"] = method
        else:
            problems.append(
                f"plugin 'minruntime' argument {RESOLVE_METHOD!r}: {method!r} is not one of "
                "'lca', 'queue'"
            )
    if problems:
        raise PluginArgumentError(problems)
    return replace(config, **changes), warnings  # type: ignore[arg-type]
