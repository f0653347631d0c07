"""A scheduling session: the cluster state built from a snapshot, and the entry point.

:func:`run_session` is what ``kai simulate``, ``kai plan`` and the live scheduler call. The
:class:`Session` owns the node table, jobs, tasks, the fair-share state and the placement
engine; :meth:`Session.set_placement` is the one function that changes where a task is, so
node accounting, shared devices, gang counters and queue accounting can never disagree.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import numpy as np

from kai.api.gpu_request import mig_profile_gpus, queue_gpus
from kai.scheduler.errors import IMPLEMENTED_ACTIONS, SnapshotError, UnsupportedActionError
from kai.scheduler.fairshare.proportion import Proportion
from kai.scheduler.fairshare.resources import Vector
from kai.scheduler.framework import Registry
from kai.scheduler.gpu_sharing import new_device_id
from kai.scheduler.host_ports import HostPorts
from kai.scheduler.jobs import ACTIVE, JobInfo, SubGroupSet, TaskInfo, build_subgroup_tree
from kai.scheduler.nodes import NodeTable
from kai.scheduler.ordering import task_order_key
from kai.scheduler.placement import PlacementEngine, shared_memory
from kai.scheduler.plugins.registry import DEFAULT_REGISTRY
from kai.scheduler.pod_affinity import PlacedPods
from kai.scheduler.queues import QueueTree
from kai.scheduler.resource_layout import FloatArray, ResourceLayout
from kai.scheduler.result import Reason, SessionResult
from kai.scheduler.search_cache import SearchCache
from kai.scheduler.snapshot import (
    PLACED_STATUSES,
    JobSpec,
    NodeSpec,
    Snapshot,
    TaskSpec,
    TaskStatus,
)
from kai.scheduler.statement import Operation

QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"


def run_session(
    snapshot: Snapshot,
    actions: Sequence[str] | None = None,
    registry: Registry | None = None,
    on_action: Callable[[str, float, frozenset[str]], None] | None = None,
) -> SessionResult:
    """Open one session on ``snapshot``, run ``actions`` (default ``snapshot.config.actions``) in
    order and return the raw outcome. ``registry``: the plugins (default
    :data:`~kai.scheduler.plugins.registry.DEFAULT_REGISTRY`). ``on_action(name, seconds,
    job_uids)``, if given, is told after each action how long it took and which jobs' placement
    it changed (for metrics; it changes nothing). Raises :class:`UnsupportedActionError` before
    anything runs when an action is not implemented."""
    from kai.scheduler.actions import ACTIONS
    from kai.scheduler.outcome import build_result

    names = tuple(snapshot.config.actions if actions is None else actions)
    for name in names:
        if name not in IMPLEMENTED_ACTIONS or name not in ACTIONS:
            raise UnsupportedActionError(name)
    # A session allocates hundreds of thousands of small objects that all live until it ends;
    # the cyclic collector would walk them again and again for nothing (seconds at 5,000
    # nodes). It is paused for the session and resumes (and frees the session's cycles) after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        session = Session(snapshot, registry)
        for name in names:
            if on_action is None:
                ACTIONS[name](session)
                continue
            seen = len(session.job_changes)
            started = time.perf_counter()
            ACTIONS[name](session)
            elapsed = time.perf_counter() - started
            on_action(name, elapsed, frozenset(j.uid for j in session.job_changes[seen:]))
        result = build_result(session)
        session.close()
        return result
    finally:
        if collecting:
            gc.enable()


def node_gpus(spec: NodeSpec) -> float:
    """The GPUs a node gives the cluster's capacity (fair share, ``kai_cluster_capacity_gpus``),
    as KAI counts them (``Resource.GetSumGPUs``): its whole GPUs, and on a ``mixed`` MIG node
    each instance of a ``<N>g.*`` profile as N GPUs, the unit in which MIG requests count
    against quotas too (docs/design/gpu-sharing.md)."""
    gpus = float(spec.gpus)
    if spec.mig is not None and spec.mig.strategy == "mixed":
        gpus += sum(mig_profile_gpus(p) * c for p, c in spec.mig.devices)
    return gpus


class Session:
    def __init__(self, snapshot: Snapshot, registry: Registry | None = None) -> None:
        self.snapshot = snapshot
        self.config = snapshot.config
        #: the plugins of this session: the registry given (default ``DEFAULT_REGISTRY``)
        #: without those the config turns off
        self.registry = (DEFAULT_REGISTRY if registry is None else registry).for_config(self.config)
        specs = [task for job in snapshot.jobs for task in job.tasks]
        self.layout = ResourceLayout.for_snapshot(snapshot.nodes, specs)
        self.nodes = NodeTable(snapshot.nodes, self.layout)
        self.queue_tree = QueueTree(snapshot.queues)
        gpu_memories = [
            n.gpu_memory_mib for n in snapshot.nodes if n.gpus > 0 and n.gpu_memory_mib > 0
        ]
        self.min_gpu_memory = min(gpu_memories) if gpu_memories else None
        self.max_gpu_memory = max(gpu_memories) if gpu_memories else None
        self.job_reasons: dict[str, list[Reason]] = {}
        self.committed: list[Operation] = []
        self.jobs: list[JobInfo] = []
        self.tasks: dict[str, TaskInfo] = {}
        self.original: dict[str, tuple[TaskStatus, int, tuple[str, ...]]] = {}
        #: every job whose placement changed, in order (appended by each move; readers keep
        #: their own position in it to learn which jobs changed since they last looked)
        self.job_changes: list[JobInfo] = []
        #: the memo of the victim actions and the replay; a statement commit clears what in
        #: it reads the cluster (see ``search_cache``)
        self.search_cache = SearchCache(self)
        self._build_jobs()
        self.uses_pod_affinity = any(
            t.spec.pod_affinity or t.spec.pod_anti_affinity for t in self.tasks.values()
        )
        self.uses_preferred_pod_affinity = any(
            t.spec.preferred_pod_affinity or t.spec.preferred_pod_anti_affinity
            for t in self.tasks.values()
        )
        self.placed_pods = PlacedPods()
        self.uses_host_ports = any(t.spec.host_ports for t in self.tasks.values())
        self.host_ports = HostPorts()
        self._place_initial_tasks()
        self.proportion = self._build_proportion()
        self.engine = PlacementEngine(self, self.registry)

    def close(self) -> None:
        """Drop the session's state, breaking its reference cycles (job <-> task <-> PodSet
        <-> SubGroupSet, the session <-> its engine, caches and statements) so that reference
        counting frees it at once. Otherwise the cyclic collector, paused during the session,
        finds a few objects per task to walk and free at its next run: measured 0.15 s of CPU
        per cycle at 10,000 running tasks, about a quarter of a live cycle. The session cannot
        be used afterwards."""
        for job in self.jobs:
            job.tasks.clear()
            stack: list[SubGroupSet] = [job.root]
            while stack:
                group = stack.pop()
                for child in group.children:
                    child.parent = None
                    if isinstance(child, SubGroupSet):
                        stack.append(child)
                    else:
                        child.tasks.clear()
                group.children.clear()
        self.__dict__.clear()

    # ------------------------------------------------------------------ building
    def _build_jobs(self) -> None:
        uids: set[str] = set()
        tasks = self.tasks
        task_vector = self.layout.task_vector
        problems: dict[str, str | None] = {}  # per queue name (the tree is fixed)
        for spec in sorted(self.snapshot.jobs, key=_uid):
            if spec.uid in uids:
                raise SnapshotError(f"job {spec.uid!r} appears twice in the snapshot")
            uids.add(spec.uid)
            root, podsets = build_subgroup_tree(spec)
            job = JobInfo(spec, root, podsets)
            queue = spec.queue
            if queue in problems:
                problem = problems[queue]
            else:
                problem = problems[queue] = self.queue_tree.job_queue_problem(queue)
            if problem is not None:
                job.queue_ok = False
                self.job_reasons[spec.uid] = [
                    Reason(QUEUE_DOES_NOT_EXIST, problem, {"queue": queue})
                ]
            lost: list[str] = []
            specs = spec.tasks
            if len(specs) == 1:  # (most jobs: nothing to sort)
                ordered = [(task_order_key(specs[0]), specs[0])]
            else:
                ordered = sorted(((task_order_key(t), t) for t in specs), key=_first)
            for order_key, task_spec in ordered:
                if task_spec.uid in tasks:
                    raise SnapshotError(f"task {task_spec.uid!r} appears twice in the snapshot")
                podset = podsets.get(task_spec.subgroup or "default")
                if podset is None:
                    lost.append(task_spec.name)
                    continue
                task = TaskInfo(
                    task_spec,
                    job,
                    podset,
                    task_vector(task_spec),
                    task_spec.status,
                    -1,
                    (),
                    order_key,
                )
                podset.tasks.append(task)
                job.tasks.append(task)
                tasks[task_spec.uid] = task
            if lost:
                self.job_reasons.setdefault(spec.uid, []).append(
                    Reason(
                        "PodSchedulingErrors",
                        f"tasks {', '.join(lost)} name no leaf subgroup of job {spec.name!r}; "
                        "they are never scheduled",
                        {"tasks": lost},
                    )
                )
            self.jobs.append(job)

    def _place_initial_tasks(self) -> None:
        """Charge every placed task of the snapshot to its node. What ``_move`` would do task by
        task, with the node charges of whole-GPU (and CPU-only) tasks summed per node in one
        numpy pass: ``ufunc.at`` applies them in task order, so every node's figures are the
        very floats the task-by-task charges give."""
        nodes = self.nodes
        index = nodes.index
        original = self.original
        job_changes = self.job_changes
        # tasks whose move is more than a node charge: shared devices, pod affinity, host ports
        simple = not (
            self.uses_pod_affinity or self.uses_preferred_pod_affinity or self.uses_host_ports
        )
        holding_rows: list[int] = []  # idle -= request
        releasing_rows: list[int] = []  # releasing += request (Releasing: idle -= it as well)
        pipelined_rows: list[int] = []  # releasing -= request
        holding_reqs: list[FloatArray] = []
        releasing_reqs: list[FloatArray] = []
        pipelined_reqs: list[FloatArray] = []
        for task in self.tasks.values():
            spec = task.spec
            status = task.status
            if status not in PLACED_STATUSES:
                task.podset.count(status, +1)
                original[task.uid] = (status, -1, ())
                continue
            if spec.node is None or spec.node not in index:
                raise SnapshotError(
                    f"task {spec.uid!r} is {status.value} on node {spec.node!r}, which is not in "
                    "the snapshot"
                )
            node = index[spec.node]
            groups = tuple(spec.gpu_groups)
            if not simple or spec.gpu.is_shared:
                # the charges so far first: every row sees its charges in task order
                self._charge_rows(nodes.idle, holding_rows, holding_reqs, np.subtract)
                self._charge_rows(nodes.releasing, releasing_rows, releasing_reqs, np.add)
                self._charge_rows(nodes.releasing, pipelined_rows, pipelined_reqs, np.subtract)
                if spec.gpu.is_shared and len(groups) < spec.gpu.num_devices:
                    taken = set(nodes.devices[node]) | set(groups)
                    extra = list(groups)
                    while len(extra) < spec.gpu.num_devices:
                        device_id = new_device_id(spec.node, taken)
                        taken.add(device_id)
                        extra.append(device_id)
                    groups = tuple(extra)
                task.status = TaskStatus.PENDING  # charged below from a clean state
                task.podset.count(TaskStatus.PENDING, +1)
                self._move(task, status, node, groups, account_queues=False)
                original[task.uid] = (status, node, groups)
                continue
            # ``_move`` from a clean Pending state, the node charge deferred
            job = task.job
            job.version += 1
            job_changes.append(job)
            task.podset.count(status, +1)
            task.node, task.gpu_groups = node, groups
            request = task.request
            if status is TaskStatus.PIPELINED:
                pipelined_rows.append(node)
                pipelined_reqs.append(request)
            else:
                holding_rows.append(node)
                holding_reqs.append(request)
                if status is TaskStatus.RELEASING:
                    releasing_rows.append(node)
                    releasing_reqs.append(request)
            original[task.uid] = (status, node, groups)
        self._charge_rows(nodes.idle, holding_rows, holding_reqs, np.subtract)
        self._charge_rows(nodes.releasing, releasing_rows, releasing_reqs, np.add)
        self._charge_rows(nodes.releasing, pipelined_rows, pipelined_reqs, np.subtract)

    def _charge_rows(
        self, table: FloatArray, rows: list[int], requests: list[FloatArray], op: np.ufunc
    ) -> None:
        """``op`` each request into its row of ``table``, in list order (as ``NodeTable.charge``
        one at a time), log the rows as touched and empty both lists."""
        if not rows:
            return
        op.at(table, np.array(rows, dtype=np.intp), np.stack(requests))
        self.nodes.touched.extend(rows)
        rows.clear()
        requests.clear()

    def _build_proportion(self) -> Proportion:
        valid = [info.spec for info in self.queue_tree.queues.values()]
        capacity = [0.0, 0.0, 0.0]
        for spec in self.snapshot.nodes:
            if not spec.ready:
                continue
            capacity[0] += node_gpus(spec)
            capacity[1] += spec.cpu_millis
            capacity[2] += spec.memory_bytes
        requested: dict[str, list[float]] = {}
        allocated: dict[str, list[float]] = {}
        allocated_np: dict[str, list[float]] = {}
        for job in self.jobs:
            if not job.queue_ok:
                continue
            req = requested.setdefault(job.queue, [0.0, 0.0, 0.0])
            alloc = allocated.setdefault(job.queue, [0.0, 0.0, 0.0])
            alloc_np = allocated_np.setdefault(job.queue, [0.0, 0.0, 0.0])
            for task in job.tasks:
                if task.status in ACTIVE:
                    vec = self.queue_vector(task, task.node)
                    _add(alloc, vec)
                    _add(req, vec)
                    if not job.preemptible:
                        _add(alloc_np, vec)
                elif task.status is TaskStatus.PENDING:
                    _add(req, self.pending_queue_vector(task.spec))
        return Proportion(
            valid,
            capacity,
            requested,
            allocated,
            allocated_np,
            k_value=self.config.k_value,
            enabled=self.config.proportion,
            reclaimer_saturation_multiplier=self.config.reclaimer_saturation_multiplier,
        )

    # ------------------------------------------------------------------ resources of a task
    def queue_vector(self, task: TaskInfo, node: int) -> Vector:
        """What a placed task counts in queue accounting (gpu, cpu, memory)."""
        spec = task.spec
        memory: float | None = None  # only a gpu-memory request reads the device's memory
        if spec.gpu.memory_mib is not None:
            memory = float(self.nodes.gpu_memory[node]) if node >= 0 else self.min_gpu_memory
        share = queue_gpus(spec.gpu, memory, on_node=node >= 0)
        return (share, spec.cpu_millis, spec.memory_bytes)

    def pending_queue_vector(self, spec: TaskSpec) -> Vector:
        """What a pending task asks of its queue (gpu-memory converted with the smallest device)."""
        return (queue_gpus(spec.gpu, self.min_gpu_memory), spec.cpu_millis, spec.memory_bytes)

    def capacity_vector(self, spec: TaskSpec) -> Vector:
        """What a task counts in the job-level capacity check (gpu-memory converted with the
        largest device: the lenient bound KAI uses)."""
        return (queue_gpus(spec.gpu, self.max_gpu_memory), spec.cpu_millis, spec.memory_bytes)

    # ------------------------------------------------------------------ the one mutator
    def set_placement(
        self, task: TaskInfo, status: TaskStatus, node: int, gpu_groups: tuple[str, ...]
    ) -> None:
        """Move ``task`` to ``status`` on ``node`` (-1 = unplaced) and ``gpu_groups``, updating
        node accounting, shared devices, gang counters and queue accounting."""
        self._move(task, status, node, gpu_groups, account_queues=True)

    def _move(
        self,
        task: TaskInfo,
        status: TaskStatus,
        node: int,
        gpu_groups: tuple[str, ...],
        account_queues: bool,
    ) -> None:
        old_status, old_node, old_groups = task.status, task.node, task.gpu_groups
        job = task.job
        job.version += 1
        self.job_changes.append(job)
        queues = account_queues and job.queue_ok
        if old_node >= 0:
            self._charge(task, old_status, old_node, old_groups, -1)
            if queues and old_status in ACTIVE:
                self.proportion.on_deallocate(
                    job.queue, self.queue_vector(task, old_node), job.preemptible
                )
        task.podset.count(old_status, -1)
        task.podset.count(status, +1)
        task.status, task.node, task.gpu_groups = status, node, gpu_groups
        if (self.uses_pod_affinity or self.uses_preferred_pod_affinity) and old_node != node:
            self.placed_pods.move(task.spec, old_node, node)
        if self.uses_host_ports and old_node != node and task.spec.host_ports:
            self.host_ports.move(task.spec, old_node, node)
        if node >= 0:
            self._charge(task, status, node, gpu_groups, +1)
            if queues and status in ACTIVE:
                self.proportion.on_allocate(
                    job.queue, self.queue_vector(task, node), job.preemptible
                )

    def _charge(
        self, task: TaskInfo, status: TaskStatus, node: int, groups: tuple[str, ...], sign: int
    ) -> None:
        self.nodes.charge(node, task.request, status, sign)
        if task.spec.gpu.is_shared:
            memory = shared_memory(task.spec, float(self.nodes.gpu_memory[node]))
            for group in groups:
                self.nodes.charge_shared(node, group, memory, status, sign)

    def commit(self, operations: list[Operation]) -> None:
        """Record a statement's surviving operations as decisions, then run the registry's
        on-commit hooks with them."""
        self.committed.extend(operations)
        for hook in self.registry.on_commit:
            hook.run(self, operations)

    # ------------------------------------------------------------------ queries
    def set_reason(self, job: JobInfo, reason: Reason) -> None:
        self.job_reasons[job.uid] = [reason]

    def clear_reasons(self, job: JobInfo) -> None:
        self.job_reasons.pop(job.uid, None)


def _uid(job: JobSpec) -> str:
    return job.uid


def _first(pair: tuple[tuple[object, ...], TaskSpec]) -> tuple[object, ...]:
    return pair[0]


def _add(total: list[float], vec: Vector) -> None:
    total[0] += vec[0]
    total[1] += vec[1]
    total[2] += vec[2]
