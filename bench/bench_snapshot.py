"""The scheduler's snapshot per cycle: a full rebuild from the caches vs the incremental one.

    .venv/bin/python bench/bench_snapshot.py                      # 2,000 nodes, 10,000 pods
    .venv/bin/python bench/bench_snapshot.py --nodes 500 --pods 2000 --changes 20

The cluster: N nodes x 8 GPUs, P single-GPU pods of this scheduler in PodGroups of one, half
of them bound (Running), the rest pending; plus P/10 pods of another scheduler on the nodes.
Each cycle ``--changes`` pods change (a pending one gets bound: a new resourceVersion with
``spec.nodeName``), as when work trickles in. Timed per cycle (CPU seconds of this process):
``SnapshotBuilder.build`` over every cached object (what each cycle did before) and
``IncrementalSnapshot.build`` after the changed keys were reported, with the same parse caches
warm in both. The two results are compared every cycle (they must be equal).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "controllers"))

from kai.reconcilers.incremental_snapshot import KINDS, IncrementalSnapshot, Key, dict_source
from kai.reconcilers.snapshot_builder import SnapshotBuilder
from kai.sim.nodes import NodeShape, node_manifest, ready_conditions
from kai.sim.workloads import pod_manifest

NAME = "kai-scheduler"


def cluster(n_nodes: int, n_pods: int) -> dict[str, dict[Key, dict[str, Any]]]:
    objects: dict[str, dict[Key, dict[str, Any]]] = {k: {} for k in KINDS}
    for i in range(n_nodes):
        node = node_manifest(f"node-{i:05d}", i, NodeShape(gpus=8))
        node["metadata"].update(uid=f"node-{i}", resourceVersion="1")
        node["status"]["conditions"] = ready_conditions()
        objects["nodes"][("", node["metadata"]["name"])] = node
    objects["queues"][("", "bench")] = {
        "metadata": {"name": "bench", "uid": "q", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "resources": {
                r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                for r in ("gpu", "cpu", "memory")
            }
        },
    }
    for i in range(n_pods):
        name = f"pod-{i:06d}"
        pod = pod_manifest(name, "bench", "bench", gpus=1)
        pod["metadata"].update(
            uid=f"pod-{i}",
            resourceVersion="1",
            creationTimestamp="2026-01-01T00:00:00Z",
            annotations={"pod-group-name": f"pg-{name}"},
        )
        if i % 2 == 0:
            pod["spec"]["nodeName"] = f"node-{(i // 2) % n_nodes:05d}"
            pod["status"] = {"phase": "Running"}
        objects["pods"][("bench", name)] = pod
        objects["podgroups"][("bench", f"pg-{name}")] = {
            "metadata": {
                "name": f"pg-{name}",
                "namespace": "bench",
                "uid": f"pg-{i}",
                "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"queue": "bench", "minMember": 1},
        }
    for i in range(n_pods // 10):
        pod = pod_manifest(f"other-{i}", "other", None, scheduler_name="default-scheduler")
        pod["metadata"].update(uid=f"other-{i}", resourceVersion="1")
        pod["spec"]["nodeName"] = f"node-{i % n_nodes:05d}"
        objects["pods"][("other", f"other-{i}")] = pod
    return objects


def full(builder: SnapshotBuilder, objects: dict[str, dict[Key, dict[str, Any]]]) -> Any:
    return builder.build(
        pods=list(objects["pods"].values()),
        nodes=list(objects["nodes"].values()),
        podgroups=list(objects["podgroups"].values()),
        queues=list(objects["queues"].values()),
        bind_requests=list(objects["bindrequests"].values()),
        topologies=[],
        priority_classes=[],
        now=1.0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--changes", type=int, default=20, help="pods changed per cycle")
    parser.add_argument("--cycles", type=int, default=20)
    args = parser.parse_args(argv)
    objects = cluster(args.nodes, args.pods)
    full_builder = SnapshotBuilder(NAME)
    incremental = IncrementalSnapshot(
        SnapshotBuilder(NAME), {k: dict_source(objects[k]) for k in KINDS}
    )
    t0 = time.process_time()
    full(full_builder, objects)
    first_full = time.process_time() - t0
    t0 = time.process_time()
    incremental.build(now=1.0)
    first_incremental = time.process_time() - t0
    pending = [
        k for k, p in objects["pods"].items() if k[0] == "bench" and "nodeName" not in p["spec"]
    ]
    full_times, incremental_times = [], []
    for cycle in range(args.cycles):
        for j in range(args.changes):
            key = pending.pop()
            pod = dict(objects["pods"][key])
            pod["metadata"] = {**pod["metadata"], "resourceVersion": str(cycle + 2)}
            pod["spec"] = {**pod["spec"], "nodeName": f"node-{j % args.nodes:05d}"}
            objects["pods"][key] = pod
            incremental.changed("pods", pod)
        t0 = time.process_time()
        want = full(full_builder, objects)
        full_times.append(time.process_time() - t0)
        t0 = time.process_time()
        got = incremental.build(now=1.0)
        incremental_times.append(time.process_time() - t0)
        if got.snapshot != want.snapshot:
            print("MISMATCH: the incremental snapshot differs from the full build", file=sys.stderr)
            return 1
    f, i = statistics.median(full_times), statistics.median(incremental_times)
    print(
        f"{args.nodes} nodes, {args.pods} pods, {args.changes} changed per cycle, "
        f"{args.cycles} cycles (CPU s, medians)"
    )
    print(f"  first build:          full {first_full:.3f}   incremental {first_incremental:.3f}")
    print(f"  per cycle:            full {f:.4f}  incremental {i:.4f}  ({f / i:.1f}x less)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
