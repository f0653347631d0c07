"""kai against kube-scheduler on a real Kubernetes API server (issue 15).

For each scheduler and each repeat, on a freshly started and wiped real control plane
(kube-apiserver v1.36 + etcd + kube-controller-manager, started by the ``up.sh`` of
``$KAI_REAL_K8S``): N fake GPU nodes (Ready, the not-ready taint lifted, a simulated
kubelet that starts bound pods and admits them as a real kubelet does), then P pending pods --
60 % single-GPU pods, 20 % fractional pods (half a GPU), 20 % in batch/v1 Jobs of 4 pods each,
gangs for kai (``kai.scheduler/batch-min-member: 4``), whose pods the controller-manager creates.
Once every pod exists, the scheduler under test starts cold: ``kube-scheduler`` (client QPS /
burst 1000 / 2000, no leader election) or kai's ``scheduler``, ``binder`` and ``podgrouper``
processes. The clock runs from that start to the last pod bound.

Printed per run: pods/s, API requests per pod (the server's ``apiserver_request_total``, every
client during the run: the simulated kubelet's status writes included), CPU seconds per process;
then the kai / kube-scheduler ratio of each repeat. The order alternates between repeats.
Checks: every pod bound exactly once (its node never changes), none failed by the kubelet's
admission (over-commit), every gang complete.

Skips (exit 0) where the real control plane is absent.

    .venv/bin/python bench/bench_real_cluster.py --nodes 500 --pods 2000 --repeat 3
    .venv/bin/python bench/bench_real_cluster.py --nodes 2000 --pods 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import atexit
import calendar
import contextlib
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
QUEUE = "bench"
GANG = 4
KUBE_SCHEDULER = "default-scheduler"
KAI = "kai-scheduler"


def real_k8s_dir() -> Path | None:
    configured = os.environ.get("KAI_REAL_K8S")
    folder = Path(configured) if configured else ROOT.parent / "shared" / "real-k8s"
    return folder if (folder / "up.sh").is_file() else None


@dataclass
class Result:
    scheduler: str
    pods: int
    bound: int = 0
    elapsed: float = 0.0
    first: float = 0.0
    # seconds from the start until the last pod of each kind was bound (gpu-, half-, gang-)
    last_by_kind: dict[str, float] = field(default_factory=dict)
    started_at: str = ""  # wall clock of the start, to find it in the components' logs
    requests: dict[tuple[str, str], float] = field(default_factory=dict)
    server_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    # watch events the API server sent (every watcher counts) and their bytes, per resource
    watch_events: dict[str, float] = field(default_factory=dict)
    watch_bytes: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    # the same, from the start until every pod ran (the simulated kubelet caught up: its status
    # writes, ~1 per pod, are then in the window of both schedulers alike); None: it did not
    settled_after: float | None = None  # seconds after the last bind
    settled_requests: float = 0.0
    settled_cpu: dict[str, float] = field(default_factory=dict)
    # GPU reservation pods: seconds from the first sight of each on the kubelet's watch until
    # its GPU UUID was seen there, and the seconds its creation reached that watch late by
    # (whole seconds: creationTimestamp has no finer grain)
    reservation_uuid_waits: list[float] = field(default_factory=list)
    reservation_watch_lags: list[float] = field(default_factory=list)
    rebound: int = 0
    failed: int = 0
    incomplete_gangs: int = 0
    timed_out: bool = False

    @property
    def rate(self) -> float:
        return self.bound / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def requests_per_pod(self) -> float:
        return sum(self.requests.values()) / max(self.pods, 1)


# -- the control plane ---------------------------------------------------------------------
class ControlPlane:
    def __init__(self, scripts: Path) -> None:
        self.scripts = scripts
        self.state = Path(tempfile.mkdtemp(prefix="kai-bench-real-"))

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def start(self) -> ControlPlane:
        for attempt in range(2):
            run = subprocess.run(
                ["bash", str(self.scripts / "up.sh"), str(self.state)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if run.returncode == 0 and self.kubeconfig.exists():
                return self
            self.stop()
            if attempt == 1:
                raise RuntimeError(f"up.sh failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
            self.state = Path(tempfile.mkdtemp(prefix="kai-bench-real-"))
        return self

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(self.scripts / "down.sh"), str(self.state), "--wipe"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(self.state, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        out = {}
        for name in ("kube-apiserver", "etcd", "kube-controller-manager"):
            with contextlib.suppress(OSError, ValueError):
                out[name] = int((self.state / "run" / f"{name}.pid").read_text().strip())
        return out


# -- workloads -------------------------------------------------------------------------------
def workloads(pods: int, scheduler_name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(bare pods, Jobs) for ``pods`` pods in all: 60 % 1-GPU, 20 % half-GPU, 20 % in Jobs."""
    from kai.sim.workloads import pod_manifest

    in_jobs = (pods // 5) // GANG * GANG
    fractional = pods // 5
    single = pods - in_jobs - fractional
    bare = [
        pod_manifest(
            f"gpu-{i:05d}", NAMESPACE, QUEUE, gpus=1, cpu="1", memory="1Gi",
            scheduler_name=scheduler_name,
        )
        for i in range(single)
    ] + [
        pod_manifest(
            f"half-{i:05d}", NAMESPACE, QUEUE, fraction=0.5, cpu="1", memory="1Gi",
            scheduler_name=scheduler_name,
        )
        for i in range(fractional)
    ]  # fmt: skip
    jobs = []
    for j in range(in_jobs // GANG):
        template = pod_manifest(
            "x", NAMESPACE, QUEUE, gpus=1, cpu="1", memory="1Gi", scheduler_name=scheduler_name
        )
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"gang-{j:04d}",
                    "namespace": NAMESPACE,
                    "labels": {"kai.scheduler/queue": QUEUE},
                    "annotations": {"kai.scheduler/batch-min-member": str(GANG)},
                },
                "spec": {
                    "parallelism": GANG,
                    "completions": GANG,
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": template["metadata"]["labels"]},
                        "spec": template["spec"],
                    },
                },
            }
        )
    return bare, jobs


