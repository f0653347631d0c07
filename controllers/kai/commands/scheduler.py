"""``kai scheduler``: the live scheduler against a Kubernetes API, until SIGTERM.

This module also holds what every live command shares (``kai binder``, ``kai podgrouper``):
the common flags (``--kubeconfig``, ``--scheduler-name``, ``--metrics-port``, ``--log-level``,
``--log-format``) and :func:`run_live`, which starts components, serves metrics and stops
cleanly on SIGTERM (exit 0) or Ctrl-C (exit 130), or exits 2 with one line when the cluster
cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any

from kai.commands._logs import add_logging_options, complain, setup_logging
from kai.commands._signals import wait_for_signal

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
    add_logging_options(parser)
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
    parser.add_argument(
        "--usage-source",
        choices=("none", "accounting", "prometheus"),
        default="none",
        help="historical queue usage for time-based fairshare: none (plain fair share), "
        "accounting (the scheduler's own, kept in --usage-history) or prometheus "
        "(--prometheus-url) (default: none)",
    )
    parser.add_argument(
        "--prometheus-url",
        default="",
        metavar="URL",
        help="Prometheus server that scrapes the scheduler's metrics, for --usage-source "
        "prometheus (e.g. http://prometheus.monitoring:9090)",
    )
    parser.add_argument(
        "--usage-history",
        metavar="NAMESPACE/NAME",
        help="ConfigMap keeping the accounting usage history across restarts "
        "(default: NAMESPACE/kai-queue-usage, NAMESPACE from --namespace)",
    )
    parser.add_argument(
        "--snapshot-dir",
        metavar="DIR",
        help="on SIGUSR1, write a cluster snapshot (`kai snapshot`'s format) of what the next "
        "cycle reads into DIR (default: the system's temporary directory)",
    )


def run_live(
    args: argparse.Namespace,
    component: str,
    on_start: Callable[[Any], None] | None = None,
    **options: Any,
) -> int:
    """Start ``component`` of the live system and run it until a signal; ``on_start`` is called
    with the started :class:`kai.sim.system.System`."""
    setup_logging(args.log_level, args.log_format)
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
            message = f"metrics port {args.metrics_port}: {exc.strerror}"
            complain(f"kai {component}", message, args.log_format)
            return 2
    try:
        system.start()
    except (ConfigError, KubeError) as exc:
        what = exc if isinstance(exc, ConfigError) else f"cannot reach the cluster: {exc}"
        complain(f"kai {component}", str(what), args.log_format)
        if metrics is not None:
            metrics.stop()
        system.stop()
        return 2
    started.set()
    if on_start is not None:
        on_start(system)
    try:
        code = wait_for_signal()
    finally:
        if metrics is not None:
            metrics.stop()
        system.stop()
    return code


def config_map_of(args: argparse.Namespace) -> str:
    """``--config-map``, else the ConfigMap ``kai-scheduler-config`` in ``--namespace``."""
    return str(args.config_map or f"{args.namespace}/kai-scheduler-config")


def run(args: argparse.Namespace) -> int:
    args.config_map = config_map_of(args)
    if "/" not in args.config_map:
        print("kai scheduler: --config-map must be NAMESPACE/NAME", file=sys.stderr)
        return 2
    if args.usage_source == "prometheus" and not args.prometheus_url:
        print("kai scheduler: --usage-source prometheus needs --prometheus-url", file=sys.stderr)
        return 2
    usage_history = args.usage_history or f"{args.namespace}/kai-queue-usage"
    if args.usage_source == "accounting" and "/" not in usage_history:
        print("kai scheduler: --usage-history must be NAMESPACE/NAME", file=sys.stderr)
        return 2
    import tempfile

    directory = args.snapshot_dir or tempfile.gettempdir()

    def on_start(system: Any) -> None:
        import signal

        def dump(signum: int, frame: object) -> None:
            scheduler = system.scheduler
            if scheduler is not None:
                threading.Thread(
                    target=scheduler.write_snapshot, args=(directory,), daemon=True
                ).start()

        signal.signal(signal.SIGUSR1, dump)

    return run_live(
        args,
        "scheduler",
        on_start=on_start,
        period=args.period,
        status_period=args.status_period,
        config_map=args.config_map,
        usage_source=args.usage_source,
        prometheus_url=args.prometheus_url,
        usage_history=usage_history,
    )
