"""From the rendered SchedulerPolicy / SharingPolicy settings to the scheduler core's config.

``kai render`` writes one YAML document per policy into the scheduler ConfigMap
(:func:`kai.gitops.compile.scheduler_settings`, :func:`kai.gitops.compile.sharing_settings`).
Whoever reads that ConfigMap (the scheduler, ``kai plan``, ``kai simulate``) turns it into a
:class:`kai.scheduler.snapshot.SchedulerConfig` with :func:`to_scheduler_config`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kai.scheduler.snapshot import SchedulerConfig

__all__ = ["parse_duration", "to_scheduler_config"]

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds of a Go duration (``90s``, ``1h30m``, ``-5m``, ``0``)."""
    value = text.strip()
    sign = -1.0 if value.startswith("-") else 1.0
    body = value.lstrip("+-")
    if body == "0":
        return 0.0
    total = 0.0
    position = 0
    for match in _PART.finditer(body):
        if match.start() != position:
            break
        total += float(match[1]) * _UNITS[match[2]]
        position = match.end()
    if position != len(body) or not body:
        raise ValueError(f"{text!r} is not a duration such as 90s, 10m or 1h30m")
    return sign * total


def to_scheduler_config(
    settings: Mapping[str, Any], sharing: Mapping[str, Any] | None = None
) -> SchedulerConfig:
    """The session knobs of one shard from its rendered settings (and its pool's sharing)."""
    plugins = settings.get("plugins") or {}

    def plugin_on(name: str) -> bool:
        enabled = (plugins.get(name) or {}).get("enabled")
        return True if enabled is None else bool(enabled)

    min_runtime = settings.get("minRuntime") or {}
    fairshare = settings.get("fairshare") or {}
    strategy = settings.get("placementStrategy") or {}
    config = SchedulerConfig(
        actions=tuple(settings.get("actions") or SchedulerConfig().actions),
        placement_gpu=str(strategy.get("gpu", "binpack")),
        placement_cpu=str(strategy.get("cpu", "binpack")),
        proportion=plugin_on("proportion"),
        predicates=plugin_on("predicates"),
        staleness_grace_period=parse_duration(str(settings.get("staleGangGracePeriod", "60s"))),
        k_value=float(fairshare.get("kValue", 1.0)),
        queue_depth_per_action=dict(settings.get("queueDepthPerAction") or {}),
        reclaimer_saturation_multiplier=max(
            1.0, float(settings.get("reclaimerUtilizationMultiplier", 1.0))
        ),
        default_preempt_min_runtime=parse_duration(str(min_runtime.get("preemptMinRuntime", "0s"))),
        default_reclaim_min_runtime=parse_duration(str(min_runtime.get("reclaimMinRuntime", "0s"))),
        reclaim_min_runtime_resolve=str(min_runtime.get("reclaimResolveMethod", "lca")),
    )
    if settings.get("maxConsolidationPreemptees") is not None:
        config.max_consolidation_preemptees = int(settings["maxConsolidationPreemptees"])
    if sharing is not None:
        config.gpu_sharing_placement = str(sharing.get("defaultPlacement", "pack"))
    return config