# -- metrics -----------------------------------------------------------------------------------
_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\d+(?:\.\d+)?(?:e\+\d+)?)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


_DURATION = re.compile(r"^apiserver_request_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$", re.M)


_WATCH = re.compile(r"^apiserver_watch_events_(total|sizes_sum)\{([^}]*)\} (\S+)$", re.M)


def _key(labels_text: str) -> tuple[str, str]:
    labels = dict(_LABEL.findall(labels_text))
    what = labels.get("resource", "")
    if labels.get("subresource"):
        what += "/" + labels["subresource"]
    return labels.get("verb", ""), what


Counts = dict[tuple[str, str], float]


def server_requests(kube: Any) -> tuple[Counts, Counts, Counts, Counts]:
    """``apiserver_request_total`` summed by (verb, resource[/subresource]), the seconds
    the server spent on them (``apiserver_request_duration_seconds_sum``), and the watch events
    it sent with their bytes (``apiserver_watch_events_total`` / ``_sizes_sum``) by resource."""
    _, text = kube.get_text("/metrics")
    counts: Counts = {}
    seconds: Counts = {}
    events: Counts = {}
    sizes: Counts = {}
    for match in _WATCH.finditer(text):
        labels = dict(_LABEL.findall(match[2]))
        what = ("", labels.get("resource") or labels.get("kind") or "?")
        into = events if match[1] == "total" else sizes
        into[what] = into.get(what, 0.0) + float(match[3])
    for match in _SAMPLE.finditer(text):
        key = _key(match[1])
        counts[key] = counts.get(key, 0) + float(match[2])
    for match in _DURATION.finditer(text):
        if match[1] == "sum":
            key = _key(match[2])
            seconds[key] = seconds.get(key, 0.0) + float(match[3])
    return counts, seconds, events, sizes


