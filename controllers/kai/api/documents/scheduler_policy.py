"""SchedulerPolicy: the scheduler's knobs for one shard (one node pool)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kai.api.base import KaiModel, TopLevelObject
from kai.api.documents.fields import (
    Duration,
    LabelValue,
    PrometheusDuration,
)
from kai.api.documents.status import DocumentStatus

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"

Strategy = Literal["binpack", "spread"]


class PlacementStrategy(KaiModel):
    """Bin-pack (fill nodes up) or spread, per resource kind."""

    gpu: Strategy = "binpack"
    cpu: Strategy = "binpack"


class ActionSettings(KaiModel):
    """Turn an action on or off, or move it in the order (higher priority runs first)."""

    enabled: bool | None = None
    priority: int | None = None


class Actions(KaiModel):
    """The scheduler's actions. Default order: allocate, consolidation, reclaim, preempt,
    stalegangeviction (priorities 500..100)."""

    allocate: ActionSettings | None = None
    consolidation: ActionSettings | None = None
    reclaim: ActionSettings | None = None
    preempt: ActionSettings | None = None
    stalegangeviction: ActionSettings | None = None


class PluginSettings(KaiModel):
    """Override of one plugin: on/off, priority, and arguments (which replace the defaults)."""

    enabled: bool | None = None
    priority: int | None = None
    arguments: dict[str, str] | None = None


class QueueDepthPerAction(KaiModel):
    """How many jobs of each leaf queue an action considers per cycle."""

    allocate: int | None = Field(default=None, ge=1)
    reclaim: int | None = Field(default=None, ge=1)
    preempt: int | None = Field(default=None, ge=1)
    consolidation: int | None = Field(default=None, ge=1)


class MinRuntime(KaiModel):
    """Defaults for queues that set no min-runtime, and how reclaim finds the governing queue."""

    preemptMinRuntime: Duration | None = None
    reclaimMinRuntime: Duration | None = None
    reclaimResolveMethod: Literal["lca", "queue"] | None = Field(
        default=None, description="lca (default): below the common ancestor; queue: the victim's."
    )


class Fairshare(KaiModel):
    """Time-based fairshare: past usage lowers a queue's over-quota share."""

    kValue: float | None = Field(
        default=None, ge=0, description="How strongly past usage counts (default 1.0)."
    )
    halfLifePeriod: Duration | None = Field(
        default=None, description="Half-life of past usage; unset = no decay."
    )
    windowSize: PrometheusDuration | None = Field(
        default=None, description="How much history counts (default 1w)."
    )
    windowType: Literal["sliding", "tumbling", "cron"] | None = Field(
        default=None, description="sliding (default), tumbling or cron."
    )


class SchedulerPolicySpec(KaiModel):
    """Settings of one scheduler shard. Every field is optional; unset = KAI's default."""

    nodePool: LabelValue = Field(
        default="",
        description='Value of the kai.scheduler/node-pool label of this shard; "" = default.',
    )
    placementStrategy: PlacementStrategy | None = None
    actions: Actions | None = None
    plugins: dict[str, PluginSettings] | None = Field(
        default=None, description="Per-plugin overrides, by plugin name."
    )
    queueDepthPerAction: QueueDepthPerAction | None = None
    minRuntime: MinRuntime | None = None
    fairshare: Fairshare | None = None
    staleGangGracePeriod: Duration | None = Field(
        default=None, description="How long a gang may run below its minimum (default 60s)."
    )
    maxConsolidationPreemptees: int | None = Field(
        default=None, ge=0, description="Most pods consolidation may move for one job."
    )
    reclaimerUtilizationMultiplier: float | None = Field(
        default=None, ge=1, description="How much more saturated a reclaimer may end up (1.0)."
    )


class SchedulerPolicy(TopLevelObject):
    """Scheduler settings of one shard (placement, actions, plugins, fairshare, min-runtime)."""

    API_GROUP: ClassVar[str] = GROUP
    API_VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "SchedulerPolicy"
    HAS_STATUS: ClassVar[bool] = True
    PLURAL: ClassVar[str] = "schedulerpolicies"
    DESCRIPTION: ClassVar[str] = "Scheduler settings of one shard."

    spec: SchedulerPolicySpec = Field(default_factory=SchedulerPolicySpec)
    status: DocumentStatus | None = None
