"""KAI's PodGroup (``scheduling.run.ai/v2alpha2``): a gang of pods scheduled together."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from kai.api.base import KaiModel, PrinterColumn, TopLevelObject, cel, cel_rules
from kai.api.subgroups import SubGroupProblem, subgroup_problems
from kai.api.types import DNSLabel, Duration, ResourceList, Timestamp

__all__ = [
    "PodGroup",
    "PodGroupCondition",
    "PodGroupResourcesStatus",
    "PodGroupSpec",
    "PodGroupStatus",
    "QueueDetails",
    "SchedulingCondition",
    "SubGroup",
    "TopologyConstraint",
    "UnschedulableDetails",
    "UnschedulableReason",
]

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]

_NOT_BOTH = cel(
    "!has(self.minMember) || !has(self.minSubGroup)",
    "set at most one of minMember and minSubGroup",
)


class TopologyConstraint(KaiModel):
    """Where in a Topology the pods must or should be placed together."""

    topology: str | None = None
    """The name of the Topology object the levels refer to."""
    requiredTopologyLevel: str | None = None
    """All pods must land in one domain of this level (a nodeLabel or an alias)."""
    preferredTopologyLevel: str | None = None
    """The pods should land in one domain of this level if possible (a nodeLabel or an alias)."""


class SubGroup(KaiModel):
    """A named part of the gang (e.g. leader and workers, prefill and decode)."""

    model_config = ConfigDict(json_schema_extra=cel_rules(_NOT_BOTH))

    name: DNSLabel
    """The subgroup's name, unique in the PodGroup; pods join it with the label
    kai.scheduler/subgroup-name."""
    minMember: Count | None = None
    """Leaf subgroups only (required there): pods needed before any of them start; 0 = elastic."""
    minSubGroup: Count | None = None
    """Mid-level subgroups only: how many direct children must be satisfied; default all."""
    parent: DNSLabel | None = None
    """The name of the parent subgroup; omitted for a direct child of the PodGroup."""
    topologyConstraint: TopologyConstraint | None = None
    """Placement constraint for this subgroup's pods."""


class PodGroupSpec(KaiModel):
    """The desired state of a PodGroup."""

    model_config = ConfigDict(json_schema_extra=cel_rules(_NOT_BOTH))

    minMember: Count | None = None
    """Gang size of a PodGroup without subGroups (default 1; 0 = no gang, all pods elastic)."""
    minSubGroup: Count | None = None
    """With subGroups: how many direct child subgroups must be satisfied (default all)."""
    queue: str | None = None
    """The leaf queue the PodGroup is charged to."""
    priorityClassName: str | None = None
    """The PriorityClass that gives the PodGroup its priority."""
    preemptibility: Literal["preemptible", "non-preemptible"] | None = None
    """Whether the PodGroup may be preempted; by default priority < 100 means preemptible."""
    markUnschedulable: bool | None = None
    """Also mark the pods PodScheduled=False when the gang cannot be placed (default true)."""
    schedulingBackoff: Int32 | None = None
    """-1 (default): retry forever; 1: give up after one failed attempt per node pool."""
    topologyConstraint: TopologyConstraint | None = None
    """Placement constraint for all pods of the PodGroup."""
    subGroups: list[SubGroup] | None = None
    """A tree of subgroups (via parent); each leaf is gang-scheduled with its own minMember."""
    preemptionDelay: Duration | None = None
    """How long after creation (or the last eviction) before this PodGroup may cause
    preemption, reclaim or consolidation."""
    stalenessGracePeriod: Duration | None = None
    """How long the PodGroup may stay below its gang minimum before it is evicted as stale;
    negative = never."""

    @model_validator(mode="after")
    def check_subgroups(self) -> PodGroupSpec:
        errors = [p for p in self.problems() if p.severity == "error"]
        if errors:
            raise ValueError("; ".join(f"{p.path}: {p.message}" for p in errors))
        return self

    def problems(self, operation: Literal["CREATE", "UPDATE"] = "UPDATE") -> list[SubGroupProblem]:
        """Every subgroup rule violation (errors and warnings) as KAI's webhook sees it."""
        return subgroup_problems(
            self.minMember,
            self.minSubGroup,
            [(s.name, s.parent, s.minMember, s.minSubGroup) for s in self.subGroups or []],
            operation,
        )


