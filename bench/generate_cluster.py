"""Synthetic clusters for the allocate benchmark.

``N`` nodes of 8 GPUs (80 GB each) with zone and rack labels (16 nodes per rack, 16 racks per
zone); a 2-level queue tree of 5 departments x 10 leaf queues (50 leaves) whose GPU quotas add
up to 60% of the cluster; about 40% of the GPUs already busy with running jobs; and 10 pending
tasks per node: 1-GPU pods, fractional pods (0.25 / 0.5 of a device) and gangs of 8 to 64 GPUs
(tasks of 4 or 8 GPUs). Everything follows from ``seed``.

    python bench/generate_cluster.py 1000 --out cluster.json   # a scenario file for kai simulate

As a library: ``generate(nodes, seed)`` returns the scenario as a dict in the shared scenario
format and ``to_snapshot(scenario)`` the scheduler core's input built from it directly.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

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

GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 81920
NODE_CPU = 128_000
NODE_MEMORY = 1024 * 10**9
DEPARTMENTS = 5
LEAVES_PER_DEPARTMENT = 10
TASKS_PER_NODE = 10
BUSY_FRACTION = 0.4


def _unlimited() -> dict[str, float]:
    return {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def _task(
    name: str,
    request: dict[str, Any],
    status: str = "Pending",
    node: str | None = None,
    groups: list[str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "status": status, "request": request}
    if node is not None:
        out["node"] = node
    if groups:
        out["gpuGroups"] = groups
    return out


def generate(nodes: int, seed: int = 1, tasks_per_node: int = TASKS_PER_NODE) -> dict[str, Any]:
    rng = random.Random(seed)
    node_list = []
    for i in range(nodes):
        rack = i // 16
        node_list.append(
            {
                "name": f"node-{i:05d}",
                "gpus": GPUS_PER_NODE,
                "cpuMillis": NODE_CPU,
                "memoryBytes": NODE_MEMORY,
                "gpuMemoryMiB": GPU_MEMORY_MIB,
                "maxPods": 110,
                "labels": {
                    "topology.kubernetes.io/zone": f"zone-{rack // 16}",
                    "kai.scheduler/rack": f"rack-{rack}",
                },
            }
        )
    total_gpus = nodes * GPUS_PER_NODE
    leaf_quota = round(0.6 * total_gpus / (DEPARTMENTS * LEAVES_PER_DEPARTMENT), 1)
    queues: list[dict[str, Any]] = []
    leaves: list[str] = []
    rank = 0
    for d in range(DEPARTMENTS):
        queues.append(
            {
                "name": f"dept-{d}",
                "parent": None,
                "priority": 100,
                "creationRank": rank,
                "gpu": {
                    "quota": leaf_quota * LEAVES_PER_DEPARTMENT,
                    "limit": -1,
                    "overQuotaWeight": 1,
                },
                "cpuMillis": _unlimited(),
                "memoryBytes": _unlimited(),
            }
        )
        rank += 1
        for leaf in range(LEAVES_PER_DEPARTMENT):
            name = f"team-{d}-{leaf}"
            leaves.append(name)
            queues.append(
                {
                    "name": name,
                    "parent": f"dept-{d}",
                    "priority": 100,
                    "creationRank": rank,
                    "gpu": {
                        "quota": leaf_quota,
                        "limit": -1,
                        "overQuotaWeight": rng.choice([1, 1, 2]),
                    },
                    "cpuMillis": _unlimited(),
                    "memoryBytes": _unlimited(),
                }
            )
            rank += 1

    jobs: list[dict[str, Any]] = []

    def add_job(
        name: str,
        tasks: list[dict[str, Any]],
        min_available: int,
        queue: str,
        priority: int,
        age: int,
    ) -> None:
        jobs.append(
            {
                "name": name,
                "queue": queue,
                "priority": priority,
                "preemptible": priority < 100,
                "createdMinutesAgo": age,
                "minAvailable": min_available,
                "tasks": tasks,
            }
        )

    # running load: whole nodes' worth of 1..8-GPU tasks until ~40% of the GPUs are busy
    busy_target = int(BUSY_FRACTION * total_gpus)
    busy = 0
    node_free = [GPUS_PER_NODE] * nodes
    order = list(range(nodes))
    rng.shuffle(order)
    r = 0
    for n in order:
        if busy >= busy_target:
            break
        while node_free[n] > 0 and busy < busy_target:
            gpus = rng.choice([1, 2, 4, 8])
            gpus = min(gpus, node_free[n])
            node_free[n] -= gpus
            busy += gpus
            request = {"gpus": gpus, "cpuMillis": 4000 * gpus, "memoryBytes": 32 * 10**9 * gpus}
            add_job(
                f"run-{r}",
                [_task(f"run-{r}-0", request, "Running", node_list[n]["name"])],
                1,
                rng.choice(leaves),
                rng.choice([50, 50, 75]),
                rng.randint(60, 600),
            )
            r += 1

    pending = tasks_per_node * nodes
    made = 0
    j = 0
    while made < pending:
        kind = rng.random()
        queue = rng.choice(leaves)
        age = rng.randint(0, 59)
        priority = rng.choice([50, 50, 50, 75, 100])
        name = f"job-{j}"
        j += 1
        if kind < 0.55:
            request = {"gpus": 1, "cpuMillis": 4000, "memoryBytes": 32 * 10**9}
            add_job(name, [_task(f"{name}-0", request)], 1, queue, priority, age)
            made += 1
        elif kind < 0.80:
            fraction = rng.choice([0.25, 0.5])
            request = {"gpuFraction": fraction, "cpuMillis": 1000, "memoryBytes": 8 * 10**9}
            add_job(name, [_task(f"{name}-0", request)], 1, queue, priority, age)
            made += 1
        else:
            per_task = rng.choice([4, 8])
            gang_gpus = rng.choice([8, 16, 32, 64])
            count = max(1, gang_gpus // per_task)
            count = min(count, pending - made)
            request = {
                "gpus": per_task,
                "cpuMillis": 4000 * per_task,
                "memoryBytes": 32 * 10**9 * per_task,
            }
            tasks = [_task(f"{name}-{k}", request) for k in range(count)]
            add_job(name, tasks, count, queue, rng.choice([50, 75]), age)
            made += count

    return {
        "formatVersion": 1,
        "id": f"allocate/bench_{nodes}_nodes",
        "notes": f"synthetic cluster: {nodes} nodes x 8 GPUs, 50 leaf queues, seed {seed}",
        "mode": "single-session",
        "actions": ["allocate"],
        "config": {
            "kaiPlugins": "default",
            "predicates": True,
            "proportion": True,
            "placement": {"gpu": "binpack", "cpu": "binpack"},
            "gpuSharingPlacement": "pack",
            "stalenessGracePeriodSeconds": 60,
            "maxConsolidationPreemptees": 16,
            "allowConsolidatingReclaim": True,
            "fairShareKValue": 1,
        },
        "nodes": node_list,
        "queues": queues,
        "jobs": jobs,
    }


def to_snapshot(scenario: dict[str, Any]) -> Snapshot:
    """The core's input for a generated scenario (no file, no validation: the generator is
    trusted)."""
    nodes = [
        NodeSpec(
            name=n["name"],
            cpu_millis=n["cpuMillis"],
            memory_bytes=n["memoryBytes"],
            gpus=n["gpus"],
            gpu_memory_mib=n["gpuMemoryMiB"],
            max_pods=n["maxPods"],
            labels=dict(n["labels"]),
        )
        for n in scenario["nodes"]
    ]
    queues = []
    for q in scenario["queues"]:
        resources = {
            key: QueueResource(q[src]["quota"], q[src]["limit"], q[src]["overQuotaWeight"])
            for key, src in (("gpu", "gpu"), ("cpu", "cpuMillis"), ("memory", "memoryBytes"))
        }
        queues.append(
            QueueSpec(q["name"], q["parent"], q["priority"], q["creationRank"], resources)
        )
    jobs = []
    for j in scenario["jobs"]:
        tasks = []
        for t in j["tasks"]:
            req = t["request"]
            if "gpuFraction" in req:
                gpu = GpuRequest(fraction=req["gpuFraction"])
            else:
                gpu = GpuRequest(whole=req.get("gpus", 0))
            tasks.append(
                TaskSpec(
                    uid=t["name"],
                    name=t["name"],
                    job=j["name"],
                    status=TaskStatus(t["status"]),
                    cpu_millis=req["cpuMillis"],
                    memory_bytes=req["memoryBytes"],
                    gpu=gpu,
                    node=t.get("node"),
                    gpu_groups=tuple(t.get("gpuGroups", ())),
                )
            )
        jobs.append(
            JobSpec(
                uid=j["name"],
                name=j["name"],
                queue=j["queue"],
                priority=j["priority"],
                preemptible=j["preemptible"],
                created_at=-60.0 * j["createdMinutesAgo"],
                tasks=tasks,
                min_available=j["minAvailable"],
            )
        )
    return Snapshot(
        now=0.0,
        nodes=nodes,
        queues=queues,
        jobs=jobs,
        config=SchedulerConfig(actions=("allocate",)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks-per-node", type=int, default=TASKS_PER_NODE)
    parser.add_argument("--out", help="write the scenario JSON here (default: standard output)")
    args = parser.parse_args(argv)
    scenario = generate(args.nodes, args.seed, args.tasks_per_node)
    text = json.dumps(scenario, separators=(",", ":"))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
