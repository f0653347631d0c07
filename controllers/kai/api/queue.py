"""KAI's Queue (``scheduling.run.ai/v2``): one node of the hierarchical fair-share tree."""

from __future__ import annotations

from typing import ClassVar

from kai.api.base import KaiModel, PrinterColumn, TopLevelObject
from kai.api.types import Duration, Number, ResourceList, Timestamp

__all__ = [
    "Queue",
    "QueueCondition",
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "QueueStatus",
]


class QueueResource(KaiModel):
    """Quota, over-quota weight and limit of one resource. An omitted number is 0.

    No ``limit >= quota`` rule in the CRD: KAI's Queue CRD accepts a limit below the quota, and
    so does ours. ``kai validate`` reports it (``limit-below-quota``) on the GitOps documents and
    the admission webhook warns about it on a Queue.
    """

    quota: Number | None = None
    """Guaranteed ("deserved") amount; -1 means the whole capacity available at this level."""
    overQuotaWeight: Number | None = None
    """Relative weight when resources left over after quotas are shared out."""
    limit: Number | None = None
    """Hard cap; -1 means no cap. Careful: an omitted limit is 0, which allows nothing."""


class QueueResources(KaiModel):
    """Per-resource settings in KAI's units."""

    gpu: QueueResource | None = None
    """GPUs, fractions allowed (0.5 = half a GPU)."""
    cpu: QueueResource | None = None
    """CPU in millicores (1000 = one core)."""
    memory: QueueResource | None = None
    """Memory in megabytes (1 = 10^6 bytes)."""


class QueueSpec(KaiModel):
    """The desired state of a Queue."""

    displayName: str | None = None
    """A human-friendly name shown in logs and metrics."""
    parentQueue: str | None = None
    """The parent queue's name; empty or omitted for a top-level queue."""
    priority: int | None = None
    """Queues of higher priority get over-quota resources first and are reclaimed from last.
    Default 100."""
    preemptMinRuntime: Duration | None = None
    """How long a job of this queue runs before it may be preempted."""
    reclaimMinRuntime: Duration | None = None
    """How long a job of this queue runs before it may be reclaimed."""
    resources: QueueResources
    """Quota, weight and limit per resource. Required, as KAI's admission webhook requires it."""


class QueueCondition(KaiModel):
    """A condition of a Queue (KAI's own condition type, not metav1.Condition)."""

    type: str
    """Orphan or OverQuota."""
    status: str
    """True, False or Unknown."""
    reason: str | None = None
    """A machine-readable reason for the last transition."""
    message: str | None = None
    """A human-readable message."""
    lastProbeTime: Timestamp | None = None
    """When the condition was last probed."""
    lastTransitionTime: Timestamp | None = None
    """When the condition last changed status."""


class QueueStatus(KaiModel):
    """The observed state of a Queue, written by the queue controller."""

    childQueues: list[str] | None = None
    """Names of the queues whose parentQueue is this queue."""
    allocated: ResourceList | None = None
    """Resources allocated to running jobs of this queue and its descendants."""
    allocatedNonPreemptible: ResourceList | None = None
    """The non-preemptible part of allocated."""
    requested: ResourceList | None = None
    """Resources requested by jobs of this queue and its descendants."""
    conditions: list[QueueCondition] | None = None
    """Current conditions of the queue."""
    fairShare: ResourceList | None = None
    """This project's addition: the fair share computed by the scheduler's last cycle, per
    resource (gpu in devices, cpu in cores, memory in bytes)."""


class Queue(TopLevelObject):
    """A KAI queue: quota, over-quota weight and limit per resource, in a tree of queues.

    Jobs are submitted to leaf queues; parents share their resources among their children.
    """

    API_GROUP: ClassVar[str] = "scheduling.run.ai"
    API_VERSION: ClassVar[str] = "v2"
    KIND: ClassVar[str] = "Queue"
    PLURAL: ClassVar[str] = "queues"
    SCOPE: ClassVar[str] = "Cluster"
    HAS_STATUS: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Priority", type="integer", jsonPath=".spec.priority"),
        PrinterColumn(name="Parent", type="string", jsonPath=".spec.parentQueue"),
        PrinterColumn(name="Children", type="string", jsonPath=".status.childQueues"),
        PrinterColumn(name="DisplayName", type="string", jsonPath=".spec.displayName"),
        # `kubectl get queues -o wide`: GPU quota, limit, fair share and allocation
        PrinterColumn(
            name="GPU-Quota", type="number", jsonPath=".spec.resources.gpu.quota", priority=1
        ),
        PrinterColumn(
            name="GPU-Limit", type="number", jsonPath=".spec.resources.gpu.limit", priority=1
        ),
        PrinterColumn(
            name="GPU-FairShare",
            type="string",
            jsonPath=".status.fairShare.nvidia\\.com/gpu",
            priority=1,
        ),
        PrinterColumn(
            name="GPU-Allocated",
            type="string",
            jsonPath=".status.allocated.nvidia\\.com/gpu",
            priority=1,
        ),
    )

    spec: QueueSpec
    """The desired state of the queue."""
    status: QueueStatus | None = None
    """The observed state of the queue."""
