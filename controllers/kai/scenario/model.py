"""A validated scenario file as typed, immutable data (docs/scenario-format.md).

Names follow the file's keys. Nothing here has a default that the file could have omitted: the
validator fills every field from the file, so a scenario means exactly what it says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
MODES = ("single-session", "rounds")
STATUSES = (
    "Pending",
    "Running",
    "Releasing",
    "Binding",
    "Pipelined",
    "Allocated",
    "Bound",
    "Failed",
    "Gated",
    "Succeeded",
    "Unknown",
    "Deleted",
)
#: statuses of tasks that sit on a node and occupy its resources
PLACED_STATUSES = frozenset({"Running", "Releasing", "Pipelined", "Binding", "Allocated", "Bound"})
PLACEMENTS = ("binpack", "spread")
SHARING_PLACEMENTS = ("pack", "spread", "none")
MIG_STRATEGIES = ("single", "mixed")


@dataclass(frozen=True)
class Config:
    kai_plugins: str | tuple[str, ...]
    predicates: bool
    proportion: bool
    placement_gpu: str  # binpack | spread | none
    placement_cpu: str
    gpu_sharing_placement: str
    staleness_grace_period_seconds: float
    max_consolidation_preemptees: float
    allow_consolidating_reclaim: bool
    fair_share_k_value: float


@dataclass(frozen=True)
class Rounds:
    until_match: int
    after_match: int


@dataclass(frozen=True)
class Topology:
    name: str
    levels: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...] = ()  # alias -> level (node label key), file order

    def level_label(self, level: str) -> str | None:
        """The node label key a level reference means (a label key or an alias); None if neither."""
        if level in self.levels:
            return level
        return dict(self.aliases).get(level)


@dataclass(frozen=True)
class Mig:
    strategy: str
    physical_gpus: int
    devices: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    cpu_millis: float
    memory_bytes: float
    gpu_memory_mib: float
    max_pods: int
    labels: dict[str, str]
    mig: Mig | None


@dataclass(frozen=True)
class QueueResource:
    quota: float
    limit: float
    over_quota_weight: float


@dataclass(frozen=True)
class Queue:
    name: str
    parent: str | None
    priority: int
    creation_rank: int
    gpu: QueueResource
    cpu_millis: QueueResource
    memory_bytes: QueueResource
    implicit: bool


@dataclass(frozen=True)
class TopologyRef:
    topology: str
    required_level: str | None
    preferred_level: str | None


@dataclass(frozen=True)
class SubGroup:
    name: str
    parent: str | None
    min_available: int | None  # None for an inner subgroup
    topology: TopologyRef | None
    min_subgroup: int | None = None  # inner subgroups only; None = every direct child


@dataclass(frozen=True)
class Request:
    cpu_millis: float
    memory_bytes: float
    gpus: int | None
    gpu_fraction: float | None
    gpu_memory_mib: float | None
    mig: tuple[tuple[str, int], ...]
    gpu_devices: int = 1  # devices of a shared-GPU request (gpuDevices), each with the share

    @property
    def is_shared(self) -> bool:
        """Whether the task shares a device (fraction or GPU memory)."""
        return self.gpu_fraction is not None or self.gpu_memory_mib is not None

    @property
    def whole_gpus(self) -> int:
        return self.gpus or 0


@dataclass(frozen=True)
class AffinityTerm:
    topology_key: str
    match_labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class NodeAffinity:
    key: str
    values: tuple[str, ...]  # operator In


@dataclass(frozen=True)
class Preferred:
    """A preferred (soft) term and its weight (1-100): a NodeAffinity or an AffinityTerm."""

    weight: int
    term: NodeAffinity | AffinityTerm


@dataclass(frozen=True)
class Task:
    name: str
    job: str
    status: str
    node: str | None
    gpu_groups: tuple[str, ...]
    request: Request
    subgroup: str | None
    priority: int | None
    node_affinity: NodeAffinity | None
    labels: dict[str, str]
    pod_affinity: AffinityTerm | None
    pod_anti_affinity: AffinityTerm | None
    # kai extensions: preferred (soft) terms, scored
    preferred_node_affinity: tuple[Preferred, ...] = ()
    preferred_pod_affinity: tuple[Preferred, ...] = ()
    preferred_pod_anti_affinity: tuple[Preferred, ...] = ()


@dataclass(frozen=True)
class Job:
    name: str
    queue: str
    priority: int
    preemptible: bool
    created_minutes_ago: float
    min_available: int | None
    subgroups: tuple[SubGroup, ...]
    topology: TopologyRef | None
    stale_for_seconds: float | None
    deleted: bool
    namespace: str
    tasks: tuple[Task, ...]
    min_subgroup: int | None = None  # with subGroups only; None = every top-level subgroup


@dataclass(frozen=True)
class TaskExpectation:
    status: str
    node: str | None
    kai_node: str | None
    kai_gpu_groups: tuple[str, ...] | None


@dataclass(frozen=True)
class NodeFigures:
    idle_gpus: float
    releasing_gpus: float


@dataclass(frozen=True)
class Expected:
    tasks: dict[str, TaskExpectation]
    nodes: dict[str, NodeFigures]


@dataclass(frozen=True)
class Scenario:
    id: str
    source: str | None
    notes: str | None
    mode: str
    actions: tuple[str, ...]
    rounds: Rounds | None
    config: Config
    topologies: tuple[Topology, ...]
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]
    expected: Expected | None

    def tasks(self) -> Iterator[Task]:
        """Every task, in the file's job and task order."""
        for job in self.jobs:
            yield from job.tasks
