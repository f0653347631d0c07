"""From the rendered SchedulerPolicy / SharingPolicy settings to the scheduler core's config.

``kai render`` writes one YAML document per policy into the scheduler ConfigMap
(:func:`kai.gitops.compile.scheduler_settings`, :func:`kai.gitops.compile.sharing_settings`).
Whoever reads that ConfigMap (the scheduler, ``kai plan``, ``kai simulate``) turns it into a
:class:`kai.scheduler.snapshot.SchedulerConfig` with :func:`to_scheduler_config`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kai.api.duration import parse_duration
from kai.api.plugin_arguments import apply_plugin_arguments
from kai.api.scheduler_config import SchedulerConfig

log = logging.getLogger(__name__)

__all__ = ["parse_duration", "to_scheduler_config"]


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
    # KAI plugin arguments (e.g. proportion's reclaimerUtilizationMultiplier, or KAI's misspelt
    # alias, minruntime's defaults) override the policy's own fields, as in KAI's config; a bad
    # value raises PluginArgumentError naming the plugin and argument.
    arguments = {
        str(name): {str(k): str(v) for k, v in ((plugin or {}).get("arguments") or {}).items()}
        for name, plugin in plugins.items()
    }
    config, warnings = apply_plugin_arguments(config, arguments)
    for warning in warnings:
        log.warning("scheduler policy: %s", warning)
    return config
