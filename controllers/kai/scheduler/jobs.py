"""Jobs (PodGroups), their subgroup tree and their tasks (pods), as the session sees them.

A job's tasks hang under leaf :class:`PodSet` s (each with ``min_available``) inside a tree of
:class:`SubGroupSet` s (each with a threshold ``K``: how many direct children must be satisfied).
A flat job has one PodSet named ``default``. PodSets keep counters of
their tasks per status group, updated by the session on every status change, so gang questions
cost O(children), never O(tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai.scheduler.resource_layout import FloatArray
from kai.scheduler.snapshot import (
    ALLOCATED_STATUSES,
    PLACED_STATUSES,
    JobSpec,
    TaskSpec,
    TaskStatus,
    TopologyConstraint,
)

DEFAULT_PODSET = "default"

#: placed and not leaving (KAI active-allocated); counts toward gangs and queue accounting
ACTIVE = PLACED_STATUSES - {TaskStatus.RELEASING}
#: alive minus gated: may still run (KAI "ready for scheduling" counts these)
ALIVE_UNGATED = ACTIVE | {TaskStatus.PENDING}
#: per status: does it count as (active, truly allocated, pending, alive)
_COUNTS: dict[str, tuple[int, int, int, int]] = {
    status.value: (
        int(status in ACTIVE),
        int(status in ALLOCATED_STATUSES),
        int(status is TaskStatus.PENDING),
        int(status in ALIVE_UNGATED),
    )
    for status in TaskStatus
}


@dataclass(eq=False, slots=True)
class TaskInfo:
    spec: TaskSpec
    job: JobInfo
    podset: PodSet
    request: FloatArray  # node-table columns (shared GPUs excluded)
    status: TaskStatus
    node: int = -1  # node table position; -1 = not placed
    gpu_groups: tuple[str, ...] = ()
    order_key: tuple[object, ...] = ()
    signature: int = -1  # equivalence class id (set by the placement engine)
    moved: bool = False  # placement changed in this session

    @property
    def uid(self) -> str:
        return self.spec.uid

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_shared(self) -> bool:
        return self.spec.gpu.is_shared

    def __repr__(self) -> str:
        return f"TaskInfo({self.uid}, {self.status.value}, node={self.node})"


@dataclass(eq=False)
class PodSet:
    """A leaf subgroup: tasks with a gang minimum."""

    name: str
    min_available: int
    parent: SubGroupSet | None
    topology: TopologyConstraint | None = None
    tasks: list[TaskInfo] = field(default_factory=list)  # in task order
    active: int = 0  # ACTIVE statuses
    allocated: int = 0  # ALLOCATED_STATUSES (truly allocated, pipelined excluded)
    pending: int = 0
    alive: int = 0  # ALIVE_UNGATED

    def count(self, status: TaskStatus, sign: int) -> None:
        # keyed by the value string: an Enum member hashes in Python, a str in C
        active, allocated, pending, alive = _COUNTS[status._value_]
        self.active += sign * active
        self.allocated += sign * allocated
        self.pending += sign * pending
        self.alive += sign * alive

    @property
    def threshold(self) -> int:
        return self.min_available

    @property
    def satisfied(self) -> bool:
        return self.active >= self.min_available

    @property
    def ready(self) -> bool:
        return self.alive >= self.min_available

    @property
    def satisfied_count(self) -> int:
        """Members counted toward the threshold (tasks for a PodSet)."""
        return self.active

    def pending_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.status is TaskStatus.PENDING]

    def has_surplus(self) -> bool:
        return self.active > self.min_available


@dataclass(eq=False)
class SubGroupSet:
    """An inner subgroup (or the job's root): satisfied when ``threshold`` children are."""

    name: str
    min_subgroup: int | None
    parent: SubGroupSet | None
    topology: TopologyConstraint | None = None
    children: list[PodSet | SubGroupSet] = field(default_factory=list)

    @property
    def threshold(self) -> int:
        """``minSubGroup`` as written, else every child. Like KAI, a ``minSubGroup`` above the
        number of children is not capped: the set is never satisfied and its job stays pending
        (see :func:`unreachable_sets`)."""
        if self.min_subgroup is None:
            return len(self.children)
        return self.min_subgroup

    @property
    def unreachable(self) -> bool:
        """``minSubGroup`` asks for more satisfied children than the set has."""
        return self.threshold > len(self.children)

    @property
    def satisfied_count(self) -> int:
        return sum(1 for child in self.children if child.satisfied)

    @property
    def satisfied(self) -> bool:
        return self.satisfied_count >= self.threshold

    @property
    def ready(self) -> bool:
        return sum(1 for child in self.children if child.ready) >= self.threshold

    def has_surplus(self) -> bool:
        return self.satisfied_count > self.threshold or any(c.has_surplus() for c in self.children)


@dataclass(eq=False)
class JobInfo:
    spec: JobSpec
    root: SubGroupSet
    podsets: dict[str, PodSet]
    tasks: list[TaskInfo] = field(default_factory=list)
    queue_ok: bool = True
    #: bumped by every placement change of one of its tasks (a cache stamp: an answer derived
    #: from the job's state stays valid while the version is the same)
    version: int = 0

    @property
    def uid(self) -> str:
        return self.spec.uid

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def queue(self) -> str:
        return self.spec.queue

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def preemptible(self) -> bool:
        return self.spec.preemptible

    @property
    def pending(self) -> int:
        return sum(ps.pending for ps in self.podsets.values())

    @property
    def active(self) -> int:
        return sum(ps.active for ps in self.podsets.values())

    @property
    def gang_satisfied(self) -> bool:
        return self.root.satisfied

    @property
    def ready(self) -> bool:
        return self.root.ready

    def elastic_state(self) -> int:
        """0 below its gang minimum, 1 at it, 2 above it (KAI's elastic job order)."""
        if not self.root.satisfied:
            return 0
        return 2 if self.root.has_surplus() else 1

    def __repr__(self) -> str:
        return f"JobInfo({self.uid})"


def unreachable_sets(root: SubGroupSet) -> list[SubGroupSet]:
    """Every SubGroupSet of the tree (root first, then depth-first in child order) whose
    ``minSubGroup`` exceeds its number of children: the job can never be satisfied."""
    out: list[SubGroupSet] = []
    stack: list[SubGroupSet] = [root]
    while stack:
        group = stack.pop()
        if group.unreachable:
            out.append(group)
        stack.extend(reversed([c for c in group.children if isinstance(c, SubGroupSet)]))
    return out


def build_subgroup_tree(spec: JobSpec) -> tuple[SubGroupSet, dict[str, PodSet]]:
    """The job's subgroup tree: leaves become PodSets, parents SubGroupSets (children sorted by
    name; the PodSet order of the session re-sorts them when it matters)."""
    root = SubGroupSet("", spec.min_subgroup, None, spec.topology)
    if not spec.subgroups:
        minimum = 1 if spec.min_available is None else spec.min_available
        podset = PodSet(DEFAULT_PODSET, minimum, root, None)
        root.children.append(podset)
        return root, {DEFAULT_PODSET: podset}
    parents = {sg.parent for sg in spec.subgroups if sg.parent is not None}
    nodes: dict[str, PodSet | SubGroupSet] = {}
    podsets: dict[str, PodSet] = {}
    for sg in spec.subgroups:
        if sg.name in parents:
            nodes[sg.name] = SubGroupSet(sg.name, sg.min_subgroup, None, sg.topology)
        else:
            minimum = 0 if sg.min_available is None else sg.min_available
            podset = PodSet(sg.name, minimum, None, sg.topology)
            nodes[sg.name] = podset
            podsets[sg.name] = podset
    for sg in sorted(spec.subgroups, key=lambda s: s.name):
        node = nodes[sg.name]
        parent = root if sg.parent is None else nodes.get(sg.parent)
        if not isinstance(parent, SubGroupSet):
            parent = root
        node.parent = parent
        parent.children.append(node)
    return root, podsets
