"""The scheduler core's input: a cluster snapshot as plain data.

Everything the core needs to decide is in a :class:`Snapshot`; the core never reads the clock, the
network or Kubernetes objects. Three producers build snapshots: the scenario loader (``kai
simulate``), the live scheduler (from informer caches) and benchmark generators. Keeping this
surface small and explicit is what lets the same core serve all three.

Units are KAI's internal ones: cpu in millicores, memory in bytes, GPUs in devices (fractions
allowed in sums), GPU memory in MiB, times in seconds (floats) on one clock given by
``Snapshot.now``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kai.api.gpu_request import GpuRequest as GpuRequest  # part of the snapshot data model
from kai.api.scheduler_config import SchedulerConfig as SchedulerConfig  # likewise


class TaskStatus(enum.Enum):
    """Pod status as the scheduler sees it."""

    PENDING = "Pending"
    GATED = "Gated"
    ALLOCATED = "Allocated"
    PIPELINED = "Pipelined"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    DELETED = "Deleted"


#: statuses whose task occupies its node's resources
PLACED_STATUSES = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
    }
)
#: placed and not leaving: counts toward a job's gang (KAI "active-allocated")
ACTIVE_ALLOCATED_STATUSES = PLACED_STATUSES - {TaskStatus.RELEASING}
#: counts toward queue/job allocation (KAI "allocated")
ALLOCATED_STATUSES = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING}
)


class ResourceName:
    """Resource keys used in queue quotas and shares."""

    GPU = "gpu"
    CPU = "cpu"  # millicores
    MEMORY = "memory"  # bytes


MANAGED_RESOURCES = (ResourceName.GPU, ResourceName.CPU, ResourceName.MEMORY)

UNLIMITED = -1.0


@dataclass(frozen=True)
class Requirement:
    """One node-selector requirement ``key op values``.

    Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """Requirements ANDed together; a task's terms are ORed (Kubernetes semantics)."""

    requirements: tuple[Requirement, ...]


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: str = "Equal"  # Equal | Exists
    value: str | None = None
    effect: str | None = None  # None = every effect


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None = None
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class PodAffinityTerm:
    """A required (anti-)affinity term.

    The task must (must not) share the ``topology_key`` domain with a placed pod that the
    term's label selector selects: every ``match_labels`` pair and every ``match_expressions``
    requirement (In, NotIn, Exists, DoesNotExist) hold. ``selects_nothing``: the term has no
    label selector at all, which in Kubernetes selects no pod (an empty one selects all).
    """

    topology_key: str
    match_labels: tuple[tuple[str, str], ...]
    match_expressions: tuple[Requirement, ...] = ()
    selects_nothing: bool = False


@dataclass(frozen=True)
class WeightedNodeTerm:
    """A preferred node-affinity term (Kubernetes ``PreferredSchedulingTerm``): a node whose
    labels satisfy every requirement of ``term`` gains ``weight`` (1-100)."""

    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True)
class WeightedPodAffinityTerm:
    """A preferred pod (anti-)affinity term (Kubernetes ``WeightedPodAffinityTerm``): every
    placed pod the term selects adds (affinity) or takes away (anti-affinity) ``weight``
    (1-100) on the nodes of its ``topology_key`` domain."""

    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True)
class VolumeConstraint:
    """What a pod's PersistentVolumeClaims allow (the scheduler's part of Kubernetes
    VolumeBinding).

    ``node_affinity``: per bound PersistentVolume (and per unbound WaitForFirstConsumer claim
    whose StorageClass lists ``allowedTopologies``) its node selector terms, ORed; the entries
    are ANDed. ``missing``: names of claims that do not exist; ``unbound``: names of claims not
    yet bound whose StorageClass binds immediately (the PV controller has to bind them first).
    Either keeps the pod off every node. ``available``: per unbound claim of a
    ``WaitForFirstConsumer`` class without a provisioner (pre-provisioned local volumes), the
    node selector terms of the PersistentVolumes that could be bound to it, ORed (no term at all:
    no such volume anywhere); the entries are ANDed: the pod goes where a volume waits for it."""

    node_affinity: tuple[tuple[NodeSelectorTerm, ...], ...] = ()
    missing: tuple[str, ...] = ()
    unbound: tuple[str, ...] = ()
    available: tuple[tuple[NodeSelectorTerm, ...], ...] = ()


@dataclass(frozen=True)
class TopologyConstraint:
    """Placement constraint of a job or subgroup; levels are node label keys or level aliases."""

    topology: str
    required_level: str | None = None
    preferred_level: str | None = None


