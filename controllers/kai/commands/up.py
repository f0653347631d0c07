"""``kai up``: the whole system on one machine, no cluster needed.

Starts the embedded API server, applies the CRDs, KAI's PriorityClasses and the Queues rendered
from a GitOps repository (``examples/gitops`` by default), creates N simulated GPU nodes, runs
the scheduler, binder, pod-grouper, node life cycle and kubelet, submits a sample mix of
workloads, and prints ``kubeconfig: PATH`` once all is ready so that
``kubectl --kubeconfig PATH get pods -A`` works from another terminal. On a terminal it then
shows a live view of queues and pods; otherwise (headless) it logs a summary line every few
seconds. Ctrl-C or SIGTERM stops everything and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HELP = "run the whole system on an embedded API server with simulated GPU nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=16, help="simulated GPU nodes (default 16)")
    parser.add_argument(
        "--gpus-per-node", type=int, default=8, metavar="G", help="GPUs per node (default 8)"
    )
    parser.add_argument(
        "--mig-nodes",
        type=int,
        default=0,
        metavar="M",
        help="make M of the nodes MIG nodes (mixed strategy, 7 x nvidia.com/mig-1g.10gb per GPU)",
    )
    parser.add_argument("--port", type=int, default=0, help="API server port (default: any free)")
    parser.add_argument("--host", default="127.0.0.1", help="API server address")
    parser.add_argument(
        "--kubeconfig-out",
        metavar="FILE",
        help="where to write the kubeconfig (default: a file in a new temporary directory)",
    )
    parser.add_argument(
        "--gitops",
        metavar="PATH",
        help="GitOps repository whose Queues/Topologies to apply (default: examples/gitops)",
    )
    parser.add_argument(
        "--no-workloads", action="store_true", help="do not submit the sample workloads"
    )
    parser.add_argument(
        "--workload-scale",
        type=int,
        default=0,
        metavar="N",
        help="copies of the sample mix (default: one per 16 nodes)",
    )
    parser.add_argument("--period", type=float, default=1.0, help="scheduling period (seconds)")
    parser.add_argument("--metrics-port", type=int, default=0, help="scheduler metrics port")
    parser.add_argument(
        "--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        help="plain log lines even on a terminal (default when stdout is not a TTY)",
    )


def _render_gitops(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    from kai.gitops.compile import compile_documents
    from kai.gitops.validate import validate_paths

    report = validate_paths([str(path)])
    problems = [p.text() for p in report.errors]
    if not report.ok:
        return [], problems
    return compile_documents(report.documents), problems


def run(args: argparse.Namespace) -> int:
    from kai.commands.scheduler import setup_logging

    setup_logging(args.log_level)
    if args.nodes < 0 or args.gpus_per_node < 0:
        print("kai up: --nodes and --gpus-per-node must not be negative", file=sys.stderr)
        return 2
    if not 0 <= args.mig_nodes <= args.nodes:
        print("kai up: --mig-nodes must be between 0 and --nodes", file=sys.stderr)
        return 2
    from kai.sim.system import default_gitops_path

    gitops = Path(args.gitops) if args.gitops else default_gitops_path()
    if args.gitops and not gitops.exists():  # type: ignore[union-attr]
        print(f"kai up: {args.gitops}: no such file or directory", file=sys.stderr)
        return 2
    objects: list[dict[str, Any]] = []
    if gitops is not None:
        objects, problems = _render_gitops(gitops)
        if problems and not objects:
            for line in problems:
                print(line, file=sys.stderr)
            print(f"kai up: {gitops} does not validate; nothing started", file=sys.stderr)
            return 1
    stop = threading.Event()
    import signal

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return _up(args, objects, gitops, stop)


def _up(
    args: argparse.Namespace,
    objects: list[dict[str, Any]],
    gitops: Path | None,
    stop: threading.Event,
) -> int:
    from kai.kube.client import Kube, KubeError
    from kai.metrics import MetricsServer
    from kai.sim.nodes import NodeShape, create_nodes
    from kai.sim.system import System, SystemOptions, apply_objects, bootstrap
    from kai.sim.workloads import submit_sample_mix
    from kube_emulator import ApiServer

    server = ApiServer(host=args.host, port=args.port)
    try:
        server.start()
    except OSError as exc:
        print(f"kai up: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    tmp = None
    if args.kubeconfig_out:
        kubeconfig = Path(args.kubeconfig_out)
    else:
        tmp = tempfile.mkdtemp(prefix="kai-up-")
        kubeconfig = Path(tmp) / "kubeconfig"
    system: System | None = None
    metrics = None
    try:
        server.write_kubeconfig(kubeconfig)
        kube = Kube.from_kubeconfig(str(kubeconfig))
        log_line("starting: API server " + server.url)
        bootstrap(kube)
        problems = apply_objects(kube, objects)
        for line in problems:
            print(f"kai up: {line}", file=sys.stderr)
        queues = sum(1 for o in objects if o.get("kind") == "Queue")
        log_line(f"applied {queues} queues from {gitops}" if gitops else "no GitOps repository")
        shape = NodeShape(gpus=args.gpus_per_node)
        create_nodes(kube, args.nodes - args.mig_nodes, shape)
        if args.mig_nodes:
            mig = {"nvidia.com/mig-1g.10gb": 7 * args.gpus_per_node}
            create_nodes(
                kube,
                args.mig_nodes,
                NodeShape(gpus=args.gpus_per_node, mig=mig),
                prefix="mig-node",
            )
        log_line(
            f"created {args.nodes} nodes x {args.gpus_per_node} GPUs"
            + (f" ({args.mig_nodes} with MIG)" if args.mig_nodes else "")
        )
        system = System(str(kubeconfig), SystemOptions(period=args.period)).start()
        if args.metrics_port:
            metrics = MetricsServer([system.metrics.registry], args.metrics_port).start()
        if not args.no_workloads:
            scale = args.workload_scale or max(1, args.nodes // 16)
            mix = submit_sample_mix(kube, scale=scale, mig=args.mig_nodes > 0)
            log_line(f"submitted {len(mix.pods)} pods ({len(mix.jobs)} gang jobs)")
        print(f"kubeconfig: {kubeconfig}", flush=True)
        live = sys.stdout.isatty() and not args.headless
        view = View(system)
        while not stop.is_set():
            if live:
                sys.stdout.write("\x1b[H\x1b[2J" + view.render(server.url, kubeconfig))
                sys.stdout.flush()
                stop.wait(1.0)
            else:
                log_line(view.summary())
                stop.wait(5.0)
    except KubeError as exc:
        print(f"kai up: {exc}", file=sys.stderr)
        return 3
    finally:
        if metrics is not None:
            metrics.stop()
        if system is not None:
            system.stop()
        server.stop()
        if tmp is not None:
            for leftover in Path(tmp).iterdir():
                leftover.unlink()
            os.rmdir(tmp)
    log_line("stopped")
    return 0


def log_line(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} kai up: {text}", flush=True)


class View:
    """The terminal view: queues (quota, fair share, allocated) and pods."""

    def __init__(self, system: Any) -> None:
        self.system = system

    def _pods(self) -> list[dict[str, Any]]:
        informers = self.system.informers.get("scheduler")
        if informers is None:
            return []
        return [
            p
            for p in informers["pods"].items()
            if p["metadata"].get("namespace") != "kai-resource-reservation"
        ]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for pod in self._pods():
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase == "Pending" and (pod.get("spec") or {}).get("nodeName"):
                phase = "Bound"
            counts[phase] = counts.get(phase, 0) + 1
        pods = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items())) or "none"
        result = self.system.scheduler.last_result if self.system.scheduler else None
        used = 0.0
        if result is not None:
            used = sum(
                s.allocated.get("gpu", 0.0)
                for name, s in result.queues.items()
                if not self._has_parent(name)
            )
        return f"pods: {pods}; GPUs allocated: {used:g}"

    def _has_parent(self, name: str) -> bool:
        informers = self.system.informers.get("scheduler")
        queue = informers["queues"].get(name) if informers else None
        return bool(queue and (queue.get("spec") or {}).get("parentQueue"))

    def render(self, url: str, kubeconfig: Path) -> str:
        lines = [f"kai up — API server {url}   kubeconfig: {kubeconfig}   (Ctrl-C to stop)", ""]
        informers = self.system.informers.get("scheduler")
        result = self.system.scheduler.last_result if self.system.scheduler else None
        lines.append(
            f"{'QUEUE':<28}{'GPU QUOTA':>10}{'FAIR SHARE':>12}{'ALLOCATED':>11}{'REQUESTED':>11}"
        )
        if informers is not None:
            queues = {q["metadata"]["name"]: q for q in informers["queues"].items()}
            children: dict[str | None, list[str]] = {}
            for name, q in queues.items():
                parent = (q.get("spec") or {}).get("parentQueue") or None
                children.setdefault(parent if parent in queues else None, []).append(name)

            def walk(parent: str | None, depth: int) -> None:
                for name in sorted(children.get(parent, [])):
                    spec = queues[name].get("spec") or {}
                    quota = ((spec.get("resources") or {}).get("gpu") or {}).get("quota", 0)
                    share = result.queues.get(name) if result else None
                    fair = share.fair_share.get("gpu", 0.0) if share else 0.0
                    alloc = share.allocated.get("gpu", 0.0) if share else 0.0
                    req = share.requested.get("gpu", 0.0) if share else 0.0
                    label = ("  " * depth + name)[:27]
                    lines.append(f"{label:<28}{quota!s:>10}{fair:>12.2f}{alloc:>11.2f}{req:>11.2f}")
                    walk(name, depth + 1)

            walk(None, 0)
        lines.append("")
        pods = sorted(
            self._pods(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        )
        lines.append(f"{'NAMESPACE':<16}{'POD':<30}{'STATUS':<11}{'NODE':<16}GPU")
        for pod in pods[:40]:
            md, spec = pod["metadata"], pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase == "Pending" and spec.get("nodeName"):
                phase = "Bound"
            annotations = md.get("annotations") or {}
            gpu = annotations.get("gpu-fraction") or next(
                (
                    str((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu"))
                    for c in spec.get("containers") or []
                    if (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
                ),
                "-",
            )
            lines.append(
                f"{md['namespace'][:15]:<16}{md['name'][:29]:<30}{phase:<11}"
                f"{(spec.get('nodeName') or '-')[:15]:<16}{gpu}"
            )
        if len(pods) > 40:
            lines.append(f"... and {len(pods) - 40} more pods")
        lines.append("")
        lines.append(self.summary())
        return "\n".join(lines) + "\n"
