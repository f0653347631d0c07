"""Placing a job's tasks under topology constraints (KAI topology plugin, allocateSubGroupSet).

:func:`place_tasks` replaces the flat "each task on its best node" loop for jobs that carry a
topology constraint on the job or on any subgroup. It walks the job's subgroup tree recursively:

- a group (the root SubGroupSet, an inner SubGroupSet or a leaf PodSet) with a constraint asks
  :func:`~kai.scheduler.topology.candidate_domains` for candidate node sets, best first, and tries
  them one by one inside the node set its parent allows, taking a statement checkpoint before each
  and rolling back to it when the group's tasks do not all fit (backtracking only across the
  candidates of one group, as KAI does);
- a group without a constraint places its children inside its parent's node set;
- children are visited in subgroup order; a PodSet places its tasks in task order, each on the
  best node of the allowed set.

Preferred levels turn into node tiers: inside a chosen domain, the sub-domains at the preferred
level get KAI's score ``floor(10 i / n) × 10,000``; since that score dominates every other node
score (< 10,000), trying the tiers from the highest down, each with the ordinary node order, is
the same as adding the score — without touching the placement engine's cached scores.

Nothing here runs for jobs without any constraint, so they keep the engine's fast path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import numpy as np

from kai.scheduler.jobs import ACTIVE, JobInfo, PodSet, SubGroupSet, TaskInfo
from kai.scheduler.ordering import ordered_children
from kai.scheduler.resource_layout import GPU, BoolArray, FloatArray
from kai.scheduler.result import Reason
from kai.scheduler.topology import (
    ResolvedConstraint,
    TopologyError,
    TopologyTree,
    build_topologies,
    candidate_domains,
    preferred_level_scores,
    resolve_constraint,
)

if TYPE_CHECKING:
    from kai.scheduler.session import Session
    from kai.scheduler.statement import Statement

__all__ = ["constrained", "place_tasks", "topology_trees"]

POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
Group = PodSet | SubGroupSet

_TREES: WeakKeyDictionary[Session, dict[str, TopologyTree]] = WeakKeyDictionary()


def topology_trees(session: Session) -> dict[str, TopologyTree]:
    """The session's topology trees over its node order (built once per session)."""
    trees = _TREES.get(session)
    if trees is None:
        trees = build_topologies(session.snapshot.topologies, session.nodes.labels)
        _TREES[session] = trees
    return trees


def constrained(job: JobInfo) -> bool:
    """Whether the job or any of its subgroups carries a topology constraint."""
    stack: list[Group] = [job.root]
    while stack:
        group = stack.pop()
        if group.topology is not None:
            return True
        if isinstance(group, SubGroupSet):
            stack.extend(group.children)
    return False


class _Failure(Exception):
    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.message)
        self.reason = reason


