"""``kai fairshare simulate FILE [-o DIR]``: time-based fairshare over many cycles, offline.

The input is KAI's time-based fairshare simulator shape (YAML)::

    Cycles: 100            # scheduling cycles to run (default 100)
    WindowSize: 5          # usage window, in cycles (default 5)
    HalfLifePeriod: 0      # usage half-life, in cycles (0 = no decay)
    KValue: 1.0            # how strongly past usage counts (0 = plain fair share)
    WindowType: sliding    # sliding | tumbling
    Nodes: [{GPUs: 8, Count: 2}]
    Queues: [{Name: a, Parent: "", Priority: 100, DeservedGPUs: 0, Weight: 1}]
    Jobs: {a: {GPUs: 1, NumPods: 1, NumJobs: 16, SubmitCycle: 0}}

Every cycle runs the real scheduler core (allocate, then reclaim) on the simulated cluster,
with each queue's usage from the same accounting code the live scheduler uses; evicted pods are
pending again in the next cycle and jobs never finish. The output directory gets
``fairshare.csv`` (``Cycle,Queue,Allocation,FairShare,Usage``: GPUs allocated after the cycle,
the GPU fair share the cycle computed and the normalised usage it used) and, with matplotlib
installed (``pip install 'kai-gitops-scheduler[plot]'``), ``fairshare.png``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HELP = "time-based fairshare tools: simulate queues over many cycles"

EPILOG = """\
kai fairshare simulate FILE [-o DIR]: writes DIR/fairshare.csv (Cycle,Queue,Allocation,
FairShare,Usage) and DIR/fairshare.png (needs matplotlib:
pip install 'kai-gitops-scheduler[plot]'). A progress bar is drawn on standard error when it
is a terminal. Exit status: 0 done, 2 bad usage or an invalid file."""


class InputError(ValueError):
    """A bad simulator file (names the file and field)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    sub = parser.add_subparsers(
        dest="fairshare_command", metavar="COMMAND", required=True, help="simulate"
    )
    sim = sub.add_parser("simulate", help="run the fairshare simulator file FILE")
    sim.add_argument("file", metavar="FILE", help="simulator input (YAML)")
    sim.add_argument(
        "-o",
        "--output-dir",
        default=".",
        metavar="DIR",
        help="where to write fairshare.csv and fairshare.png (default: .)",
    )
    sim.add_argument("--no-plot", action="store_true", help="write the CSV only (default: off)")


@dataclass
class SimQueue:
    name: str
    parent: str | None
    priority: int
    deserved: float
    weight: float


@dataclass
class SimInput:
    cycles: int = 100
    window: float = 5.0
    half_life: float = 0.0
    k_value: float = 1.0
    window_type: str = "sliding"
    nodes: list[int] = field(default_factory=list)  # GPUs per node
    queues: list[SimQueue] = field(default_factory=list)
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)


def _number(data: dict[str, Any], key: str, default: float, where: str, minimum: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}{key}: expected a number, got {value!r}")
    if value < minimum:
        raise InputError(f"{where}{key}: must be at least {minimum:g}, got {value!r}")
    return float(value)


def load_input(path: str) -> SimInput:
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping with Cycles, Nodes, Queues, Jobs")
    known = {
        "Cycles",
        "WindowSize",
        "HalfLifePeriod",
        "KValue",
        "WindowType",
        "Nodes",
        "Queues",
        "Jobs",
    }
    for key in data:
        if key not in known:
            raise InputError(f"{path}: {key}: unknown field (known: {', '.join(sorted(known))})")
    w = f"{path}: "
    sim = SimInput(
        cycles=int(_number(data, "Cycles", 100, w, 1)),
        window=_number(data, "WindowSize", 5, w, 1),
        half_life=_number(data, "HalfLifePeriod", 0, w, 0),
        k_value=_number(data, "KValue", 1.0, w, 0),
        window_type=str(data.get("WindowType", "sliding")),
    )
    if sim.window_type not in ("sliding", "tumbling"):
        raise InputError(f"{w}WindowType: expected sliding or tumbling, got {sim.window_type!r}")
    _load_nodes(sim, data, w)
    _load_queues(sim, data, w)
    _load_jobs(sim, data, w)
    return sim


def _load_nodes(sim: SimInput, data: dict[str, Any], w: str) -> None:
    nodes = data.get("Nodes")
    if not isinstance(nodes, list) or not nodes:
        raise InputError(f"{w}Nodes: expected a non-empty list of {{GPUs, Count}}")
    for i, node in enumerate(nodes):
        where = f"{w}Nodes[{i}]."
        if not isinstance(node, dict):
            raise InputError(f"{w}Nodes[{i}]: expected a mapping {{GPUs, Count}}")
        gpus = int(_number(node, "GPUs", 8, where, 1))
        sim.nodes += [gpus] * int(_number(node, "Count", 1, where, 1))