class QueueDetails(KaiModel):
    """Queue figures attached to an unschedulable reason."""

    name: str | None = None
    """The queue's name."""
    queueRequestedResources: ResourceList | None = None
    """What the queue requests."""
    queueDeservedResources: ResourceList | None = None
    """The queue's fair share."""
    queueAllocatedResources: ResourceList | None = None
    """What the queue has allocated."""
    queueAllocatedNonPreemptibleResources: ResourceList | None = None
    """The non-preemptible part of the queue's allocation."""
    queueResourceLimits: ResourceList | None = None
    """The queue's limits."""
    podGroupRequestedResources: ResourceList | None = None
    """What the PodGroup requests."""
    podGroupRequestedNonPreemptibleResources: ResourceList | None = None
    """What the PodGroup requests as non-preemptible."""


class UnschedulableDetails(KaiModel):
    """Structured details of an unschedulable reason."""

    queueDetails: QueueDetails | None = None
    """Queue figures, for queue-related reasons."""


class UnschedulableReason(KaiModel):
    """One reason why the PodGroup could not be scheduled."""

    reason: str | None = None
    """NonPreemptibleOverQuota, OverLimit, QueueDoesNotExist, PreemptionDelayNotElapsed, ..."""
    message: str | None = None
    """A human-readable explanation."""
    details: UnschedulableDetails | None = None
    """Structured details."""


class SchedulingCondition(KaiModel):
    """A scheduling result per node pool, written by the scheduler."""

    type: str | None = None
    """The condition type, e.g. UnschedulableOnNodePool."""
    nodePool: str | None = None
    """The node pool (shard) the condition is about."""
    reason: str | None = None
    """Deprecated: use reasons."""
    message: str | None = None
    """Deprecated: use reasons."""
    reasons: list[UnschedulableReason] | None = None
    """Why the PodGroup could not be scheduled."""
    transitionID: str | None = None
    """Increases with every scheduling condition written."""
    lastTransitionTime: Timestamp | None = None
    """When the condition was written."""
    status: str | None = None
    """True, False or Unknown."""


class PodGroupCondition(KaiModel):
    """A condition of a PodGroup."""

    type: str | None = None
    """The condition type."""
    status: str | None = None
    """True, False or Unknown."""
    reason: str | None = None
    """A machine-readable reason."""
    message: str | None = None
    """A human-readable message."""
    transitionID: str | None = None
    """Increases with every condition written."""
    lastTransitionTime: Timestamp | None = None
    """When the condition last changed."""


class PodGroupResourcesStatus(KaiModel):
    """Resources of the PodGroup's pods, written by the PodGroup controller."""

    allocated: ResourceList | None = None
    """Resources allocated to the PodGroup's pods."""
    allocatedNonPreemptible: ResourceList | None = None
    """The non-preemptible part of allocated."""
    requested: ResourceList | None = None
    """Resources requested by the PodGroup's pods."""


class PodGroupStatus(KaiModel):
    """The observed state of a PodGroup."""

    conditions: list[PodGroupCondition] | None = None
    """Conditions of the PodGroup."""
    schedulingConditions: list[SchedulingCondition] | None = None
    """Why the PodGroup is not (fully) scheduled, per node pool."""
    resourcesStatus: PodGroupResourcesStatus | None = None
    """Allocated and requested resources."""


class PodGroup(TopLevelObject):
    """A gang of pods that the scheduler places together, charged to one queue.

    Pods join with the annotation pod-group-name; subgroups split the gang into parts with their
    own minimum sizes and topology constraints.
    """

    API_GROUP: ClassVar[str] = "scheduling.run.ai"
    API_VERSION: ClassVar[str] = "v2alpha2"
    KIND: ClassVar[str] = "PodGroup"
    PLURAL: ClassVar[str] = "podgroups"
    SCOPE: ClassVar[str] = "Namespaced"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("pg",)
    HAS_STATUS: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Queue", type="string", jsonPath=".spec.queue"),
        PrinterColumn(name="MinMember", type="integer", jsonPath=".spec.minMember"),
        PrinterColumn(name="Priority", type="string", jsonPath=".spec.priorityClassName"),
        PrinterColumn(name="Age", type="date", jsonPath=".metadata.creationTimestamp"),
    )

    spec: PodGroupSpec
    """The desired state of the PodGroup."""
    status: PodGroupStatus | None = None
    """The observed state of the PodGroup."""