def _delta(after: Counts, before: Counts) -> Counts:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its waited-for children, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- one run ---------------------------------------------------------------------------------
def run_once(
    which: str, scripts: Path, args: argparse.Namespace, spawned: list[subprocess.Popen[Any]]
) -> Result:
    from kai.kube.client import Kube
    from kai.kube.resources import JOBS, PODS, QUEUES
    from kai.kube.writes import create_if_absent
    from kai.reconcilers.binder import GPU_INDEX_ANNOTATION
    from kai.reconcilers.snapshot_builder import RESERVATION_NAMESPACE
    from kai.sim.nodes import NodeShape, create_nodes
    from kai.sim.system import System, SystemOptions, bootstrap, wait_until
    from kai.sim.workloads import ensure_namespace

    scheduler_name = KUBE_SCHEDULER if which == "kube" else KAI
    result = Result(which, args.pods)
    plane = ControlPlane(scripts).start()
    system: Any = None
    children: list[subprocess.Popen[Any]] = []
    try:
        kube = Kube.from_kubeconfig(str(plane.kubeconfig))
        bootstrap(kube)
        unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        create_if_absent(
            kube,
            QUEUES,
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": QUEUE},
                "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}},
            },
        )
        ensure_namespace(kube, NAMESPACE)
        system = System(
            str(plane.kubeconfig),
            SystemOptions(
                components=("nodes",),
                kubelet=True,
                status_period=5.0,
                kubelet_workers=args.kubelet_workers,
            ),
        ).start()
        nodes = system.informers["nodes"]["nodes"]
        pods_cache = system.informers["nodes"]["pods"]
        # reservation pods come on a watch of their own (as the kubelet reads them)
        reservation_cache = system.informers["nodes"]["reservation-pods"]
        t = time.monotonic()
        create_nodes(kube, args.nodes, NodeShape(gpus=8), workers=8)
        wait_until(
            lambda: (
                sum(1 for n in nodes.items() if not (n.get("spec") or {}).get("taints"))
                >= args.nodes
            ),
            timeout=600,
            interval=0.5,
        )
        print(f"  [{which}] {args.nodes} nodes Ready in {time.monotonic() - t:.1f}s", flush=True)

        # who got which node, when: from the simulated kubelet's own watches of the pods
        bound: dict[str, tuple[str, float]] = {}
        failed: set[str] = set()
        running: set[str] = set()
        lock = threading.Lock()
        done = threading.Event()
        settled = threading.Event()  # every pod Running (or Failed)

        reservations: dict[str, float] = {}  # uid -> first seen (monotonic)
        uuid_seen: set[str] = set()

        def observe_reservation(md: dict[str, Any]) -> None:
            uid = md.get("uid", "")
            now = time.monotonic()
            with lock:
                if uid not in reservations:
                    reservations[uid] = now
                    created = md.get("creationTimestamp")
                    if created:
                        at = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
                        result.reservation_watch_lags.append(max(0.0, time.time() - at))
                if uid not in uuid_seen and (md.get("annotations") or {}).get(GPU_INDEX_ANNOTATION):
                    uuid_seen.add(uid)
                    result.reservation_uuid_waits.append(now - reservations[uid])

        def observe(etype: str, obj: dict[str, Any], old: Any) -> None:
            md = obj["metadata"]
            if md.get("namespace") == RESERVATION_NAMESPACE and etype != "DELETED":
                observe_reservation(md)
            if md.get("namespace") != NAMESPACE:
                return
            node = (obj.get("spec") or {}).get("nodeName")
            now = time.monotonic()
            with lock:
                if node:
                    seen = bound.get(md["name"])
                    if seen is None:
                        bound[md["name"]] = (node, now)
                        if len(bound) >= args.pods:
                            done.set()
                    elif seen[0] != node:
                        result.rebound += 1
                phase = (obj.get("status") or {}).get("phase")
                if phase == "Failed":
                    failed.add(md["name"])
                elif phase == "Running" and node:
                    running.add(md["name"])
                if len(running | failed) >= args.pods:
                    settled.set()

        bare, jobs = workloads(args.pods, scheduler_name)
        t = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda body: kube.create(PODS, body), bare))
            list(pool.map(lambda body: kube.create(JOBS, body), jobs))

        def in_namespace() -> int:
            return sum(1 for p in pods_cache.items() if p["metadata"]["namespace"] == NAMESPACE)

        if not wait_until(lambda: in_namespace() >= args.pods, timeout=600, interval=0.5):
            raise RuntimeError(f"only {in_namespace()} of {args.pods} pods were created")
        print(
            f"  [{which}] {args.pods} pods pending after {time.monotonic() - t:.1f}s "
            f"({len(jobs)} Jobs' pods made by the controller-manager)",
            flush=True,
        )
        pods_cache.add_handler(observe)
        reservation_cache.add_handler(observe)
        time.sleep(2.0)  # let the controller-manager settle (Job status writes)
        processes = plane.pids()
        requests_before = server_requests(kube)
        cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
        own_before = cpu_seconds(os.getpid())
        t0 = time.monotonic()
        result.started_at = time.strftime("%H:%M:%S")
        children = spawn(which, plane, args)
        spawned.extend(children)
        profiler = _profile_server(plane, args, f"{which}-{result.started_at.replace(':', '')}")
        finished = done.wait(args.timeout)
        t_end = time.monotonic()
        requests_after = server_requests(kube)
        names = (
            ["kube-scheduler"]
            if which == "kube"
            else ["protocol-floor"]
            if which == "floor"
            else ["scheduler+binder+podgrouper"]
            if args.kai_processes == 1
            else ["scheduler", "binder", "podgrouper"]
        )
        cpu = {
            name: cpu_seconds(pid) - cpu_before.get(name, 0.0) for name, pid in processes.items()
        }
        for name, proc in zip(names, children, strict=True):
            cpu[name] = cpu_seconds(proc.pid)
        cpu["bench (kubelet, nodes, observer)"] = cpu_seconds(os.getpid()) - own_before
        result.cpu = cpu
        result.requests = _delta(requests_after[0], requests_before[0])
        result.server_seconds = _delta(requests_after[1], requests_before[1])
        result.watch_events = {
            k[1]: v for k, v in _delta(requests_after[2], requests_before[2]).items()
        }
        result.watch_bytes = {
            k[1]: v for k, v in _delta(requests_after[3], requests_before[3]).items()
        }
        # the kubelet's writes trail the binds: count them in for both schedulers alike
        if finished and settled.wait(args.settle_timeout):
            result.settled_after = time.monotonic() - t_end
            settled_requests = server_requests(kube)
            result.settled_requests = sum(_delta(settled_requests[0], requests_before[0]).values())
            result.settled_cpu = {
                name: cpu_seconds(pid) - cpu_before.get(name, 0.0)
                for name, pid in processes.items()
            }
            for name, proc in zip(names, children, strict=True):
                result.settled_cpu[name] = cpu_seconds(proc.pid)
        if profiler is not None:
            profiler.join()
        with lock:
            result.bound = len(bound)
            result.failed = len(failed)
            times = [at for _, at in bound.values()]
        result.timed_out = not finished
        result.elapsed = (max(times) if times else t_end) - t0
        result.first = (min(times) - t0) if times else 0.0
        with lock:
            for pod_name, (_, at) in bound.items():
                kind = pod_name.split("-", 1)[0]
                result.last_by_kind[kind] = max(result.last_by_kind.get(kind, 0.0), at - t0)
        by_job: dict[str, int] = {}
        for pod in pods_cache.items():
            md = pod["metadata"]
            job = (md.get("labels") or {}).get("job-name")
            if md["namespace"] == NAMESPACE and job and md["name"] in bound:
                by_job[job] = by_job.get(job, 0) + 1
        result.incomplete_gangs = sum(1 for j in jobs if by_job.get(j["metadata"]["name"]) != GANG)
        return result
    finally:
        for proc in children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in children:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if system is not None:
            system.stop()
        if args.logs:
            target = Path(args.logs) / f"{which}-{time.strftime('%H%M%S')}"
            shutil.copytree(plane.state / "logs", target, dirs_exist_ok=True)
            for log_file in plane.state.glob("*.log"):
                shutil.copy(log_file, target)
        plane.stop()