class _Placer:
    def __init__(self, session: Session, job: JobInfo, tasks: list[TaskInfo], stmt: Statement):
        self.session = session
        self.job = job
        self.statement = stmt
        self.trees = topology_trees(session)
        self.by_podset: dict[int, list[TaskInfo]] = {}
        for task in tasks:
            self.by_podset.setdefault(id(task.podset), []).append(task)
        self.size = len(session.nodes)

    # ------------------------------------------------------------------ helpers
    def tasks_under(self, group: Group) -> list[TaskInfo]:
        if isinstance(group, PodSet):
            return self.by_podset.get(id(group), [])
        out: list[TaskInfo] = []
        for child in group.children:
            out.extend(self.tasks_under(child))
        return out

    def active_nodes(self, group: Group) -> list[int]:
        if isinstance(group, PodSet):
            return [t.node for t in group.tasks if t.status in ACTIVE and t.node >= 0]
        out: list[int] = []
        for child in group.children:
            out.extend(self.active_nodes(child))
        return out

    def fit_inputs(self, tasks: list[TaskInfo]) -> tuple[FloatArray, FloatArray]:
        """Free capacity (idle + releasing) per node and the tasks' requests, with shared-GPU
        requests counted as device shares against whole GPUs plus the best shared device."""
        nodes = self.session.nodes
        free = nodes.idle + nodes.releasing
        requests = np.stack([t.request for t in tasks]).astype(np.float64)
        shared = [i for i, t in enumerate(tasks) if t.is_shared]
        if shared:
            free = free.copy()
            memory = np.where(nodes.gpu_memory > 0, nodes.gpu_memory, 1.0)
            free[:, GPU] += nodes.dev_free_future / memory
            smallest = self.session.min_gpu_memory or 1.0
            for i in shared:
                gpu = tasks[i].spec.gpu
                if gpu.fraction is not None:
                    share = gpu.fraction
                else:
                    share = min(1.0, (gpu.memory_mib or 0.0) / smallest)
                requests[i, GPU] += share * gpu.num_devices
        return free, requests

    def subject(self, group: Group) -> str:
        if group is self.job.root:
            return f"job {self.job.name!r}"
        return f"subgroup {group.name!r} of job {self.job.name!r}"

    # ------------------------------------------------------------------ recursion
    def place(self, group: Group, allowed: BoolArray, tiers: list[BoolArray]) -> None:
        tasks = self.tasks_under(group)
        if not tasks:
            return
        resolved = self.resolve(group)
        if resolved is None:
            self.place_children(group, allowed, tiers)
            return
        free, requests = self.fit_inputs(tasks)
        try:
            candidates = candidate_domains(
                resolved,
                allowed,
                free,
                requests,
                self.active_nodes(group) if resolved.required is not None else (),
                self.subject(group),
            )
        except TopologyError as exc:
            raise _Failure(Reason(exc.code, str(exc), {"subgroup": group.name})) from None
        last: Reason | None = None
        for candidate in candidates:
            checkpoint = self.statement.checkpoint()
            mask = np.zeros(self.size, dtype=bool)
            mask[candidate.nodes] = True
            sub_tiers = tiers
            if resolved.preferred is not None:
                scores = preferred_level_scores(resolved, candidate, free, requests)
                sub_tiers = [mask & (scores == s) for s in np.unique(scores[mask])[::-1]]
            try:
                self.place_children(group, mask, sub_tiers)
                return
            except _Failure as failure:
                self.statement.rollback(checkpoint)
                last = failure.reason
        assert last is not None
        tried = len(candidates)
        raise _Failure(
            Reason(
                last.code,
                f"{self.subject(group)} fits none of the {tried} candidate domain(s) of "
                f"{resolved.describe()}; last failure: {last.message}",
                {**last.details, "candidates_tried": tried},
            )
        )

    def resolve(self, group: Group) -> ResolvedConstraint | None:
        if group.topology is None:
            return None
        try:
            return resolve_constraint(self.trees, group.topology)
        except TopologyError as exc:
            raise _Failure(
                Reason(exc.code, f"{self.subject(group)}: {exc}", {"subgroup": group.name})
            ) from None

    def place_children(self, group: Group, allowed: BoolArray, tiers: list[BoolArray]) -> None:
        if isinstance(group, SubGroupSet):
            for child in ordered_children(group):
                self.place(child, allowed, tiers)
            return
        engine = self.session.engine
        for task in self.by_podset.get(id(group), []):
            choice = None
            for tier in tiers or [allowed]:
                choice = engine.choose(task, allowed & tier)
                if choice is not None:
                    break
            if choice is None:
                detail = engine.explain(task, allowed)
                raise _Failure(
                    Reason(
                        POD_SCHEDULING_ERRORS,
                        f"task {task.name!r} of {self.subject(group)} does not fit: {detail}",
                        {"task": task.uid},
                    )
                )
            if choice.fits_now:
                self.statement.allocate(task, choice.node, choice.gpu_groups)
            else:
                self.statement.pipeline(task, choice.node, choice.gpu_groups)


def place_tasks(
    session: Session, job: JobInfo, tasks: list[TaskInfo], statement: Statement
) -> Reason | None:
    """Place ``tasks`` of a topology-constrained ``job`` through ``statement``; None on success.

    On failure the statement is left as it was on entry (every candidate is rolled back) and the
    returned reason names the group, the constraint and the last thing that did not fit."""
    placer = _Placer(session, job, tasks, statement)
    checkpoint = statement.checkpoint()
    try:
        placer.place(job.root, session.nodes.schedulable.copy(), [])
    except _Failure as failure:
        statement.rollback(checkpoint)
        return failure.reason
    return None
