"""``kai up``: the whole system on one machine, no cluster needed.

Starts the embedded API server (with its Job, ReplicaSet, Deployment and StatefulSet
controllers), applies the CRDs, KAI's PriorityClasses and the Queues rendered
from a GitOps repository (``examples/gitops`` by default), creates N simulated GPU nodes, runs
the scheduler, binder, pod-grouper, node life cycle and kubelet, submits a sample mix of
workloads, and prints ``kubeconfig: PATH`` once all is ready so that
``kubectl --kubeconfig PATH get pods -A`` works from another terminal. On a terminal it then
shows a live view of queues and pods; otherwise (headless) it logs a summary line every few
seconds. SIGTERM stops everything and exits 0, Ctrl-C the same with exit status 130.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai.commands._console import Style
from kai.commands._logs import add_logging_options, complain

HELP = "run the whole system on an embedded API server with simulated GPU nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=16, help="simulated GPU nodes")
    parser.add_argument("--gpus-per-node", type=int, default=8, metavar="G", help="GPUs per node")
    parser.add_argument(
        "--mig-nodes",
        type=int,
        default=0,
        metavar="M",
        help="make M of the nodes MIG nodes (mixed strategy, 7 x nvidia.com/mig-1g.10gb per GPU)",
    )
    parser.add_argument("--port", type=int, default=0, help="API server port (default: any free)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="API server address (default: loopback only; any other address is warned about)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="the API server accepts requests without the kubeconfig's bearer token (warned about)",
    )
    parser.add_argument(
        "--no-tls",
        action="store_true",
        help="the API server speaks plain HTTP (default: HTTPS with a new self-signed "
        "certificate in the kubeconfig; kubectl sends the token over HTTPS only)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the API server's objects in DIR across restarts (default: in memory only, "
        "a restart loses every object)",
    )
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
        "--no-webhook",
        action="store_true",
        help="do not run the admission webhook (default: `kai webhook` runs in this process, "
        "registered with the API server: policy documents, Queues and PodGroups are validated, "
        "fractional-GPU pods get their GPU-sharing environment)",
    )
    parser.add_argument(
        "--workload-scale",
        type=int,
        default=0,
        metavar="N",
        help="copies of the sample mix (default: one per 16 nodes)",
    )
    parser.add_argument(
        "--period", type=float, default=1.0, metavar="SECONDS", help="scheduling period"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve the scheduler's Prometheus metrics on this port (default 0: a free port; "
        "-1: off); the URL is printed next to the kubeconfig",
    )
    add_logging_options(parser, level="WARNING")
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


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.nodes < 0 or args.gpus_per_node < 0:
        return "--nodes and --gpus-per-node must not be negative"
    if not 0 <= args.mig_nodes <= args.nodes:
        return "--mig-nodes must be between 0 and --nodes"
    if args.gitops and not Path(args.gitops).exists():
        return f"{args.gitops}: no such file or directory"
    return None


def run(args: argparse.Namespace) -> int:
    from kai.commands._logs import setup_logging, status_logger
    from kai.commands._signals import stop_on_signals

    setup_logging(args.log_level, args.log_format)
    problem = _usage_problem(args)
    if problem is not None:
        print(f"kai up: {problem}", file=sys.stderr)
        return 2
    from kai.sim.system import default_gitops_path

    gitops = Path(args.gitops) if args.gitops else default_gitops_path()
    objects: list[dict[str, Any]] = []
    if gitops is not None:
        objects, problems = _render_gitops(gitops)
        if problems and not objects:
            for line in problems:
                print(line, file=sys.stderr)
            print(f"kai up: {gitops} does not validate; nothing started", file=sys.stderr)
            return 1
    stop = threading.Event()
    status = stop_on_signals(stop)
    up = Up(args, status_logger("kai up", args.log_format))
    code = up.run(objects, gitops, stop)
    return code if code else status()


@dataclass
class Up:
    """One ``kai up`` run: what it started, so that :meth:`close` stops exactly that."""

    args: argparse.Namespace
    log: logging.Logger
    server: Any = None
    system: Any = None
    metrics: Any = None
    tmp: str | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def run(self, objects: list[dict[str, Any]], gitops: Path | None, stop: threading.Event) -> int:
        from kai.kube.client import KubeError
        from kube_emulator import ApiServer

        args = self.args
        # the workload controllers: submitted Jobs, Deployments, ReplicaSets and StatefulSets
        # get their pods, as kube-controller-manager makes them on a real cluster
        from kai.commands.apiserver import use_tls, warn_exposure

        warn_exposure("kai.up", args.host, args.insecure_no_auth)
        tls = use_tls("kai up", False, args.no_tls, args.log_format)
        try:
            self.server = ApiServer(
                host=args.host,
                port=args.port,
                tls=bool(tls),
                workload_controllers=True,
                require_auth=not args.insecure_no_auth,
                data_dir=args.data_dir,
            )
            self.server.start()
        except OSError as exc:
            where = exc.filename or f"{args.host}:{args.port}"
            message = f"cannot {'use' if exc.filename else 'listen on'} {where}: {exc.strerror}"
            complain("kai up", message, args.log_format)
            return 2
        except ValueError as exc:  # a data directory that cannot be read back
            complain("kai up", str(exc), args.log_format)
            return 2
        try:
            kubeconfig = self._kubeconfig()
            self._populate(kubeconfig, objects, gitops)
            self._announce_kubeconfig(kubeconfig)
            self._watch(kubeconfig, stop)
        except KubeError as exc:
            complain("kai up", str(exc), args.log_format)
            return 3
        finally:
            self.close()
        self.log.info("stopped")
        return 0

    def _kubeconfig(self) -> Path:
        if self.args.kubeconfig_out:
            path = Path(self.args.kubeconfig_out)
        else:
            self.tmp = tempfile.mkdtemp(prefix="kai-up-")
            path = Path(self.tmp) / "kubeconfig"
        self.server.write_kubeconfig(path)
        return path

    def _populate(
        self, kubeconfig: Path, objects: list[dict[str, Any]], gitops: Path | None
    ) -> None:
        """Queues, nodes, the running system and the sample workloads."""
        from kai.kube.client import Kube
        from kai.metrics import MetricsServer
        from kai.sim.system import System, SystemOptions, apply_objects, bootstrap
        from kai.sim.workloads import submit_sample_mix

        args = self.args
        kube = Kube.from_kubeconfig(str(kubeconfig))
        kept = (
            f"objects kept in {self.args.data_dir}"
            if self.args.data_dir
            else "in memory: a restart loses every object; --data-dir DIR keeps them"
        )
        self.log.info(
            "starting: API server %s (%s)", self.server.url, kept, extra={"url": self.server.url}
        )
        bootstrap(kube)
        for line in apply_objects(kube, objects):
            complain("kai up", line, args.log_format, level="WARNING")
        queues = sum(1 for o in objects if o.get("kind") == "Queue")
        self.log.info(
            f"applied {queues} queues from {gitops}" if gitops else "no GitOps repository"
        )
        self._create_nodes(kube)
        webhook = () if args.no_webhook else ("webhook",)
        options = SystemOptions(
            period=args.period,
            usage_source="accounting",  # time-based fairshare from kai's own accounting
            usage_history="kai-scheduler/kai-queue-usage",
            components=(*SystemOptions().components, *webhook),
        )
        self.system = System(str(kubeconfig), options).start()
        if self.system.webhook is not None:
            self.log.info(
                "admission webhook: kai webhook at %s (failure policy Fail)",
                self.system.webhook.opts.self_register,
            )
        if args.metrics_port >= 0:
            self.metrics = MetricsServer(
                [self.system.metrics.registry], args.metrics_port, host="127.0.0.1"
            ).start()
        if not args.no_workloads:
            scale = args.workload_scale or max(1, args.nodes // 16)
            mix = submit_sample_mix(kube, scale=scale, mig=args.mig_nodes > 0, job_controller=True)
            pods = len(mix.pods) + mix.job_pods
            self.log.info(f"submitted {pods} pods ({len(mix.jobs)} gang jobs)")

    def _create_nodes(self, kube: Any) -> None:
        from kai.sim.nodes import NodeShape, create_nodes

        args = self.args
        create_nodes(kube, args.nodes - args.mig_nodes, NodeShape(gpus=args.gpus_per_node))
        if args.mig_nodes:
            mig = {"nvidia.com/mig-1g.10gb": 7 * args.gpus_per_node}
            shape = NodeShape(gpus=args.gpus_per_node, mig=mig)
            create_nodes(kube, args.mig_nodes, shape, prefix="mig-node")
        self.log.info(
            f"created {args.nodes} nodes x {args.gpus_per_node} GPUs"
            + (f" ({args.mig_nodes} with MIG)" if args.mig_nodes else "")
        )

    def _announce_kubeconfig(self, kubeconfig: Path) -> None:
        from kai.commands._logs import announce

        extra: dict[str, str] = {}
        if self.metrics is not None:
            extra["metrics"] = self.metrics.url()
            announce(
                f"metrics: {self.metrics.url()}", self.args.log_format, logger="kai.up", **extra
            )
        announce(
            f"kubeconfig: {kubeconfig}",
            self.args.log_format,
            logger="kai.up",
            kubeconfig=str(kubeconfig),
        )

    def _watch(self, kubeconfig: Path, stop: threading.Event) -> None:
        """The live view on a terminal, a summary log line every 5 s otherwise, until ``stop``."""
        from kai.commands._console import style_for

        args = self.args
        live = sys.stdout.isatty() and not args.headless and args.log_format == "text"
        view = View(self.system, style_for(sys.stdout, args.color))
        metrics = self.metrics.url() if self.metrics is not None else None
        while not stop.is_set():
            if live:
                height = shutil.get_terminal_size().lines
                screen = view.render(self.server.url, kubeconfig, metrics, height=height)
                sys.stdout.write("\x1b[H\x1b[2J" + screen.rstrip("\n"))
                sys.stdout.flush()
                stop.wait(1.0)
            else:
                self.log.info(view.summary())
                stop.wait(5.0)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
        if self.system is not None:
            self.system.stop()
        if self.server is not None:
            self.server.stop()
        if self.tmp is not None:
            for leftover in Path(self.tmp).iterdir():
                leftover.unlink()
            os.rmdir(self.tmp)


def _phase(pod: dict[str, Any]) -> str:
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase == "Pending" and (pod.get("spec") or {}).get("nodeName"):
        return "Bound"
    return str(phase)


def _pod_gpu(pod: dict[str, Any]) -> str:
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get("gpu-fraction"):
        return str(annotations["gpu-fraction"])
    for container in (pod.get("spec") or {}).get("containers") or []:
        gpus = (container.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
        if gpus:
            return str(gpus)
    return "-"


_PHASE_SEVERITY = {"Running": "ok", "Pending": "warning", "Failed": "error"}


class View:
    """The terminal view: queues (quota, fair share, allocated) and pods."""

    def __init__(self, system: Any, style: Style | None = None) -> None:
        self.system = system
        self.style = style or Style(False)

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
            phase = _phase(pod)
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

    def render(
        self, url: str, kubeconfig: Path, metrics: str | None = None, height: int | None = None
    ) -> str:
        """The screen: the kubeconfig and metrics URL in the header and again in the last
        line, the queues and as many pods as fit in ``height`` lines (None: no limit), so that
        neither scrolls off a small terminal."""
        where = f"kubeconfig: {kubeconfig}" + (f"   metrics: {metrics}" if metrics else "")
        head = [self.style.bold(f"kai up — API server {url}   (Ctrl-C to stop)"), where, ""]
        foot = ["", self.summary(), self.style.bold(where)]
        queues = self._queue_lines()
        pods: list[str] = []
        if height is None:
            pods = self._pod_lines()
        else:
            room = max(2, height - len(head) - len(foot))  # lines left for queues and pods
            if len(queues) > room:
                queues = [*queues[: room - 1], "..."]
            elif room - len(queues) - 1 >= 3:  # a blank line, the header, one pod at least
                pods = self._pod_lines(min(40, room - len(queues) - 3))
        body = [*queues, "", *pods] if pods else queues
        return "\n".join([*head, *body, *foot]) + "\n"

    def _queue_lines(self) -> list[str]:
        header = (
            f"{'QUEUE':<28}{'GPU QUOTA':>10}{'FAIR SHARE':>12}{'ALLOCATED':>11}{'REQUESTED':>11}"
        )
        lines = [self.style.bold(header)]
        informers = self.system.informers.get("scheduler")
        if informers is None:
            return lines
        result = self.system.scheduler.last_result if self.system.scheduler else None
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
        return lines

    def _pod_lines(self, limit: int = 40) -> list[str]:
        pods = sorted(
            self._pods(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        )
        lines = [self.style.bold(f"{'NAMESPACE':<16}{'POD':<30}{'STATUS':<11}{'NODE':<16}GPU")]
        for pod in pods[:limit]:
            md, spec = pod["metadata"], pod.get("spec") or {}
            phase = _phase(pod)
            status = self.style.severity(f"{phase:<11}", _PHASE_SEVERITY.get(phase, ""))
            lines.append(
                f"{md['namespace'][:15]:<16}{md['name'][:29]:<30}{status}"
                f"{(spec.get('nodeName') or '-')[:15]:<16}{_pod_gpu(pod)}"
            )
        if len(pods) > limit:
            lines.append(f"... and {len(pods) - limit} more pods")
        return lines
