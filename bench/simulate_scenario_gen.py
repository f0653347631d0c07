"""Generate a large scenario file (JSON) for ``kai simulate`` speed measurements.

``python bench/simulate_scenario_gen.py NODES OUT.json``: NODES nodes of 8 GPUs with zone/rack
labels, a 2-level queue tree of 50 leaf queues, and 10 pending tasks per node (1-GPU tasks,
fractional tasks and 8-GPU gangs), all valid by the scenario format.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _resources(quota: float) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {
        "gpu": {"quota": quota, "limit": -1, "overQuotaWeight": 1},
        "cpuMillis": dict(unlimited),
        "memoryBytes": dict(unlimited),
    }


def generate(nodes: int, tasks_per_node: int = 10) -> dict[str, Any]:
    node_list = [
        {
            "name": f"node{i:05d}",
            "gpus": 8,
            "cpuMillis": 128000,
            "memoryBytes": 1024 * 10**9,
            "gpuMemoryMiB": 81920,
            "maxPods": 110,
            "labels": {"zone": f"zone{i // 200}", "rack": f"rack{i // 20}"},
        }
        for i in range(nodes)
    ]
    queues: list[dict[str, Any]] = [
        {"name": "default", "parent": None, "priority": 100, "creationRank": 0, "implicit": True}
        | _resources(-1)
    ]
    for d in range(5):
        queues.append(
            {"name": f"dept{d}", "parent": "default", "priority": 100, "creationRank": 1 + d}
            | _resources(nodes * 8 / 5 / 2)
        )
    for q in range(50):
        queues.append(
            {
                "name": f"team{q}",
                "parent": f"dept{q // 10}",
                "priority": 100,
                "creationRank": 10 + q,
            }
            | _resources(nodes * 8 / 50 / 2)
        )
    jobs: list[dict[str, Any]] = []
    total = nodes * tasks_per_node
    made = 0
    j = 0
    while made < total:
        kind = j % 10
        size = 8 if kind == 0 else 1
        size = min(size, total - made)
        request: dict[str, Any] = {"cpuMillis": 1000, "memoryBytes": 4 * 10**9}
        if kind == 0:
            request["gpus"] = 1
        elif kind < 4:
            request["gpuFraction"] = 0.5
        else:
            request["gpus"] = 1
        jobs.append(
            {
                "name": f"job{j}",
                "queue": f"team{j % 50}",
                "priority": 50,
                "preemptible": True,
                "createdMinutesAgo": (j * 7) % 600,
                "minAvailable": size,
                "tasks": [
                    {"name": f"job{j}-{t}", "status": "Pending", "request": dict(request)}
                    for t in range(size)
                ],
            }
        )
        made += size
        j += 1
    return {
        "formatVersion": 1,
        "id": f"generated/{nodes}-nodes",
        "source": "bench/simulate_scenario_gen.py",
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


def main() -> None:
    nodes = int(sys.argv[1])
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(generate(nodes), handle)


if __name__ == "__main__":
    main()
