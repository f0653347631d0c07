"""From a validated scenario (and a current task state) to the scheduler core's :class:`Snapshot`.

Time is fixed: the session starts at :data:`NOW`, so ``createdMinutesAgo: m`` becomes
``created_at = NOW - 60*m`` and every run of a file builds the same snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kai.scenario import model
from kai.scheduler import snapshot as core

_STATUSES = {status.value: status for status in core.TaskStatus}

#: the session's clock, in seconds (any fixed value works; this one reads well in a debugger)
NOW = 1_000_000_000.0


@dataclass(frozen=True)
class TaskState:
    """The part of a task that changes between rounds."""

    status: str
    node: str | None
    gpu_groups: tuple[str, ...]


def initial_state(scenario: model.Scenario) -> dict[str, TaskState]:
    """Every task's state as written in the file, in the file's order."""
    return {
        task.name: TaskState(task.status, task.node, task.gpu_groups) for task in scenario.tasks()
    }


def to_snapshot(
    scenario: model.Scenario, state: Mapping[str, TaskState] | None = None
) -> core.Snapshot:
    """The core's input for one session; ``state`` overrides the tasks' status/node/gpuGroups."""
    states = state if state is not None else initial_state(scenario)
    gpu_requests: dict[model.Request, core.GpuRequest] = {}  # one GpuRequest per distinct request
    return core.Snapshot(
        now=NOW,
        nodes=[_node(node) for node in scenario.nodes],
        queues=[_queue(queue) for queue in scenario.queues],
        jobs=[_job(job, states, gpu_requests) for job in scenario.jobs],
        topologies=[
            core.TopologySpec(name=t.name, levels=list(t.levels), aliases=dict(t.aliases))
            for t in scenario.topologies
        ],
        config=scheduler_config(scenario),
    )


def scheduler_config(scenario: model.Scenario) -> core.SchedulerConfig:
    """The scenario's settings as the core's config (also the live one's in the parity test)."""
    config = scenario.config
    preemptees = config.max_consolidation_preemptees
    return core.SchedulerConfig(
        actions=scenario.actions,
        placement_gpu=config.placement_gpu,
        placement_cpu=config.placement_cpu,
        gpu_sharing_placement=config.gpu_sharing_placement,
        proportion=config.proportion,
        predicates=config.predicates,
        staleness_grace_period=float(config.staleness_grace_period_seconds),
        max_consolidation_preemptees=-1 if preemptees == -1 else int(preemptees),
        allow_consolidating_reclaim=config.allow_consolidating_reclaim,
        k_value=float(config.fair_share_k_value),
    )


def _node(node: model.Node) -> core.NodeSpec:
    mig = None
    if node.mig is not None:
        mig = core.MigSpec(
            strategy=node.mig.strategy,
            physical_gpus=node.mig.physical_gpus,
            devices=node.mig.devices,
        )
    return core.NodeSpec(
        name=node.name,
        cpu_millis=node.cpu_millis,
        memory_bytes=node.memory_bytes,
        gpus=node.gpus,
        gpu_memory_mib=node.gpu_memory_mib,
        max_pods=node.max_pods,
        labels=dict(node.labels),
        mig=mig,
    )


def _queue(queue: model.Queue) -> core.QueueSpec:
    def resource(spec: model.QueueResource) -> core.QueueResource:
        return core.QueueResource(
            quota=float(spec.quota),
            limit=float(spec.limit),
            over_quota_weight=float(spec.over_quota_weight),
        )

    return core.QueueSpec(
        name=queue.name,
        parent=queue.parent,
        priority=queue.priority,
        creation_rank=float(queue.creation_rank),
        resources={
            core.ResourceName.GPU: resource(queue.gpu),
            core.ResourceName.CPU: resource(queue.cpu_millis),
            core.ResourceName.MEMORY: resource(queue.memory_bytes),
        },
    )


def _topology(ref: model.TopologyRef | None) -> core.TopologyConstraint | None:
    if ref is None:
        return None
    return core.TopologyConstraint(
        topology=ref.topology,
        required_level=ref.required_level,
        preferred_level=ref.preferred_level,
    )


def _job(
    job: model.Job, states: Mapping[str, TaskState], gpu: dict[model.Request, core.GpuRequest]
) -> core.JobSpec:
    created_at = NOW - 60.0 * job.created_minutes_ago
    return core.JobSpec(
        uid=job.name,
        name=job.name,
        queue=job.queue,
        priority=job.priority,
        preemptible=job.preemptible,
        created_at=created_at,
        tasks=[_task(t, states[t.name], created_at, job.namespace, gpu) for t in job.tasks],
        namespace=job.namespace,
        min_available=job.min_available,
        min_subgroup=job.min_subgroup,
        subgroups=[
            core.SubGroupSpec(
                name=sub.name,
                parent=sub.parent,
                min_available=sub.min_available,
                min_subgroup=sub.min_subgroup,
                topology=_topology(sub.topology),
            )
            for sub in job.subgroups
        ],
        topology=_topology(job.topology),
        stale_since=None if job.stale_for_seconds is None else NOW - job.stale_for_seconds,
        deleted=job.deleted,
    )


def _gpu_request(request: model.Request) -> core.GpuRequest:
    if request.gpu_fraction is not None:
        return core.GpuRequest(fraction=request.gpu_fraction, num_devices=request.gpu_devices)
    if request.gpu_memory_mib is not None:
        return core.GpuRequest(memory_mib=request.gpu_memory_mib, num_devices=request.gpu_devices)
    return core.GpuRequest(whole=request.whole_gpus, mig=request.mig)


def _affinity(term: model.AffinityTerm | None) -> tuple[core.PodAffinityTerm, ...]:
    if term is None:
        return ()
    return (core.PodAffinityTerm(topology_key=term.topology_key, match_labels=term.match_labels),)


def _node_term(term: model.NodeAffinity) -> core.NodeSelectorTerm:
    return core.NodeSelectorTerm(
        requirements=(core.Requirement(key=term.key, operator="In", values=term.values),)
    )


def _preferred_nodes(terms: tuple[model.Preferred, ...]) -> tuple[core.WeightedNodeTerm, ...]:
    return tuple(
        core.WeightedNodeTerm(p.weight, _node_term(p.term))
        for p in terms
        if isinstance(p.term, model.NodeAffinity)
    )


def _preferred_pods(
    terms: tuple[model.Preferred, ...],
) -> tuple[core.WeightedPodAffinityTerm, ...]:
    return tuple(
        core.WeightedPodAffinityTerm(p.weight, _affinity(p.term)[0])
        for p in terms
        if isinstance(p.term, model.AffinityTerm)
    )


def _task(
    task: model.Task,
    state: TaskState,
    created_at: float,
    namespace: str,
    gpu: dict[model.Request, core.GpuRequest],
) -> core.TaskSpec:
    node_affinity: tuple[core.NodeSelectorTerm, ...] = ()
    if task.node_affinity is not None:
        node_affinity = (_node_term(task.node_affinity),)
    return core.TaskSpec(
        uid=task.name,
        name=task.name,
        job=task.job,
        status=_STATUSES[state.status],
        cpu_millis=task.request.cpu_millis,
        memory_bytes=task.request.memory_bytes,
        gpu=gpu[task.request]
        if task.request in gpu
        else gpu.setdefault(task.request, _gpu_request(task.request)),
        node=state.node,
        gpu_groups=state.gpu_groups,
        subgroup=task.subgroup,
        priority=task.priority,
        labels=dict(task.labels),
        node_affinity=node_affinity,
        pod_affinity=_affinity(task.pod_affinity),
        pod_anti_affinity=_affinity(task.pod_anti_affinity),
        preferred_node_affinity=_preferred_nodes(task.preferred_node_affinity),
        preferred_pod_affinity=_preferred_pods(task.preferred_pod_affinity),
        preferred_pod_anti_affinity=_preferred_pods(task.preferred_pod_anti_affinity),
        created_at=created_at,
        namespace=namespace,
    )
