"""Reclaim benchmark: one reclaim session on a full cluster (issue 4).

    python bench/bench_reclaim.py                  # 1000 and 2000 nodes
    python bench/bench_reclaim.py 1000 --repeat 5

Cluster: N nodes x 8 GPUs, every GPU held by 500 preemptible jobs of queue ``train`` (quota 0,
so all of it is over quota; ``--queues Q`` spreads them over Q such queues), each job a gang of
4-GPU tasks scattered over the nodes (two tasks per node, from different jobs; ``--task-gpus 1``
makes 8 one-GPU tasks per node). Queue ``research`` (quota 64 GPUs, nothing allocated) has one
pending gang of 64 GPUs. The session must evict the fewest train jobs that free 64 GPUs,
fairly, and pipeline the gang.

The snapshot is generated first (not timed); ``run_session(snapshot, ["reclaim"])`` is timed
``--repeat`` times (session building included). Peak memory: tracemalloc over one more run
(Python allocations, numpy included) and the process's peak RSS. Targets: 1,000 nodes < 2 s and
1 GiB; 2,000 nodes < 5 s. (KAI's own reclaim benchmark: 8.97 s and 1.7 GiB at 500 nodes.)
"""

from __future__ import annotations

import argparse
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

from kai.scheduler.session import run_session
from kai.scheduler.snapshot import (
    GpuRequest,
    JobSpec,
    NodeSpec,
    QueueResource,
    QueueSpec,
    SchedulerConfig,
    Snapshot,
    TaskSpec,
    TaskStatus,
)

TARGETS = {1000: 2.0, 2000: 5.0}
GPUS_PER_NODE = 8
JOBS = 500
GANG_GPUS = 64
NOW = 1_000_000_000.0


def _queue(name: str, gpu_quota: float) -> QueueSpec:
    return QueueSpec(
        name=name,
        parent=None,
        priority=100,
        creation_rank=1 if name == "research" else 0,
        resources={
            "gpu": QueueResource(quota=gpu_quota, limit=-1, over_quota_weight=1),
            "cpu": QueueResource(quota=-1, limit=-1, over_quota_weight=1),
            "memory": QueueResource(quota=-1, limit=-1, over_quota_weight=1),
        },
    )


