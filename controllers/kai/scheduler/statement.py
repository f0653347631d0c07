"""The statement: tentative changes with checkpoint, rollback, discard and commit.

Each operation changes the session at once through :meth:`Session.set_placement` (task status,
node table, shared devices, queue accounting) and records the task's previous placement.
Rolling back restores previous placements newest first, which undoes every effect exactly
because all accounting is a function of (status, node, devices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kai.scheduler.jobs import JobInfo, TaskInfo
from kai.scheduler.snapshot import TaskStatus

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ALLOCATE = "allocate"
PIPELINE = "pipeline"
EVICT = "evict"

Placement = tuple[TaskStatus, int, tuple[str, ...]]


@dataclass
class Operation:
    kind: str
    task: TaskInfo
    previous: Placement
    action: str
    message: str = ""


class Statement:
    def __init__(self, session: Session, action: str) -> None:
        self.session = session
        self.action = action
        self.operations: list[Operation] = []

    def _apply(self, kind: str, task: TaskInfo, placement: Placement, message: str = "") -> None:
        previous: Placement = (task.status, task.node, task.gpu_groups)
        self.session.set_placement(task, *placement)
        self.operations.append(Operation(kind, task, previous, self.action, message))

    def allocate(self, task: TaskInfo, node: int, gpu_groups: tuple[str, ...] = ()) -> None:
        """Place ``task`` on idle resources of ``node`` (it will be bound)."""
        self._apply(ALLOCATE, task, (TaskStatus.ALLOCATED, node, gpu_groups))

    def pipeline(self, task: TaskInfo, node: int, gpu_groups: tuple[str, ...] = ()) -> None:
        """Place ``task`` on ``node`` on resources that releasing tasks still hold."""
        self._apply(PIPELINE, task, (TaskStatus.PIPELINED, node, gpu_groups))

    def evict(self, task: TaskInfo, message: str) -> None:
        """Mark a placed task Releasing; it keeps its node and devices until it terminates."""
        if task.node < 0:
            raise ValueError(f"task {task.uid} is not placed and cannot be evicted")
        self._apply(EVICT, task, (TaskStatus.RELEASING, task.node, task.gpu_groups), message)

    def checkpoint(self) -> int:
        return len(self.operations)

    def rollback(self, checkpoint: int) -> None:
        if not 0 <= checkpoint <= len(self.operations):
            raise ValueError(
                f"invalid checkpoint {checkpoint}: "
                f"the statement has {len(self.operations)} operations"
            )
        for op in reversed(self.operations[checkpoint:]):
            self.session.set_placement(op.task, *op.previous)
        del self.operations[checkpoint:]

    def discard(self) -> None:
        self.rollback(0)

    def convert_allocated_to_pipelined(self, job: JobInfo) -> None:
        """Re-place the job's tasks allocated by this statement as pipelined, on the same node
        and devices (KAI ``ConvertAllAllocatedToPipelined``: no partial gang binds)."""
        for op in self.operations:
            task = op.task
            if (
                op.kind != ALLOCATE
                or task.job is not job
                or task.status is not TaskStatus.ALLOCATED
            ):
                continue
            self.session.set_placement(task, TaskStatus.PIPELINED, task.node, task.gpu_groups)
            op.kind = PIPELINE

    def commit(self) -> None:
        """Hand the surviving operations to the session as decisions (``Session.commit``: the
        registry's on-commit hooks run then)."""
        self.session.commit(self.operations)
        self.operations = []
        self.session.search_cache.committed()
