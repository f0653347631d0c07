"""The scheduler core's output: decisions as plain data.

A session returns one :class:`SessionResult`. ``tasks`` gives every task's status after the
session (the raw outcome ``kai simulate`` prints); ``binds``, ``pipelined``, ``evictions`` and
``moves`` are the work the live system must do; ``job_reasons`` say why a job was not (fully)
placed, so that nothing stays pending silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai.scheduler.snapshot import TaskStatus


class ReceivedResourceType:
    REGULAR = "Regular"
    FRACTION = "Fraction"
    MIG_INSTANCE = "MigInstance"


@dataclass(frozen=True)
class TaskOutcome:
    status: TaskStatus
    node: str | None
    gpu_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindDecision:
    """A task allocated on idle resources: the binder must bind it (BindRequest fields)."""

    task: str  # TaskSpec.uid
    node: str
    received_resource_type: str  # ReceivedResourceType
    gpu_count: int = 0  # devices received (whole GPUs, or devices of a multi-device fraction)
    gpu_portion: float = 0.0  # portion of each device, for fractions (1.0 for whole GPUs)
    gpu_groups: tuple[str, ...] = ()  # shared-GPU groups (Fraction only)
    mig: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PipelineDecision:
    """A task placed on resources still held by releasing tasks; it binds in a later cycle."""

    task: str
    node: str
    gpu_groups: tuple[str, ...] = ()
    action: str = "allocate"


@dataclass(frozen=True)
class Eviction:
    task: str
    action: str  # reclaim | preempt | consolidation | stalegangeviction
    reason: str  # human message naming the job that needed the room, or the gang rule


@dataclass(frozen=True)
class Move:
    """A placed task the session moved to another node (consolidation, or a victim re-placed by
    reclaim or preempt): live, it is evicted and its pod comes back (from its controller) on the
    room the core found; the preemptor waits, pipelined, for the room the move frees (as KAI)."""

    task: str
    action: str
    reason: str
    from_node: str
    to_node: str


@dataclass(frozen=True)
class Reason:
    """Why a job was not placed. ``code``: OverLimit, NonPreemptibleOverQuota, QueueDoesNotExist,
    PreemptionDelayNotElapsed, OverCapacity, PodSchedulingErrors, ..."""

    code: str
    message: str
    details: dict[str, object] = field(default_factory=dict)


@dataclass
class QueueShare:
    """Per-resource figures of a queue after the session's fair-share division."""

    fair_share: dict[str, float]
    allocated: dict[str, float]
    requested: dict[str, float]
    allocated_non_preemptible: dict[str, float]


@dataclass
class SessionResult:
    tasks: dict[str, TaskOutcome]  # every task of the snapshot, by TaskSpec.uid
    binds: list[BindDecision] = field(default_factory=list)
    pipelined: list[PipelineDecision] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)  # placed tasks moved: evicted live too
    job_reasons: dict[str, list[Reason]] = field(default_factory=dict)  # JobSpec.uid -> reasons
    queues: dict[str, QueueShare] = field(default_factory=dict)
    # jobs that went from 0 to >0 allocated tasks (their last-start timestamp is now)
    started_jobs: list[str] = field(default_factory=list)
