"""Allocate benchmark with GPU sharing and a 3-level topology (issue 5).

    python bench/bench_topology.py                  # 1000 nodes
    python bench/bench_topology.py 1000 2000 --repeat 5

Cluster: ``N`` nodes of 8 GPUs (80 GiB each) labelled zone / block / rack, 16 nodes per rack,
4 racks per block, 4 blocks per zone; one Topology over the three levels. About 40% of the GPUs
are busy with running jobs. Pending: 10 tasks per node, of which 30% are fractional pods (0.25 /
0.5 of a device, or 20 GiB of GPU memory), the rest 1-GPU pods and gangs of 8-64 GPUs; half of
the gangs require rack or block placement (some also prefer rack inside a required block), the
other half are unconstrained. A 2-level queue tree of 50 leaves shares the cluster.

The snapshot is built first (not timed); ``run_session(snapshot, ["allocate"])`` is timed
``--repeat`` times; wall time and process CPU time are reported (on a shared machine the CPU
time is the steadier figure). Target: 1,000 nodes under 1.5 s per session.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

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
    TopologyConstraint,
    TopologySpec,
)

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
GPUS = 8
GPU_MEMORY = 81920
NODES_PER_RACK, RACKS_PER_BLOCK, BLOCKS_PER_ZONE = 16, 4, 4
TARGET_S = {1000: 1.5}


def _queues(rng: random.Random, total_gpus: int) -> tuple[list[QueueSpec], list[str]]:
    unlimited = QueueResource(-1, -1, 1)
    quota = round(0.6 * total_gpus / 50, 1)
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    for d in range(5):
        res = {"gpu": QueueResource(quota * 10, -1, 1), "cpu": unlimited, "memory": unlimited}
        queues.append(QueueSpec(f"dept-{d}", None, 100, len(queues), res))
        for leaf in range(10):
            name = f"team-{d}-{leaf}"
            leaves.append(name)
            res = {
                "gpu": QueueResource(quota, -1, rng.choice([1, 1, 2])),
                "cpu": unlimited,
                "memory": unlimited,
            }
            queues.append(QueueSpec(name, f"dept-{d}", 100, len(queues), res))
    return queues, leaves


def _task(name: str, job: str, gpu: GpuRequest, cpu: float, status: str = "Pending",
          node: str | None = None) -> TaskSpec:  # fmt: skip
    return TaskSpec(
        uid=name,
        name=name,
        job=job,
        status=TaskStatus(status),
        cpu_millis=cpu,
        memory_bytes=cpu * 8e6,
        gpu=gpu,
        node=node,
    )


def generate(nodes: int, seed: int = 1, tasks_per_node: int = 10) -> Snapshot:
    rng = random.Random(seed)
    specs = []
    for i in range(nodes):
        rack = i // NODES_PER_RACK
        block = rack // RACKS_PER_BLOCK
        zone = block // BLOCKS_PER_ZONE
        labels = {ZONE: f"z{zone}", BLOCK: f"b{block}", RACK: f"r{rack}"}
        specs.append(NodeSpec(f"node-{i:05d}", 128_000, 1024e9, GPUS, GPU_MEMORY, 110, labels))
    queues, leaves = _queues(rng, nodes * GPUS)
    jobs: list[JobSpec] = []

    def add(name: str, tasks: list[TaskSpec], minimum: int, priority: int,
            topology: TopologyConstraint | None = None) -> None:  # fmt: skip
        jobs.append(
            JobSpec(
                uid=name,
                name=name,
                queue=rng.choice(leaves),
                priority=priority,
                preemptible=priority < 100,
                created_at=-60.0 * rng.randint(0, 600),
                tasks=tasks,
                min_available=minimum,
                topology=topology,
            )
        )

    free = [GPUS] * nodes
    busy, target = 0, int(0.4 * nodes * GPUS)
    order = list(range(nodes))
    rng.shuffle(order)
    for n in order:
        while free[n] > 0 and busy < target:
            gpus = min(rng.choice([1, 2, 4, 8]), free[n])
            free[n] -= gpus
            busy += gpus
            name = f"run-{len(jobs)}"
            task = _task(f"{name}-0", name, GpuRequest(whole=gpus), 4000 * gpus, "Running",
                         specs[n].name)  # fmt: skip
            add(name, [task], 1, rng.choice([50, 50, 75]))
        if busy >= target:
            break

    made, j, fractional = 0, 0, 0
    pending = tasks_per_node * nodes
    while made < pending:
        name = f"job-{j}"
        j += 1
        kind = rng.random()
        if fractional < 0.3 * (made + 1):  # keep 30% of the pending pods fractional
            form = rng.random()
            if form < 0.4:
                gpu = GpuRequest(fraction=0.25)
            elif form < 0.8:
                gpu = GpuRequest(fraction=0.5)
            else:
                gpu = GpuRequest(memory_mib=20480.0)
            add(name, [_task(f"{name}-0", name, gpu, 1000)], 1, rng.choice([50, 50, 100]))
            made += 1
            fractional += 1
        elif kind < 0.70:
            add(name, [_task(f"{name}-0", name, GpuRequest(whole=1), 4000)], 1, 50)
            made += 1
        else:
            per_task = rng.choice([4, 8])
            count = min(max(1, rng.choice([8, 16, 32, 64]) // per_task), pending - made)
            tasks = [
                _task(f"{name}-{k}", name, GpuRequest(whole=per_task), 4000 * per_task)
                for k in range(count)
            ]
            topology = None
            if rng.random() < 0.5:
                level = rng.choice([RACK, BLOCK])
                preferred = RACK if level == BLOCK and rng.random() < 0.5 else None
                topology = TopologyConstraint("cluster", level, preferred)
            add(name, tasks, count, rng.choice([50, 75]), topology)
            made += count
    return Snapshot(
        now=0.0,
        nodes=specs,
        queues=queues,
        jobs=jobs,
        topologies=[TopologySpec("cluster", [ZONE, BLOCK, RACK], {"rack": RACK})],
        config=SchedulerConfig(actions=("allocate",)),
    )


def bench(nodes: int, repeat: int, seed: int) -> dict[str, float]:
    snapshot = generate(nodes, seed)
    pending = [t for j in snapshot.jobs for t in j.tasks if t.status is TaskStatus.PENDING]
    constrained = sum(1 for j in snapshot.jobs if j.topology is not None)
    times = []
    cpu = []
    result = None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run_session(snapshot, ["allocate"])
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert result is not None
    placed = sum(1 for o in result.tasks.values() if o.status.value in ("Binding", "Pipelined"))
    shared = sum(1 for o in result.tasks.values() if o.gpu_groups and o.status.value == "Binding")
    return {
        "pending": len(pending),
        "fractional": sum(1 for t in pending if t.gpu.is_shared),
        "constrained_gangs": constrained,
        "placed": placed,
        "shared_placed": shared,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "cpu_s": statistics.median(cpu),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    print(
        "| nodes | pending | fractional | topology gangs | placed | shared placed | median s "
        "| min s | median CPU s | target |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for size in args.sizes:
        row = bench(size, args.repeat, args.seed)
        target = TARGET_S.get(size)
        verdict = (
            ""
            if target is None
            else ("met" if row["cpu_s"] < target else "MISSED") + f" (CPU < {target:g} s)"
        )
        print(
            f"| {size} | {row['pending']:.0f} | {row['fractional']:.0f} | "
            f"{row['constrained_gangs']:.0f} | {row['placed']:.0f} | {row['shared_placed']:.0f} | "
            f"{row['median_s']:.3f} | {row['min_s']:.3f} | {row['cpu_s']:.3f} | {verdict} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
