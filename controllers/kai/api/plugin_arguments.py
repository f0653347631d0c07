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

import math
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
    out = _Arguments()
    for plugin in sorted(plugins):
        known = _KNOWN.get(plugin)
        if known is None:
            continue
        for key in sorted(set(plugins[plugin]) - known):
            out.warnings.append(f"plugin {plugin!r}: unknown argument {key!r} is ignored")
    _proportion(out, plugins.get("proportion", {}))
    _minruntime(out, plugins.get("minruntime", {}))
    if out.problems:
        raise PluginArgumentError(out.problems)
    return replace(config, **out.changes), out.warnings  # type: ignore[arg-type]


class _Arguments:
    """What reading the plugin arguments finds: config changes, problems and warnings."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.changes: dict[str, object] = {}

    def number(self, plugin: str, key: str, value: str, minimum: float) -> float | None:
        try:
            parsed = float(value)
        except ValueError:
            self.problems.append(f"plugin {plugin!r} argument {key!r}: {value!r} is not a number")
            return None
        if math.isnan(parsed) or parsed < minimum:
            self.problems.append(f"plugin {plugin!r} argument {key!r}: must be >= {minimum:g}")
            return None
        return parsed

    def duration(self, plugin: str, key: str, value: str) -> float | None:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.problems.append(f"plugin {plugin!r} argument {key!r}: {exc}")
            return None
        if seconds < 0:
            self.problems.append(f"plugin {plugin!r} argument {key!r}: must not be negative")
            return None
        return seconds


def _multiplier_key(out: _Arguments, proportion: Mapping[str, str]) -> str:
    """The reclaimer multiplier's key: ours, or KAI's misspelt one when only that is set."""
    if MULTIPLIER_KAI_MISSPELT not in proportion:
        return MULTIPLIER
    if MULTIPLIER in proportion:
        out.warnings.append(
            f"plugin 'proportion': {MULTIPLIER_KAI_MISSPELT!r} (KAI's misspelt key) is "
            f"ignored because {MULTIPLIER!r} is set"
        )
        return MULTIPLIER
    out.warnings.append(
        f"plugin 'proportion': argument {MULTIPLIER_KAI_MISSPELT!r} is deprecated "
        f"(KAI's misspelling); use {MULTIPLIER!r}"
    )
    return MULTIPLIER_KAI_MISSPELT


def _proportion(out: _Arguments, proportion: Mapping[str, str]) -> None:
    key = _multiplier_key(out, proportion)
    if key in proportion:
        multiplier = out.number("proportion", key, proportion[key], float("-inf"))
        if multiplier is not None:
            if multiplier < 1:
                out.warnings.append(
                    f"plugin 'proportion' argument {key!r}: {multiplier:g} is below 1; using 1"
                )
                multiplier = 1.0
            out.changes["reclaimer_saturation_multiplier"] = multiplier
    if K_VALUE in proportion:
        k_value = out.number("proportion", K_VALUE, proportion[K_VALUE], 0.0)
        if k_value is not None:
            out.changes["k_value"] = k_value


def _minruntime(out: _Arguments, minruntime: Mapping[str, str]) -> None:
    for arg, field in (
        (PREEMPT_MIN_RUNTIME, "default_preempt_min_runtime"),
        (RECLAIM_MIN_RUNTIME, "default_reclaim_min_runtime"),
    ):
        if arg in minruntime:
            seconds = out.duration("minruntime", arg, minruntime[arg])
            if seconds is not None:
                out.changes[field] = seconds
    if RESOLVE_METHOD in minruntime:
        method = minruntime[RESOLVE_METHOD]
        if method in ("lca", "queue"):
            out.changes["reclaim_min_runtime_resolve"] = method
        else:
            out.problems.append(
                f"plugin 'minruntime' argument {RESOLVE_METHOD!r}: {method!r} is not one of "
                "'lca', 'queue'"
            )