def _load_queues(sim: SimInput, data: dict[str, Any], w: str) -> None:
    queues = data.get("Queues")
    if not isinstance(queues, list) or not queues:
        raise InputError(f"{w}Queues: expected a non-empty list of {{Name, ...}}")
    names: set[str] = set()
    for i, q in enumerate(queues):
        where = f"{w}Queues[{i}]."
        if not isinstance(q, dict) or not isinstance(q.get("Name"), str) or not q["Name"]:
            raise InputError(f"{w}Queues[{i}].Name: every queue needs a name")
        if q["Name"] in names:
            raise InputError(f"{where}Name: queue {q['Name']!r} is listed twice")
        names.add(q["Name"])
        sim.queues.append(
            SimQueue(
                name=q["Name"],
                parent=q.get("Parent") or None,
                priority=int(_number(q, "Priority", 100, where, 0)),
                deserved=_number(q, "DeservedGPUs", 0, where, 0),
                weight=_number(q, "Weight", 1, where, 0),
            )
        )
    for i, q in enumerate(sim.queues):
        if q.parent is not None and q.parent not in names:
            raise InputError(f"{w}Queues[{i}].Parent: no queue named {q.parent!r}")


def _load_jobs(sim: SimInput, data: dict[str, Any], w: str) -> None:
    names = {q.name for q in sim.queues}
    jobs = data.get("Jobs") or {}
    if not isinstance(jobs, dict):
        raise InputError(f"{w}Jobs: expected a mapping queue -> {{GPUs, NumPods, NumJobs}}")
    parents = {q.parent for q in sim.queues if q.parent}
    for queue, spec in jobs.items():
        where = f"{w}Jobs.{queue}."
        if queue not in names:
            raise InputError(f"{w}Jobs.{queue}: no queue named {queue!r}")
        if queue in parents:
            raise InputError(f"{w}Jobs.{queue}: jobs go to leaf queues; {queue!r} has children")
        if not isinstance(spec, dict):
            raise InputError(f"{w}Jobs.{queue}: expected a mapping {{GPUs, NumPods, NumJobs}}")
        sim.jobs[str(queue)] = {
            "gpus": int(_number(spec, "GPUs", 1, where, 1)),
            "pods": int(_number(spec, "NumPods", 1, where, 1)),
            "jobs": int(_number(spec, "NumJobs", 1, where, 1)),
            "submit": int(_number(spec, "SubmitCycle", 0, where, 0)),
        }


@dataclass
class Row:
    cycle: int
    queue: str
    allocation: float
    fair_share: float
    usage: float


def simulate(sim: SimInput, progress: Any = None) -> list[Row]:
    """Run ``sim`` through the scheduler core; one row per queue and cycle."""
    from kai.api.gpu_request import GpuRequest
    from kai.api.scheduler_config import SchedulerConfig
    from kai.reconcilers.usage import AccountingUsage, UsageParams
    from kai.scheduler.session import run_session
    from kai.scheduler.snapshot import (
        UNLIMITED,
        JobSpec,
        NodeSpec,
        QueueResource,
        QueueSpec,
        Snapshot,
        TaskSpec,
        TaskStatus,
    )

    params = UsageParams(
        window=sim.window,
        half_life=sim.half_life,
        window_type=sim.window_type,
        fetch_interval=1.0,
        staleness=1e18,
        resolution=1.0,
    )
    accounting = AccountingUsage(params)
    accounting.record(0.0, {}, {})  # the start of the first cycle
    nodes = [
        NodeSpec(f"node-{i:03d}", 64_000, 512 * 2**30, gpus, 81_920, 110)
        for i, gpus in enumerate(sim.nodes)
    ]
    capacity = {"gpu": float(sum(sim.nodes))}
    config = SchedulerConfig(actions=("allocate", "reclaim"), k_value=sim.k_value)
    # task uid -> (status, node)
    state: dict[str, tuple[TaskStatus, str | None]] = {}
    job_specs: list[tuple[int, str, str, int, int]] = []  # submit, queue, job, pods, gpus
    for queue, spec in sorted(sim.jobs.items()):
        for j in range(spec["jobs"]):
            job_specs.append(
                (spec["submit"], queue, f"{queue}-job-{j:03d}", spec["pods"], spec["gpus"])
            )
    rows: list[Row] = []
    for cycle in range(sim.cycles):
        now = float(cycle)
        reading = accounting.reading(now)
        usage = reading.usage or {}
        queues = [
            QueueSpec(
                name=q.name,
                parent=q.parent,
                priority=q.priority,
                creation_rank=float(i),
                resources={
                    "gpu": QueueResource(q.deserved, UNLIMITED, q.weight),
                    "cpu": QueueResource(UNLIMITED, UNLIMITED, q.weight),
                    "memory": QueueResource(UNLIMITED, UNLIMITED, q.weight),
                },
                usage={"gpu": usage.get(q.name, {}).get("gpu", 0.0)},
            )
            for i, q in enumerate(sim.queues)
        ]
        jobs = []
        for submit, queue, name, pods, gpus in job_specs:
            if submit > cycle:
                continue
            tasks = []
            for p in range(pods):
                uid = f"{name}-{p}"
                status, node = state.get(uid, (TaskStatus.PENDING, None))
                tasks.append(
                    TaskSpec(
                        uid=uid,
                        name=uid,
                        job=name,
                        status=status,
                        cpu_millis=100,
                        memory_bytes=2**20,
                        gpu=GpuRequest(whole=gpus),
                        node=node,
                        created_at=float(submit),
                    )
                )
            jobs.append(
                JobSpec(
                    uid=name,
                    name=name,
                    queue=queue,
                    priority=50,
                    preemptible=True,
                    created_at=float(submit),
                    tasks=tasks,
                    min_available=pods,
                )
            )
        snapshot = Snapshot(now=now, nodes=nodes, queues=queues, jobs=jobs, config=config)
        result = run_session(snapshot)
        for eviction in result.evictions:
            state[eviction.task] = (TaskStatus.PENDING, None)
        for bind in result.binds:
            state[bind.task] = (TaskStatus.RUNNING, bind.node)
        # what each queue holds now counts for the cycle that follows
        running = [uid for uid, (status, _) in state.items() if status is TaskStatus.RUNNING]
        gpus_now = _held(sim, job_specs, running)
        accounting.record(now + 1.0, {k: {"gpu": v} for k, v in gpus_now.items()}, capacity)
        for q in sim.queues:
            found = result.queues.get(q.name)
            rows.append(
                Row(
                    cycle=cycle,
                    queue=q.name,
                    allocation=gpus_now.get(q.name, 0.0),
                    fair_share=found.fair_share.get("gpu", 0.0) if found else 0.0,
                    usage=usage.get(q.name, {}).get("gpu", 0.0),
                )
            )
        if progress is not None:
            progress(cycle + 1, sim.cycles)
    return rows