def _profile_server(
    plane: ControlPlane, args: argparse.Namespace, name: str
) -> threading.Thread | None:
    """With ``--pprof DIR``: kube-apiserver's CPU profile of the next ``--pprof-seconds``,
    fetched on a thread of its own and written to ``DIR/name.pprof``."""
    if not args.pprof:
        return None
    from kai.kube.client import Kube

    def fetch() -> None:
        kube = Kube.from_kubeconfig(str(plane.kubeconfig))
        kube.request_timeout = args.pprof_seconds + 60.0
        status, body = kube.get_bytes("/debug/pprof/profile", {"seconds": args.pprof_seconds})
        target = Path(args.pprof) / f"{name}.pprof"
        target.parent.mkdir(parents=True, exist_ok=True)
        if status == 200:
            target.write_bytes(body)
            print(f"  kube-apiserver profile: {target}", flush=True)
        else:
            print(f"  kube-apiserver profile: HTTP {status}: {body[:200]!r}", flush=True)
        kube.close()

    thread = threading.Thread(target=fetch, name="pprof", daemon=True)
    thread.start()
    return thread


def spawn(which: str, plane: ControlPlane, args: argparse.Namespace) -> list[subprocess.Popen[Any]]:
    log = open(plane.state / f"{which}.log", "ab")  # noqa: SIM115  closed with the folder
    if which == "kube":
        binary = Path(
            os.environ.get("KAI_REAL_K8S_BIN")
            or Path.home() / ".cache" / "kai-real-k8s" / "v1.36.2"
        )
        config = plane.state / "kube-scheduler.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            "clientConnection:\n"
            f"  kubeconfig: {plane.kubeconfig}\n"
            f"  qps: {args.kube_qps}\n"
            f"  burst: {args.kube_burst}\n"
            "leaderElection:\n"
            "  leaderElect: false\n"
        )
        return [
            subprocess.Popen(
                [str(binary / "kube-scheduler"), "--config", str(config), "--secure-port", "0"],
                stdout=log,
                stderr=log,
            )
        ]
    if which == "floor":  # KAI's protocol writes and no scheduler (protocol_floor.py)
        return [
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "bench" / "protocol_floor.py"),
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "--namespace",
                    NAMESPACE,
                ],
                stdout=log,
                stderr=log,
            )
        ]
    common = ["--kubeconfig", str(plane.kubeconfig), "--log-level", args.log_level]
    scheduler = ["scheduler", "--period", str(args.period), "--metrics-port", str(_free_port())]
    if args.kai_processes == 1:  # one process, one set of informers (`--also`)
        return [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kai.cli",
                    *scheduler,
                    "--also",
                    "binder,podgrouper",
                    *common,
                ],
                stdout=log,
                stderr=log,
            )
        ]
    return [
        subprocess.Popen(
            [sys.executable, "-m", "kai.cli", *command, *common], stdout=log, stderr=log
        )
        for command in (
            scheduler,
            ["binder", "--workers", str(args.binder_workers)],
            ["podgrouper", "--workers", str(args.grouper_workers)],
        )
    ]


