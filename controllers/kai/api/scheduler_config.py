"""The knobs of one scheduling session, as the scheduler ConfigMap sets them.

The core reads this plain dataclass; ``kai.api.scheduler_settings`` builds it from the rendered
ConfigMap, so the GitOps compiler and the core share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SchedulerConfig"]


@dataclass
class SchedulerConfig:
    """Knobs of one session; defaults are KAI's."""

    actions: tuple[str, ...] = (
        "allocate",
        "consolidation",
        "reclaim",
        "preempt",
        "stalegangeviction",
    )
    placement_gpu: str = "binpack"  # binpack | spread | none
    placement_cpu: str = "binpack"
    gpu_sharing_placement: str = "pack"  # pack | spread | none
    proportion: bool = True
    predicates: bool = True
    staleness_grace_period: float = 60.0  # seconds; < 0 = never
    max_consolidation_preemptees: int = 16  # -1 = unlimited, 0 = consolidation off
    allow_consolidating_reclaim: bool = True
    k_value: float = 1.0
    queue_depth_per_action: dict[str, int] = field(default_factory=dict)  # absent = unlimited
    reclaimer_saturation_multiplier: float = 1.0
    default_preempt_min_runtime: float = 0.0
    default_reclaim_min_runtime: float = 0.0
    reclaim_min_runtime_resolve: str = "lca"  # lca | queue