def _held(
    sim: SimInput, job_specs: list[tuple[int, str, str, int, int]], running: list[str]
) -> dict[str, float]:
    """GPUs each queue holds (parents: their children's sum)."""
    held: dict[str, float] = {q.name: 0.0 for q in sim.queues}
    by_job = {name: (queue, gpus) for _, queue, name, _, gpus in job_specs}
    for uid in running:
        queue, gpus = by_job[uid.rsplit("-", 1)[0]]
        held[queue] += gpus
    children: dict[str, list[str]] = {}
    for q in sim.queues:
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q.name)

    def total(name: str) -> float:
        return held[name] + sum(total(child) for child in children.get(name, []))

    return {q.name: total(q.name) for q in sim.queues}


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Cycle", "Queue", "Allocation", "FairShare", "Usage"])
        for r in rows:
            out.writerow(
                [r.cycle, r.queue, f"{r.allocation:g}", f"{r.fair_share:.4g}", f"{r.usage:.4g}"]
            )


def write_plot(rows: list[Row], sim: SimInput, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for q in sim.queues:
        mine = [r for r in rows if r.queue == q.name]
        cycles = [r.cycle for r in mine]
        top.step(cycles, [r.allocation for r in mine], where="post", label=f"{q.name} allocated")
        top.plot(cycles, [r.fair_share for r in mine], linestyle="--", label=f"{q.name} fair share")
        bottom.plot(cycles, [r.usage for r in mine], label=q.name)
    top.set_ylabel("GPUs")
    top.set_title(
        f"time-based fairshare: kValue {sim.k_value:g}, window {sim.window:g} cycles, "
        f"half-life {sim.half_life:g}"
    )
    top.legend(loc="upper right", fontsize="small")
    bottom.set_ylabel("normalised usage")
    bottom.set_xlabel("cycle")
    bottom.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _progress_bar(stream: Any) -> Any:
    if not stream.isatty():
        return None

    def draw(done: int, total: int) -> None:
        width = 40
        filled = width * done // total
        stream.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {done}/{total} cycles")
        if done == total:
            stream.write("\n")
        stream.flush()

    return draw


def run(args: argparse.Namespace) -> int:
    try:
        sim = load_input(args.file)
    except InputError as exc:
        print(f"kai fairshare simulate: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"kai fairshare simulate: {out}: {exc.strerror}", file=sys.stderr)
        return 2
    rows = simulate(sim, _progress_bar(sys.stderr))
    write_csv(rows, out / "fairshare.csv")
    print(f"wrote {out / 'fairshare.csv'} ({len(rows)} rows)")
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "kai fairshare simulate: no PNG: matplotlib is not installed "
                "(pip install 'kai-gitops-scheduler[plot]')",
                file=sys.stderr,
            )
            return 0
        write_plot(rows, sim, out / "fairshare.png")
        print(f"wrote {out / 'fairshare.png'}")
    return 0