def build(nodes: int, task_gpus: int = 4, queues: int = 1, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    node_specs = [
        NodeSpec(
            name=f"node{i:05d}",
            cpu_millis=128_000,
            memory_bytes=1_000_000_000_000,
            gpus=GPUS_PER_NODE,
            gpu_memory_mib=81_920,
            max_pods=110,
        )
        for i in range(nodes)
    ]
    slots = [n.name for n in node_specs for _ in range(GPUS_PER_NODE // task_gpus)]
    rng.shuffle(slots)
    tasks_per_job = len(slots) // JOBS
    jobs: list[JobSpec] = []
    for j in range(JOBS):
        uid = f"train-{j:03d}"
        created = NOW - 3600 - 10 * (JOBS - j)
        mine = slots[j * tasks_per_job : (j + 1) * tasks_per_job]
        jobs.append(
            JobSpec(
                uid=uid,
                name=uid,
                queue="train" if queues == 1 else f"train{j % queues:02d}",
                priority=50,
                preemptible=True,
                created_at=created,
                min_available=len(mine),
                last_start_time=created,
                tasks=[
                    TaskSpec(
                        uid=f"{uid}-{k}",
                        name=f"{uid}-{k}",
                        job=uid,
                        status=TaskStatus.RUNNING,
                        cpu_millis=8_000,
                        memory_bytes=64_000_000_000,
                        gpu=GpuRequest(whole=task_gpus),
                        node=node,
                        created_at=created,
                    )
                    for k, node in enumerate(mine)
                ],
            )
        )
    gang = GANG_GPUS // task_gpus
    jobs.append(
        JobSpec(
            uid="research-gang",
            name="research-gang",
            queue="research",
            priority=50,
            preemptible=True,
            created_at=NOW - 60,
            min_available=gang,
            tasks=[
                TaskSpec(
                    uid=f"research-gang-{k}",
                    name=f"research-gang-{k}",
                    job="research-gang",
                    status=TaskStatus.PENDING,
                    cpu_millis=8_000,
                    memory_bytes=64_000_000_000,
                    gpu=GpuRequest(whole=task_gpus),
                    created_at=NOW - 60,
                )
                for k in range(gang)
            ],
        )
    )
    return Snapshot(
        now=NOW,
        nodes=node_specs,
        queues=[_queue("research", GANG_GPUS)]
        + (
            [_queue("train", 0)]
            if queues == 1
            else [_queue(f"train{q:02d}", 0) for q in range(queues)]
        ),
        jobs=jobs,
        config=SchedulerConfig(),
    )


def block(snapshot: Snapshot, gangs: int) -> Snapshot:
    """The unsuccessful case: one task per node becomes non-preemptible, and ``gangs`` identical
    pending gangs of eight 8-GPU tasks (whole nodes) wait in ``research`` (quota raised so the
    gate passes): no node can be emptied, every search fails."""
    blockers: list[TaskSpec] = []
    seen: set[str] = set()
    for job in snapshot.jobs:
        for task in list(job.tasks):
            if task.node is not None and task.node not in seen:
                seen.add(task.node)
                job.tasks.remove(task)
                blockers.append(replace(task, job="blockers"))
        job.min_available = len(job.tasks)
    snapshot.jobs = [j for j in snapshot.jobs if j.tasks and j.queue != "research"]
    snapshot.jobs.append(
        JobSpec(
            uid="blockers",
            name="blockers",
            queue=snapshot.jobs[0].queue,
            priority=100,
            preemptible=False,
            created_at=NOW - 7200,
            min_available=1,
            tasks=blockers,
        )
    )
    for g in range(gangs):
        uid = f"big-{g:03d}"
        snapshot.jobs.append(
            JobSpec(
                uid=uid,
                name=uid,
                queue="research",
                priority=50,
                preemptible=True,
                created_at=NOW - 60 + g,
                min_available=8,
                tasks=[
                    TaskSpec(
                        uid=f"{uid}-{k}",
                        name=f"{uid}-{k}",
                        job=uid,
                        status=TaskStatus.PENDING,
                        cpu_millis=8_000,
                        memory_bytes=64_000_000_000,
                        gpu=GpuRequest(whole=8),
                    )
                    for k in range(8)
                ],
            )
        )
    snapshot.queues = [
        replace(q, resources={**q.resources, "gpu": QueueResource(10**6, -1, 1)})
        if q.name == "research"
        else q
        for q in snapshot.queues
    ]
    return snapshot


def bench(
    nodes: int, repeat: int, task_gpus: int, queues: int, blocked: int = 0
) -> dict[str, float]:
    snapshot = build(nodes, task_gpus, queues)
    if blocked:
        snapshot = block(snapshot, blocked)
    times: list[float] = []
    cpu_times: list[float] = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        cpu_start = time.process_time()
        result = run_session(snapshot, ["reclaim"])
        cpu_times.append(time.process_time() - cpu_start)
        times.append(time.perf_counter() - start)
    assert result is not None
    evicted = {e.task for e in result.evictions}
    evicted_gpus = task_gpus * len(evicted)
    victim_jobs = len({t.rsplit("-", 1)[0] for t in evicted})
    pipelined = sum(1 for o in result.tasks.values() if o.status is TaskStatus.PIPELINED)
    if blocked and (pipelined or evicted):
        raise SystemExit(f"{nodes} nodes: a blocked gang was placed")
    if not blocked and pipelined != GANG_GPUS // task_gpus:
        raise SystemExit(f"{nodes} nodes: the gang was not pipelined ({pipelined} tasks)")
    tracemalloc.start()
    run_session(snapshot, ["reclaim"])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "nodes": nodes,
        "running_tasks": sum(
            1 for j in snapshot.jobs for t in j.tasks if t.status is TaskStatus.RUNNING
        ),
        "victim_jobs": victim_jobs,
        "evicted_gpus": evicted_gpus,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "cpu_s": statistics.median(cpu_times),
        "peak_mib": peak / 2**20,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def full_cycle(nodes: int, repeat: int) -> None:
    """All five actions on the allocate benchmark's generated cluster (bench/generate_cluster.py:
    ~40% of the GPUs busy, 10 pending pods per node): what the victim actions add to a cycle."""
    sys.path.insert(0, str(Path(__file__).parent))
    from generate_cluster import generate
    from generate_cluster import to_snapshot as generated_snapshot
    from kai.scheduler.errors import IMPLEMENTED_ACTIONS

    snapshot = generated_snapshot(generate(nodes, 1))
    for actions in (["allocate"], list(IMPLEMENTED_ACTIONS)):
        cpu: list[float] = []
        wall: list[float] = []
        result = None
        for _ in range(repeat):
            start, cpu_start = time.perf_counter(), time.process_time()
            result = run_session(snapshot, actions)
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - start)
        assert result is not None
        print(
            f"| {nodes} | {', '.join(actions)} | {len(result.binds)} | {len(result.pipelined)} "
            f"| {len(result.evictions)} | {statistics.median(wall):.2f} "
            f"| {statistics.median(cpu):.2f} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", nargs="*", type=int, default=[1000, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--task-gpus", type=int, default=4, choices=(1, 2, 4, 8), help="GPUs per task (default 4)"
    )
    parser.add_argument(
        "--queues", type=int, default=1, help="spread the train jobs over this many queues"
    )
    parser.add_argument(
        "--blocked",
        type=int,
        default=0,
        metavar="GANGS",
        help="the unsuccessful case: one non-preemptible task per node, GANGS pending gangs of "
        "whole nodes that cannot fit",
    )
    parser.add_argument(
        "--full-cycle",
        action="store_true",
        help="instead: allocate alone vs all five actions on the allocate benchmark's cluster",
    )
    args = parser.parse_args(argv)
    if args.full_cycle:
        print("| nodes | actions | binds | pipelined | evictions | median wall s | median CPU s |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for nodes in args.nodes:
            full_cycle(nodes, args.repeat)
        return 0
    print(
        f"# reclaim bench, {args.task_gpus}-GPU tasks, {args.queues} train queue(s), "
        f"{args.blocked or 'no'} blocked gang(s), "
        f"Python {platform.python_version()}, "
        f"{platform.machine()}"
    )
    print(
        "| nodes | running tasks | victim jobs | evicted GPUs | median wall s | min wall s "
        "| median CPU s | tracemalloc peak MiB | peak RSS MiB | target |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for nodes in args.nodes:
        r = bench(nodes, args.repeat, args.task_gpus, args.queues, args.blocked)
        target = TARGETS.get(nodes)
        verdict = "" if target is None else f"< {target:g} s"
        print(
            f"| {nodes} | {r['running_tasks']:.0f} | {r['victim_jobs']:.0f} "
            f"| {r['evicted_gpus']:.0f} | {r['median_s']:.3f} | {r['min_s']:.3f} "
            f"| {r['cpu_s']:.3f} | {r['peak_mib']:.1f} | {r['rss_mib']:.0f} | {verdict} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