# -- report -------------------------------------------------------------------------------------
def report(result: Result) -> None:
    r = result
    print(
        f"  [{r.scheduler}] bound {r.bound}/{r.pods} in {r.elapsed:.1f}s (first at {r.first:.1f}s):"
        f" {r.rate:.0f} pods/s; {r.requests_per_pod:.2f} API requests per pod"
        f"{'; TIMEOUT' if r.timed_out else ''}"
    )
    print(
        f"  [{r.scheduler}] started {r.started_at}; last bound of each kind: "
        + ", ".join(f"{kind} {at:.1f}s" for kind, at in sorted(r.last_by_kind.items()))
    )
    if r.reservation_uuid_waits:
        waits = sorted(r.reservation_uuid_waits)
        lags = sorted(r.reservation_watch_lags)
        print(
            f"  [{r.scheduler}] {len(lags)} reservation pods: created -> on the kubelet's watch"
            f" median {statistics.median(lags):.0f} s, max {lags[-1]:.0f} s (whole seconds);"
            f" on the watch -> GPU UUID on the watch median {statistics.median(waits):.1f} s,"
            f" p99 {waits[int(0.99 * (len(waits) - 1))]:.1f} s, max {waits[-1]:.1f} s"
        )
    print(
        f"  [{r.scheduler}] checks: re-bound {r.rebound}, failed by admission {r.failed}, "
        f"incomplete gangs {r.incomplete_gangs}"
    )
    top = sorted(r.requests.items(), key=lambda kv: -kv[1])[:12]
    print(
        f"  [{r.scheduler}] requests per pod (mean server latency): "
        + ", ".join(
            f"{v} {w} {n / r.pods:.2f} ({1000 * r.server_seconds.get((v, w), 0) / n:.0f} ms)"
            for (v, w), n in top
        )
    )
    watched = sorted(r.watch_events.items(), key=lambda kv: -kv[1])[:6]
    print(
        f"  [{r.scheduler}] watch events sent per pod (KB): "
        + ", ".join(
            f"{what} {n / r.pods:.1f} ({r.watch_bytes.get(what, 0) / r.pods / 1024:.1f})"
            for what, n in watched
        )
    )
    print(
        f"  [{r.scheduler}] CPU s: "
        + ", ".join(f"{name} {s:.1f}" for name, s in sorted(r.cpu.items(), key=lambda kv: -kv[1]))
    )
    if r.settled_after is not None:
        server = r.settled_cpu.get("kube-apiserver", 0.0)
        print(
            f"  [{r.scheduler}] until every pod ran ({r.settled_after:.1f}s after the last bind):"
            f" kube-apiserver {1000 * server / max(r.pods, 1):.1f} ms CPU per pod,"
            f" {r.settled_requests / max(r.pods, 1):.2f} API requests per pod; CPU s: "
            + ", ".join(
                f"{name} {s:.1f}"
                for name, s in sorted(r.settled_cpu.items(), key=lambda kv: -kv[1])
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--only", choices=("kube", "kai", "floor"), help="run one scheduler only (no ratio)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run the control: KAI's protocol writes with no scheduler (protocol_floor.py)",
    )
    parser.add_argument("--period", type=float, default=1.0, help="kai scheduler's period")
    parser.add_argument("--kube-qps", type=int, default=1000)
    parser.add_argument("--binder-workers", type=int, default=32, help="kai binder --workers")
    parser.add_argument(
        "--kubelet-workers",
        type=int,
        default=32,
        help="pods the simulated kubelet (standing for every node's) starts at once",
    )
    parser.add_argument("--grouper-workers", type=int, default=32, help="kai podgrouper --workers")
    parser.add_argument("--kube-burst", type=int, default=2000)
    parser.add_argument(
        "--kai-processes",
        type=int,
        choices=(1, 3),
        default=3,
        help="3: kai's scheduler, binder and pod-grouper as three processes (the default "
        "deployment); 1: one `kai scheduler --also binder,podgrouper` sharing its informers "
        "(binder and pod-grouper with their default 32 workers)",
    )
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=120.0,
        help="after the last bind, how long to wait for every pod to run (the simulated "
        "kubelet's status writes) before the second CPU and request count",
    )
    parser.add_argument("--log-level", default="WARNING", help="kai components' log level")
    parser.add_argument("--logs", help="keep every run's logs (components, control plane) here")
    parser.add_argument(
        "--pprof",
        metavar="DIR",
        help="save a CPU profile of kube-apiserver (/debug/pprof/profile) taken from each "
        "scheduler's start, as DIR/<scheduler>-<run>.pprof (read with `go tool pprof -top`)",
    )
    parser.add_argument("--pprof-seconds", type=int, default=20)
    args = parser.parse_args(argv)
    scripts = real_k8s_dir()
    if scripts is None:
        print("skipped: no real Kubernetes control plane here (no up.sh in $KAI_REAL_K8S)")
        return 0
    spawned: list[subprocess.Popen[Any]] = []

    def reap() -> None:
        for proc in spawned:
            if proc.poll() is None:
                proc.kill()

    atexit.register(reap)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    ratios: list[float] = []
    rates: dict[str, list[float]] = {"kube": [], "kai": [], "floor": []}
    ok = True
    for rep in range(args.repeat):
        order = ["kube", "kai"] if rep % 2 == 0 else ["kai", "kube"]
        if args.floor:
            order.append("floor")
        if args.only:
            order = [args.only]
        print(f"run {rep + 1}/{args.repeat}: {args.nodes} nodes, {args.pods} pods, {order}")
        results = {}
        for which in order:
            results[which] = run_once(which, scripts, args, spawned)
            report(results[which])
            rates[which].append(results[which].rate)
            r = results[which]
            ok = ok and not r.timed_out and not r.rebound and not r.failed
            ok = ok and (which != "kai" or not r.incomplete_gangs)
        if "floor" in results and "kube" in results:
            floor, kube = results["floor"], results["kube"]
            plane = ("kube-apiserver", "etcd", "kube-controller-manager")
            # until every pod ran where both settled (the same work), else until the last bind
            floor_cpu = floor.settled_cpu or floor.cpu
            kube_cpu = kube.settled_cpu or kube.cpu
            kube_all = sum(v for k, v in kube_cpu.items() if not k.startswith("bench"))
            print(
                f"RUN {rep + 1}: protocol floor {floor.rate:.0f} pods/s "
                f"({floor.rate / max(kube.rate, 1e-9):.2f}x kube-scheduler's); CPU per pod"
                f"{' until every pod ran' if floor.settled_cpu and kube.settled_cpu else ''}: "
                f"the floor's control plane "
                f"{1000 * sum(floor_cpu.get(n, 0.0) for n in plane) / args.pods:.1f} ms, "
                f"kube-scheduler's whole run (every process but the bench's) "
                f"{1000 * kube_all / args.pods:.1f} ms",
                flush=True,
            )
        if "kai" in results and "kube" in results:
            ratio = results["kai"].rate / max(results["kube"].rate, 1e-9)
            ratios.append(ratio)
            print(
                f"RUN {rep + 1}: kube-scheduler {results['kube'].rate:.0f} pods/s, "
                f"kai {results['kai'].rate:.0f} pods/s, ratio {ratio:.2f}",
                flush=True,
            )
            kube_s, kai_s = (results[w].settled_cpu.get("kube-apiserver") for w in ("kube", "kai"))
            if kube_s and kai_s:
                print(
                    f"RUN {rep + 1}: kube-apiserver CPU until every pod ran: kube-scheduler's "
                    f"{1000 * kube_s / args.pods:.1f} ms per pod, kai's "
                    f"{1000 * kai_s / args.pods:.1f} ms ({kai_s / kube_s:.2f}x)",
                    flush=True,
                )
    for which, values in rates.items():
        if values:
            print(
                f"{which}: pods/s {', '.join(f'{v:.0f}' for v in values)}; "
                f"median {statistics.median(values):.0f}"
            )
    if ratios:
        print(
            f"RATIO kai/kube-scheduler: {', '.join(f'{v:.2f}' for v in ratios)}; "
            f"median {statistics.median(ratios):.2f}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
