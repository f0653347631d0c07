"""End-to-end scheduling throughput through the embedded API server.

2,000 simulated nodes x 8 GPUs, 10,000 single-GPU pods created at once (8 client threads over
HTTP), then the live system -- pod-grouper, scheduler, binder, simulated kubelet, each with its
own client, informers and threads -- runs until every pod is bound. Reported: pods/s from the
first pod creation to the last binding, and where the time goes (creation, grouping, scheduling
cycles, binding), from the API server's event stream.

Target (issue 6): at least 500 pods/s.

    .venv/bin/python bench/bench_e2e.py [--nodes 2000] [--pods 10000] [--no-kubelet]
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--no-kubelet", action="store_true", help="pods stay Bound, not Running")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="after the run, measure each process's CPU over this long with nothing to do",
    )
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="create all pods first, then start scheduler, binder and pod-grouper; the clock "
        "starts when they start (the pipeline's own rate, without creation competing)",
    )
    parser.add_argument(
        "--in-process-components",
        action="store_true",
        help="run scheduler, binder and pod-grouper as threads of this process (default: "
        "`kai scheduler`, `kai binder`, `kai podgrouper` child processes, as deployments)",
    )
    parser.add_argument(
        "--in-process-server",
        action="store_true",
        help="run the API server in this process (default: a `kai apiserver` child process, "
        "so that it does not share the interpreter lock with the components)",
    )
    args = parser.parse_args(argv)
    # child processes never outlive the benchmark (normal exit, error, Ctrl-C or SIGTERM)
    spawned: list[subprocess.Popen[Any]] = []

    def reap() -> None:
        for proc in spawned:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()

    atexit.register(reap)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")

    from kai.kube.client import Kube
    from kai.kube.resources import PODS, QUEUES
    from kai.kube.writes import create_if_absent
    from kai.sim.nodes import NodeShape, create_nodes
    from kai.sim.system import System, SystemOptions, bootstrap, wait_until
    from kai.sim.workloads import ensure_namespace, pod_manifest
    from kube_emulator import ApiServer

    history = max(200_000, args.pods * 12)
    counting = threading.Event()
    server: Any = None
    child: subprocess.Popen[str] | None = None
    writes: dict[tuple[str, str], int] = {}
    if args.in_process_server:
        server = ApiServer(history_size=history).start()

        def count_writes(event: Any) -> None:
            if counting.is_set():
                key = (event.tkey[1], event.type)
                writes[key] = writes.get(key, 0) + 1

        server.core.store.listeners.append(count_writes)
        kubeconfig = server.write_kubeconfig(Path(f"/tmp/kai-bench-e2e-{os.getpid()}.yaml"))
    else:
        kubeconfig = Path(f"/tmp/kai-bench-e2e-{os.getpid()}.yaml")
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kai.cli",
                "apiserver",
                "--no-tls",  # plain HTTP, as before the HTTPS default: figures stay comparable
                "--kubeconfig-out",
                str(kubeconfig),
                "--history",
                str(history),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        spawned.append(child)
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("serving:"):
                break
    kube = Kube.from_kubeconfig(str(kubeconfig))
    bootstrap(kube)
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    create_if_absent(
        kube,
        QUEUES,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "bench"},
            "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}},
        },
    )
    ensure_namespace(kube, "bench")

    # -- when did each pod get its node (from the server's own event stream) ---------------
    bound_at: dict[str, float] = {}
    grouped_at: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()

    def listener(etype: str, obj: dict[str, Any], old: Any) -> None:
        md = obj["metadata"]
        if md.get("namespace") != "bench":
            return
        name = md["name"]
        now = time.monotonic()
        with lock:
            if (obj.get("spec") or {}).get("nodeName") and name not in bound_at:
                bound_at[name] = now
                if len(bound_at) >= args.pods:
                    done.set()
            if (md.get("annotations") or {}).get("pod-group-name") and name not in grouped_at:
                grouped_at[name] = now

    t = time.monotonic()
    create_nodes(kube, args.nodes, NodeShape(gpus=args.gpus), workers=8)
    children: list[subprocess.Popen[bytes]] = []
    metrics_port = 0
    if args.in_process_components:
        components: tuple[str, ...] = ("scheduler", "binder", "podgrouper", "nodes")
    else:
        metrics_port = _free_port()
        components = ("nodes",)

    def spawn_components() -> None:
        common = ["--kubeconfig", str(kubeconfig), "--log-level", "WARNING"]
        for command in (
            ["scheduler", "--period", str(args.period), "--metrics-port", str(metrics_port)],
            ["binder"],
            ["podgrouper"],
        ):
            children.append(subprocess.Popen([sys.executable, "-m", "kai.cli", *command, *common]))
            spawned.append(children[-1])

    if metrics_port and not args.backlog:
        spawn_components()
    system = System(
        str(kubeconfig),
        SystemOptions(
            period=args.period,
            kubelet=not args.no_kubelet,
            status_period=5.0,
            components=components,
        ),
    ).start()
    nodes = system.informers["nodes"]["nodes"]
    # the observer: the simulated nodes' own watch on all pods (the one the kubelet uses) sees
    # each change when the server announces it; a watch of its own would only add load
    system.informers["nodes"]["pods"].add_handler(listener)
    ready = wait_until(
        lambda: (
            sum(1 for n in nodes.items() if not (n.get("spec") or {}).get("taints")) >= args.nodes
        ),
        timeout=300,
        interval=0.5,
    )
    print(
        f"nodes: {args.nodes} x {args.gpus} GPUs created and Ready in "
        f"{time.monotonic() - t:.1f}s (ready={ready})"
    )
    if metrics_port and not args.backlog:
        wait_until(lambda: _cycles(system, metrics_port) > 0, timeout=60, interval=0.5)

    requests_before = _server_requests(kube)
    cycles_before = _cycles(system, metrics_port)
    pods = [
        pod_manifest(f"p-{i:05d}", "bench", "bench", gpus=1, cpu="1", memory="1Gi")
        for i in range(args.pods)
    ]
    if args.backlog:
        t_create = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda body: kube.create(PODS, body), pods))
        print(
            f"backlog: {args.pods} pods created in {time.monotonic() - t_create:.1f}s "
            "before any component ran"
        )
    named: list[tuple[str, Any]] = []
    if child is not None:
        named.append(("apiserver", child))
    cpu_before = {name: _cpu_seconds(proc.pid) for name, proc in named}
    own_before = _cpu_seconds(os.getpid())
    counting.set()
    t0 = time.monotonic()
    if args.backlog:
        spawn_components()  # the clock includes their start-up (informer lists, Leases)
    else:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda body: kube.create(PODS, body), pods))
    t_created = time.monotonic()
    named += list(zip(("scheduler", "binder", "podgrouper"), children, strict=False))
    finished = done.wait(args.timeout)
    t_end = time.monotonic()
    counting.clear()
    requests_after = _server_requests(kube)
    by_kind = {
        key: count - requests_before.get(key, 0)
        for key, count in requests_after.items()
        if count - requests_before.get(key, 0) > 0
    }
    requests = sum(by_kind.values())
    cycles = _cycles(system, metrics_port) - cycles_before
    last_cycle = _gauges(system, metrics_port)
    cpu = {name: _cpu_seconds(proc.pid) - cpu_before.get(name, 0.0) for name, proc in named}
    cpu["nodes+kubelet+observer+creators (bench)"] = _cpu_seconds(os.getpid()) - own_before
    idle: dict[str, float] = {}
    idle_cycles = 0.0
    if args.idle > 0 and finished:
        time.sleep(min(args.idle, 5.0))  # the last writes (PodGroup status, Events) settle
        idle_before = {name: _cpu_seconds(proc.pid) for name, proc in named}
        idle_cycles = _cycles(system, metrics_port)
        time.sleep(args.idle)
        idle = {name: _cpu_seconds(proc.pid) - idle_before[name] for name, proc in named}
        idle_cycles = _cycles(system, metrics_port) - idle_cycles
    for proc in children:
        proc.send_signal(signal.SIGTERM)
    for proc in children:
        proc.wait(timeout=60)
    system.stop()
    if server is not None:
        server.stop()
    if child is not None:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)

    n = len(bound_at)
    elapsed = (max(bound_at.values()) if bound_at else t_end) - t0
    if not args.backlog:
        print(
            f"pods: {args.pods} created in {t_created - t0:.1f}s "
            f"({args.pods / (t_created - t0):.0f} creates/s over HTTP)"
        )
    if grouped_at:
        # a pod grouped by its owner gets the annotation with its Binding: then this is the
        # bind time, not the pod-grouper's
        print(
            f"pod-group-name annotation (pod-grouper, or the Binding for pods grouped by owner): "
            f"last at {max(grouped_at.values()) - t0:.1f}s"
        )
    if bound_at:
        first = min(bound_at.values()) - t0
        print(f"bound: {n}/{args.pods}; first at {first:.1f}s, last at {elapsed:.1f}s")
        for q in (0.5, 0.9, 0.99):
            times = sorted(v - t0 for v in bound_at.values())
            print(f"  p{int(q * 100)} bind time after start: {times[int(q * (n - 1))]:.1f}s")
    print(
        f"scheduling cycles: {cycles:.0f}; last cycle {last_cycle[0]:.0f} ms "
        f"(snapshot {last_cycle[1]:.0f} ms, writes {last_cycle[2]:.0f} ms)"
    )
    print(
        f"API requests during the run: {requests} ({requests / max(elapsed, 1e-9):.0f}/s, "
        f"{requests / args.pods:.2f} per pod); per pod by verb and resource:"
    )
    for (verb, resource, sub), count in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        what = f"{resource}/{sub}" if sub else resource
        print(f"  {verb:<7} {what:<28} {count / args.pods:6.2f}")
    if server is not None:
        print("stored writes per pod, by resource and event type:")
        for (resource, etype), count in sorted(writes.items(), key=lambda kv: -kv[1]):
            print(f"  {resource:<14} {etype:<9} {count / args.pods:6.2f}")
    print(f"CPU seconds used during the run (wall {elapsed:.1f}s, 2 cores = {2 * elapsed:.0f}):")
    for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<40} {seconds:7.1f}")
    if idle:
        print(f"idle: {args.idle:.0f}s after the run, {idle_cycles:.0f} scheduling cycles; CPU s:")
        for name, seconds in sorted(idle.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<40} {seconds:7.2f}")
    rate = n / elapsed if elapsed > 0 else 0.0
    print(f"THROUGHPUT: {rate:.0f} pods/s end to end (target >= 500)")
    if not finished:
        print(f"TIMEOUT after {args.timeout:.0f}s", file=sys.stderr)
        return 1
    return 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (0 where unavailable)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_requests(kube: Any) -> dict[tuple[str, str, str], int]:
    """The API server's ``apiserver_request_total`` counters by (verb, resource, sub)."""
    import re

    _, text = kube.get_text("/metrics")
    counts = {}
    pattern = re.compile(
        r'apiserver_request_total\{verb="([^"]*)",resource="([^"]*)",subresource="([^"]*)"\}'
        r" (\d+)"
    )
    for match in pattern.finditer(text):
        counts[(match[1], match[2], match[3])] = int(match[4])
    return counts


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values


def _cycles(system: Any, port: int) -> float:
    if port:
        return _scrape(port).get("kai_scheduling_cycles_total", 0.0)
    return float(system.scheduler.cycles if system.scheduler else 0)


def _gauges(system: Any, port: int) -> tuple[float, float, float]:
    names = (
        "kai_e2e_scheduling_latency_milliseconds",
        "kai_open_session_latency_milliseconds",
        "kai_close_session_latency_milliseconds",
    )
    if port:
        values = _scrape(port)
        return (values.get(names[0], 0.0), values.get(names[1], 0.0), values.get(names[2], 0.0))
    m = system.metrics
    return (
        m.e2e.values.get((), 0.0),
        m.open_session.values.get((), 0.0),
        m.close_session.values.get((), 0.0),
    )


if __name__ == "__main__":
    sys.exit(main())
