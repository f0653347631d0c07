"""Builders ("wrappers") so that a scheduler test case reads in five lines.

snap = cluster(nodes=[node("n0", gpus=2)], jobs=[job("j", tasks=[task("j-0", gpus=1)])])
result = run_session(snap, ["allocate"])
"""

from __future__ import annotations

from kai.scheduler.snapshot import (
    GpuRequest,
    JobSpec,
    NodeSelectorTerm,
    NodeSpec,
    PodAffinityTerm,
    QueueResource,
    QueueSpec,
    Requirement,
    SchedulerConfig,
    Snapshot,
    SubGroupSpec,
    Taint,
    TaskSpec,
    TaskStatus,
    Toleration,
)

CPU = 1000.0
MEM = 1e9


def node(
    name: str,
    gpus: int = 4,
    cpu: float = 20_000_000,
    memory: float = 20e9,
    gpu_memory: float = 100,
    max_pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
    unschedulable: bool = False,
    mig: object = None,
) -> NodeSpec:
    return NodeSpec(
        name=name,
        cpu_millis=cpu,
        memory_bytes=memory,
        gpus=gpus,
        gpu_memory_mib=gpu_memory,
        max_pods=max_pods,
        labels=dict(labels or {"kai.scheduler/type": name}),
        taints=taints,
        ready=ready,
        unschedulable=unschedulable,
        mig=mig,  # type: ignore[arg-type]
    )


def queue(
    name: str,
    parent: str | None = None,
    gpu: tuple[float, float, float] = (-1, -1, 1),
    cpu: tuple[float, float, float] = (-1, -1, 1),
    memory: tuple[float, float, float] = (-1, -1, 1),
    priority: int = 100,
    rank: float = 0,
) -> QueueSpec:
    def res(t: tuple[float, float, float]) -> QueueResource:
        return QueueResource(quota=t[0], limit=t[1], over_quota_weight=t[2])

    return QueueSpec(
        name=name,
        parent=parent,
        priority=priority,
        creation_rank=rank,
        resources={"gpu": res(gpu), "cpu": res(cpu), "memory": res(memory)},
    )


def task(
    name: str,
    gpus: int = 1,
    status: str = "Pending",
    node_name: str | None = None,
    cpu: float = CPU,
    memory: float = MEM,
    fraction: float | None = None,
    gpu_memory: float | None = None,
    num_devices: int = 1,
    mig: dict[str, int] | None = None,
    groups: tuple[str, ...] = (),
    subgroup: str | None = None,
    priority: int | None = None,
    affinity: dict[str, list[str]] | None = None,
    selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    labels: dict[str, str] | None = None,
    pod_affinity: tuple[str, dict[str, str]] | None = None,
    pod_anti_affinity: tuple[str, dict[str, str]] | None = None,
) -> TaskSpec:
    if fraction is not None or gpu_memory is not None:
        gpu = GpuRequest(fraction=fraction, memory_mib=gpu_memory, num_devices=num_devices)
    elif mig:
        gpu = GpuRequest(mig=tuple(sorted(mig.items())))
    else:
        gpu = GpuRequest(whole=gpus)
    terms: tuple[NodeSelectorTerm, ...] = ()
    if affinity:
        terms = (
            NodeSelectorTerm(
                tuple(Requirement(k, "In", tuple(v)) for k, v in sorted(affinity.items()))
            ),
        )
    return TaskSpec(
        uid=name,
        name=name,
        job="",
        status=TaskStatus(status),
        cpu_millis=cpu,
        memory_bytes=memory,
        gpu=gpu,
        node=node_name,
        gpu_groups=groups,
        subgroup=subgroup,
        priority=priority,
        labels=dict(labels or {}),
        node_selector=dict(selector or {}),
        node_affinity=terms,
        tolerations=tolerations,
        pod_affinity=(
            (PodAffinityTerm(pod_affinity[0], tuple(sorted(pod_affinity[1].items()))),)
            if pod_affinity
            else ()
        ),
        pod_anti_affinity=(
            (PodAffinityTerm(pod_anti_affinity[0], tuple(sorted(pod_anti_affinity[1].items()))),)
            if pod_anti_affinity
            else ()
        ),
    )


def job(
    name: str,
    tasks: list[TaskSpec],
    queue_name: str = "q",
    priority: int = 50,
    preemptible: bool | None = None,
    min_available: int | None = None,
    age: float = 0,
    subgroups: list[SubGroupSpec] | None = None,
    min_subgroup: int | None = None,
) -> JobSpec:
    for t in tasks:
        t.job = name
    return JobSpec(
        uid=name,
        name=name,
        queue=queue_name,
        priority=priority,
        preemptible=priority < 100 if preemptible is None else preemptible,
        created_at=-age * 60,
        tasks=tasks,
        min_available=(len(tasks) if min_available is None and not subgroups else min_available),
        min_subgroup=min_subgroup,
        subgroups=list(subgroups or []),
    )


def cluster(
    nodes: list[NodeSpec],
    jobs: list[JobSpec],
    queues: list[QueueSpec] | None = None,
    **config: object,
) -> Snapshot:
    return Snapshot(
        now=0.0,
        nodes=nodes,
        queues=queues if queues is not None else [queue("q")],
        jobs=jobs,
        config=SchedulerConfig(actions=("allocate",), **config),  # type: ignore[arg-type]
    )


def statuses(result: object) -> dict[str, tuple[str, str | None]]:
    return {
        uid: (out.status.value, out.node)
        for uid, out in result.tasks.items()  # type: ignore[attr-defined]
    }
