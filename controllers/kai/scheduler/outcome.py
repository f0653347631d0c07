"""Turning the session's final state into a :class:`SessionResult`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.result import (
    BindDecision,
    Eviction,
    Move,
    PipelineDecision,
    ReceivedResourceType,
    SessionResult,
    TaskOutcome,
)
from kai.scheduler.snapshot import ALLOCATED_STATUSES, TaskStatus
from kai.scheduler.statement import EVICT

if TYPE_CHECKING:
    from kai.scheduler.jobs import TaskInfo
    from kai.scheduler.session import Session


def build_result(session: Session) -> SessionResult:
    nodes = session.nodes
    tasks: dict[str, TaskOutcome] = {}
    binds: list[BindDecision] = []
    pipelined: list[PipelineDecision] = []
    for job_spec in session.snapshot.jobs:
        for spec in job_spec.tasks:
            task = session.tasks.get(spec.uid)
            if task is None:  # dropped (unknown subgroup): reported unchanged
                tasks[spec.uid] = TaskOutcome(spec.status, spec.node, tuple(spec.gpu_groups))
                continue
            original = session.original[spec.uid]
            current = (task.status, task.node, task.gpu_groups)
            status = task.status
            node = nodes.names[task.node] if task.node >= 0 else None
            if current != original and status is TaskStatus.ALLOCATED and node is not None:
                status = TaskStatus.BINDING
                binds.append(_bind(session, task, node))
            elif current != original and status is TaskStatus.PIPELINED and node is not None:
                pipelined.append(PipelineDecision(spec.uid, node, task.gpu_groups))
            tasks[spec.uid] = TaskOutcome(status, node, task.gpu_groups if task.is_shared else ())
    evictions = [
        Eviction(op.task.uid, op.action, op.message)
        for op in session.committed
        if op.kind == EVICT and op.task.status is TaskStatus.RELEASING
    ]
    moves = _moves(session)
    started = sorted(
        job.uid
        for job in session.jobs
        if any(
            t.status is TaskStatus.ALLOCATED
            and session.original[t.uid][0] is not TaskStatus.ALLOCATED
            for t in job.tasks
        )
        and not any(session.original[t.uid][0] in ALLOCATED_STATUSES for t in job.tasks)
    )
    # decisions in task-uid order, whatever the order of the snapshot's lists
    binds.sort(key=lambda decision: decision.task)
    pipelined.sort(key=lambda decision: decision.task)
    return SessionResult(
        tasks=tasks,
        binds=binds,
        pipelined=pipelined,
        evictions=evictions,
        moves=moves,
        job_reasons={uid: list(reasons) for uid, reasons in sorted(session.job_reasons.items())},
        queues=session.proportion.queue_shares(),
        started_jobs=started,
    )


def _moves(session: Session) -> list[Move]:
    """Tasks placed before the session (Running, Bound, Binding, Allocated) that an action
    evicted and then placed again elsewhere (Pipelined on another node or other devices). A task
    put back where it was (same node and devices) is no move: it stays where it runs."""
    moves: dict[str, Move] = {}
    names = session.nodes.names
    for op in session.committed:
        task = op.task
        if op.kind != EVICT or task.status is not TaskStatus.PIPELINED or task.uid in moves:
            continue
        status, node, groups = session.original[task.uid]
        if status not in ALLOCATED_STATUSES or node < 0:
            continue
        if (node, groups) == (task.node, task.gpu_groups):
            continue
        to_node = names[task.node]
        reason = f"{op.message or 'moved'} (to node {to_node})"
        moves[task.uid] = Move(task.uid, op.action, reason, names[node], to_node)
    return sorted(moves.values(), key=lambda move: move.task)


def _bind(session: Session, task: TaskInfo, node: str) -> BindDecision:
    gpu = task.spec.gpu
    if gpu.is_shared:
        memory = float(session.nodes.gpu_memory[task.node])
        portion = gpu.fraction if gpu.fraction is not None else (gpu.memory_mib or 0.0) / memory
        return BindDecision(
            task.uid,
            node,
            ReceivedResourceType.FRACTION,
            gpu_count=gpu.num_devices,
            gpu_portion=round(portion, 6),
            gpu_groups=task.gpu_groups,
        )
    if gpu.is_mig:
        return BindDecision(task.uid, node, ReceivedResourceType.MIG_INSTANCE, mig=gpu.mig)
    return BindDecision(
        task.uid,
        node,
        ReceivedResourceType.REGULAR,
        gpu_count=gpu.whole,
        gpu_portion=1.0 if gpu.whole else 0.0,
    )
