"""``kai scheduler``: the live scheduler against a Kubernetes API, until SIGTERM.

This module also holds what every live command shares (``kai binder``, ``kai podgrouper``):
the common flags (``--kubeconfig``, ``--scheduler-name``, ``--metrics-port``, ``--log-level``)
and :func:`run_live`, which starts components, serves metrics and stops cleanly on SIGTERM or
Ctrl-C (exit 0), or exits 2 with one line when the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

HELP = "run the scheduler against a Kubernetes API"


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: in-cluster config, then $KUBECONFIG)",
    )
    parser.add_argument(
        "--scheduler-name",
        default="kai-scheduler",
        help="handle pods whose spec.schedulerName is this (default: kai-scheduler)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve Prometheus metrics on this port (default: off)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    parser.add_argument(
        "--namespace",
        default="kai-scheduler",
        help="kai's own namespace, where the component's Lease is held (default: kai-scheduler)",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="run without holding the component's Lease (only one replica!)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_live_arguments(parser)
    parser.add_argument(
        "--period",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="time between scheduling cycles (default: 1)",
    )
    parser.add_argument(
        "--config-map",
        metavar="NAMESPACE/NAME",
        help="ConfigMap with the rendered SchedulerPolicy (`kai render`); KAI's defaults "
        "while it does not exist (default: NAMESPACE/kai-scheduler-config, NAMESPACE "
        "from --namespace)",
    )
    parser.add_argument(
        "--status-period",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="time between Queue/PodGroup status writes (default: 2)",
    )


def setup_logging(level: str) -> None:
    import logging

    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def wait_for_signal(stop: threading.Event | None = None) -> threading.Event:
    """Block until SIGTERM/SIGINT (or ``stop`` is set elsewhere)."""
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(0.5):
        pass
    return stop


def run_live(args: argparse.Namespace, component: str, **options: Any) -> int:
    """Start ``component`` of the live system and run it until a signal."""
    setup_logging(args.log_level)
    from kai.kube.client import ConfigError, KubeError
    from kai.metrics import MetricsServer
    from kai.sim.system import System, SystemOptions

    opts = SystemOptions(
        scheduler_name=args.scheduler_name,
        leader_election=not args.no_leader_election,
        lease_namespace=args.namespace,
        components=(component,),
        **options,
    )
    system = System(args.kubeconfig, opts)
    started = threading.Event()

    def ready() -> bool:
        # ready once started and every informer has listed (a 403 on a list keeps it unready)
        return started.is_set() and all(
            informer.synced.is_set()
            for informers in system.informers.values()
            for informer in informers.informers.values()
        )

    metrics = None
    if args.metrics_port:  # served from the start: liveness holds while the caches fill
        try:
            metrics = MetricsServer(
                [system.metrics.registry], args.metrics_port, ready=ready
            ).start()
        except OSError as exc:
            print(
                f"kai {component}: metrics port {args.metrics_port}: {exc.strerror}",
                file=sys.stderr,
            )
            return 2
    try:
        system.start()
    except (ConfigError, KubeError) as exc:
        what = exc if isinstance(exc, ConfigError) else f"cannot reach the cluster: {exc}"
        print(f"kai {component}: {what}", file=sys.stderr)
        if metrics is not None:
            metrics.stop()
        system.stop()
        return 2
    started.set()
    try:
        wait_for_signal()
    finally:
        if metrics is not None:
            metrics.stop()
        system.stop()
    return 0


def config_map_of(args: argparse.Namespace) -> str:
    """``--config-map``, else the ConfigMap ``kai-scheduler-config`` in ``--namespace``."""
    return str(args.config_map or f"{args.namespace}/kai-scheduler-config")


def run(args: argparse.Namespace) -> int:
    args.config_map = config_map_of(args)
    if "/" not in args.config_map:
        print("kai scheduler: --config-map must be NAMESPACE/NAME", file=sys.stderr)
        return 2
    return run_live(
        args,
        "scheduler",
        period=args.period,
        status_period=args.status_period,
        config_map=args.config_map,
    )
