"""Allocate benchmark: median wall time of one allocate session and peak memory.

    python bench/bench_allocate.py                 # 100, 1000, 2000, 5000 nodes
    python bench/bench_allocate.py 1000 --repeat 5

For each size the snapshot is generated first (not timed); then ``run_session(snapshot,
["allocate"])`` is timed ``--repeat`` times (the session is built from the snapshot inside each
run, so array building is included). Peak memory is measured in one more run under tracemalloc
(Python allocations during the session, numpy included) and as the process's peak RSS.
Targets: 1,000 nodes / 10,000 pending tasks < 1 s; 5,000 nodes / 50,000 tasks < 5 s and 2 GiB.
"""

from __future__ import annotations

import argparse
import gc
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from generate_cluster import generate, to_snapshot
from kai.scheduler.actions import ACTIONS
from kai.scheduler.outcome import build_result
from kai.scheduler.session import Session, run_session
from kai.scheduler.snapshot import Snapshot

TARGETS = {1000: 1.0, 5000: 5.0}


def bench(nodes: int, repeat: int, seed: int) -> dict[str, float]:
    snapshot = to_snapshot(generate(nodes, seed))
    pending = sum(1 for j in snapshot.jobs for t in j.tasks if t.status.value == "Pending")
    times = []
    cpu_times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        cpu_start = time.process_time()
        result = run_session(snapshot, ["allocate"])
        cpu_times.append(time.process_time() - cpu_start)
        times.append(time.perf_counter() - start)
    assert result is not None
    placed = sum(1 for o in result.tasks.values() if o.status.value in ("Binding", "Pipelined"))
    phases = _phases(snapshot)
    tracemalloc.start()
    run_session(snapshot, ["allocate"])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "nodes": nodes,
        "pending": pending,
        "placed": placed,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "cpu_s": statistics.median(cpu_times),
        "peak_mib": peak / 2**20,
        "rss_mib": rss_kib / 1024,
        **phases,
    }


def _phases(snapshot: Snapshot) -> dict[str, float]:
    """CPU seconds of the three parts of one session, with the collector paused as
    ``run_session`` does."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        t0 = time.process_time()
        session = Session(snapshot)
        t1 = time.process_time()
        ACTIONS["allocate"](session)
        t2 = time.process_time()
        build_result(session)
        t3 = time.process_time()
    finally:
        if collecting:
            gc.enable()
    return {"build_s": t1 - t0, "allocate_s": t2 - t1, "result_s": t3 - t2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[100, 1000, 2000, 5000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    print(
        "| nodes | pending tasks | placed | median wall s | min wall s | median CPU s "
        "| CPU s build / allocate / result | peak traced MiB | peak RSS MiB | target |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for size in args.sizes:
        row = bench(size, args.repeat, args.seed)
        target = TARGETS.get(size)
        verdict = ""
        if target is not None:
            wall = "met" if row["median_s"] < target else "missed"
            cpu = "met" if row["cpu_s"] < target else "missed"
            verdict = f"< {target:g} s: wall {wall}, CPU {cpu}"
        print(
            f"| {size} | {row['pending']:.0f} | {row['placed']:.0f} | {row['median_s']:.3f} | "
            f"{row['min_s']:.3f} | {row['cpu_s']:.3f} | {row['build_s']:.2f} / "
            f"{row['allocate_s']:.2f} / {row['result_s']:.2f} | {row['peak_mib']:.0f} | "
            f"{row['rss_mib']:.0f} | {verdict} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
