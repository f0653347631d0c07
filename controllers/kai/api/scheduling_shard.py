"""KAI's SchedulingShard (``kai.scheduler/v1``): one scheduler instance and its configuration."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kai.api.base import KaiModel, PrinterColumn, TopLevelObject
from kai.api.types import Condition, Duration, Number, Quantity, Timestamp

__all__ = [
    "ActionConfig",
    "MinRuntime",
    "PlacementStrategy",
    "PluginConfig",
    "ScenarioSearchBudgets",
    "SchedulingShard",
    "SchedulingShardSpec",
    "SchedulingShardStatus",
    "UsageDBConfig",
    "UsageParams",
]

Placement = Literal["binpack", "spread"]
# Prometheus-style window sizes as KAI's CRD accepts them: 0, or y w d h m s ms in that order.
WINDOW_SIZE_PATTERN = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


class PlacementStrategy(KaiModel):
    """How the shard places pods on nodes, per resource."""

    gpu: Placement | None = None
    """binpack (default): fill nodes' GPUs first; spread: balance GPUs across nodes."""
    cpu: Placement | None = None
    """binpack (default) or spread, for CPU-only pods."""


class MinRuntime(KaiModel):
    """Default minimum runtimes before a job may be preempted or reclaimed."""

    preemptMinRuntime: Duration | None = None
    """Default minimum runtime before preemption (a queue's own value wins)."""
    reclaimMinRuntime: Duration | None = None
    """Default minimum runtime before reclaim (a queue's own value wins)."""


class UsageParams(KaiModel):
    """How historical usage is gathered for time-based fairshare."""

    halfLifePeriod: Duration | None = None
    """Half-life of the exponential decay of past usage."""
    windowSize: Annotated[str, Field(pattern=WINDOW_SIZE_PATTERN)] | None = None
    """How far back usage counts, e.g. 1w or 7d."""
    windowType: str | None = None
    """sliding, tumbling or cron."""
    tumblingWindowStartTime: Timestamp | None = None
    """Start of the first tumbling window."""
    cronString: str | None = None
    """Cron expression resetting the window (windowType cron)."""
    fetchInterval: Duration | None = None
    """How often usage is fetched."""
    stalenessPeriod: Duration | None = None
    """How old usage data may be before it is ignored."""
    waitTimeout: Duration | None = None
    """How long to wait for usage data at start-up."""
    extraParams: dict[str, str] | None = None
    """Client-specific parameters."""


class UsageDBConfig(KaiModel):
    """Where historical usage comes from."""

    clientType: str
    """The usage database client, e.g. prometheus."""
    connectionString: str | None = None
    """The database address."""
    connectionStringEnvVar: str | None = None
    """An environment variable holding the address instead."""
    usageParams: UsageParams | None = None
    """How usage is gathered."""


class PluginConfig(KaiModel):
    """Overrides for one scheduler plugin (merged with the defaults)."""

    enabled: bool | None = None
    """Whether the plugin runs."""
    priority: int | None = None
    """Order among plugins; higher runs first."""
    arguments: dict[str, str] | None = None
    """Plugin arguments; when given they replace the default arguments entirely."""


class ActionConfig(KaiModel):
    """Overrides for one scheduler action (merged with the defaults)."""

    enabled: bool | None = None
    """Whether the action runs."""
    priority: int | None = None
    """Order among actions; higher runs first."""


class ScenarioSearchBudgets(KaiModel):
    """Time budgets of the victim search of reclaim, preempt and consolidation (alpha)."""

    maxActionSearchDuration: dict[str, Duration] | None = None
    """Per action (default, reclaim, preempt, consolidation): wall time per cycle; 0 = no cap."""
    maxJobSearchDuration: Duration | None = None
    """Cap per pending job; 0 = no cap."""
    minJobSearchDuration: Duration | None = None
    """Best-effort floor per job reached."""
    maxGeneratorSearchDuration: dict[str, Duration] | None = None
    """Per scenario generator (default, NodeLocalGreedy, MultiNodeGang): cap per attempt."""


class SchedulingShardSpec(KaiModel):
    """The configuration of one scheduler shard."""

    partitionLabelValue: str | None = None
    """Value of the node-pool label this shard handles; empty = objects without the label."""
    placementStrategy: PlacementStrategy | None = None
    """GPU and CPU placement strategies."""
    queueDepthPerAction: dict[str, int] | None = None
    """Maximum jobs per leaf queue each action considers, e.g. {allocate: 25}."""
    minRuntime: MinRuntime | None = None
    """Default minimum runtimes."""
    kValue: Number | None = None
    """Time-based fairshare: how strongly past usage lowers a queue's share."""
    usageDBConfig: UsageDBConfig | None = None
    """Time-based fairshare: where historical usage comes from."""
    args: dict[str, str] | None = None
    """Extra scheduler command-line flags, passed through."""
    plugins: dict[str, PluginConfig] | None = None
    """Plugin overrides by plugin name."""
    actions: dict[str, ActionConfig] | None = None
    """Action overrides by action name."""
    goMemLimit: Quantity | None = None
    """A fixed soft memory limit for the scheduler process, e.g. 6Gi."""
    goMemLimitRatio: Annotated[float, Field(gt=0, le=1)] | None = None
    """Soft memory limit as a fraction of the container's memory limit (default 0.9)."""
    scenarioSearchBudgets: ScenarioSearchBudgets | None = None
    """Time budgets of the victim search."""


class SchedulingShardStatus(KaiModel):
    """The observed state of a shard."""

    conditions: list[Condition] | None = None
    """Conditions of the shard's deployment."""


class SchedulingShard(TopLevelObject):
    """One scheduler instance: the node pool it serves and how it schedules there."""

    API_GROUP: ClassVar[str] = "kai.scheduler"
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "SchedulingShard"
    PLURAL: ClassVar[str] = "schedulingshards"
    SCOPE: ClassVar[str] = "Cluster"
    HAS_STATUS: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Partition", type="string", jsonPath=".spec.partitionLabelValue"),
        PrinterColumn(name="Age", type="date", jsonPath=".metadata.creationTimestamp"),
    )

    spec: SchedulingShardSpec = Field(default_factory=SchedulingShardSpec)
    """The shard's configuration."""
    status: SchedulingShardStatus | None = None
    """The observed state of the shard."""