@dataclass
class TaskSpec:
    """A pod. ``uid`` is its unique key in the snapshot (the scenario task name, or the pod UID)."""

    uid: str
    name: str
    job: str  # JobSpec.uid
    status: TaskStatus
    cpu_millis: float
    memory_bytes: float
    gpu: GpuRequest = field(default_factory=GpuRequest)
    node: str | None = None
    gpu_groups: tuple[str, ...] = ()  # shared-GPU devices the placed task sits on
    extended: dict[str, float] = field(default_factory=dict)  # other resources (e.g. hugepages)
    subgroup: str | None = None  # leaf subgroup name; None = the implicit "default" leaf
    priority: int | None = None  # task order inside the job (kai.scheduler/task-priority)
    labels: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] = ()  # required; empty = no constraint
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    created_at: float = 0.0
    namespace: str = ""
    # (protocol, hostIP, hostPort) of every container port with a hostPort; "" = every address
    host_ports: tuple[tuple[str, str, int], ...] = ()
    preferred_node_affinity: tuple[WeightedNodeTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    volumes: VolumeConstraint | None = None  # None: no PersistentVolumeClaim
    # the pod comes back when evicted (it has a controller): consolidation moves only such
    # tasks, since a move is carried out live as an eviction (a bare pod would be gone)
    movable: bool = True


@dataclass
class SubGroupSpec:
    """A subgroup of a PodGroup. A leaf (no children) has ``min_available``; an inner one may have
    ``min_subgroup`` (None = all direct children required)."""

    name: str
    parent: str | None = None
    min_available: int | None = None
    min_subgroup: int | None = None
    topology: TopologyConstraint | None = None


@dataclass
class JobSpec:
    """A PodGroup with its tasks.

    Without ``subgroups`` the job has one implicit leaf ``default`` with ``min_available`` (None =
    1). With ``subgroups`` the root threshold is ``min_subgroup`` (None = all direct children).
    """

    uid: str
    name: str
    queue: str
    priority: int
    preemptible: bool
    created_at: float
    tasks: list[TaskSpec]
    namespace: str = ""
    min_available: int | None = None
    min_subgroup: int | None = None
    subgroups: list[SubGroupSpec] = field(default_factory=list)
    topology: TopologyConstraint | None = None
    stale_since: float | None = None  # when the job was first seen below its gang minimum
    last_start_time: float | None = None  # kai.scheduler/last-start-timestamp
    last_eviction_time: float | None = None  # kai.scheduler/last-eviction-timestamp
    preemption_delay: float | None = None  # seconds; None or <= 0 = none
    staleness_grace_period: float | None = None  # seconds; overrides the global; < 0 = never
    deleted: bool = False


@dataclass
class QueueResource:
    """One resource of a queue: ``quota`` (deserved), ``limit`` (max allowed), over-quota weight.

    -1 means unlimited for quota and limit.
    """

    quota: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0


@dataclass
class QueueSpec:
    name: str
    parent: str | None
    priority: int = 100
    creation_rank: float = 0.0  # lower = older
    resources: dict[str, QueueResource] = field(default_factory=dict)  # keys: MANAGED_RESOURCES
    preempt_min_runtime: float | None = None  # seconds
    reclaim_min_runtime: float | None = None
    # normalised historical usage per resource (time-based fairshare)
    usage: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MigSpec:
    strategy: str  # single | mixed
    physical_gpus: int
    devices: tuple[tuple[str, int], ...]  # profile resource name -> instances


@dataclass
class NodeSpec:
    name: str
    cpu_millis: float
    memory_bytes: float
    gpus: int  # allocatable whole GPUs
    gpu_memory_mib: float  # per device
    max_pods: int
    labels: dict[str, str] = field(default_factory=dict)
    extended: dict[str, float] = field(default_factory=dict)
    mig: MigSpec | None = None
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    # GPU sharing modes the node's pool allows (SharingPolicy: "fraction", "gpu-memory", "mig");
    # None = every mode (KAI has no such switch). See kai.scheduler.sharing_modes.
    sharing_modes: frozenset[str] | None = None


@dataclass
class TopologySpec:
    name: str
    levels: list[str]  # node label keys, broadest first
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> node label key


@dataclass
class Snapshot:
    now: float
    nodes: list[NodeSpec]
    queues: list[QueueSpec]
    jobs: list[JobSpec]
    topologies: list[TopologySpec] = field(default_factory=list)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
