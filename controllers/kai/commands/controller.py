"""``kai controller``: reconcile the GitOps documents in the cluster (QueueTree, TopologyPolicy,
SharingPolicy, SchedulerPolicy) into Queues, Topologies and the scheduler ConfigMap, until
SIGTERM (see kai.reconcilers.gitops_controller)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kai.commands._logs import add_logging_options, complain, setup_logging
from kai.commands._signals import wait_for_signal

HELP = "reconcile QueueTree / TopologyPolicy / SharingPolicy / SchedulerPolicy documents"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: in-cluster config, then $KUBECONFIG)",
    )
    parser.add_argument(
        "--namespace",
        default="kai-scheduler",
        help="kai's own namespace: the controller's Lease and the scheduler ConfigMap "
        "(default: kai-scheduler)",
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
        "--resync",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="reconcile everything at least this often (default: 30)",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="run without holding the Lease kai-controller (only one replica!)",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format)
    from kai.kube.client import ConfigError, Kube, KubeError
    from kai.kube.events import EventRecorder
    from kai.kube.leader import LeaderElector
    from kai.metrics import MetricsServer, Registry
    from kai.reconcilers.gitops_controller import ControllerOptions, start_controller
    from kai.sim.system import identity

    stoppers: list[Callable[[], object]] = []
    registry = Registry()
    started: list[bool] = []

    def stop_all() -> None:
        for stop in reversed(stoppers):
            stop()

    def ready() -> bool:
        return bool(started)

    if args.metrics_port:  # served from the start: liveness holds while the caches fill
        try:
            metrics = MetricsServer([registry], args.metrics_port, ready=ready).start()
        except OSError as exc:
            message = f"metrics port {args.metrics_port}: {exc.strerror}"
            complain("kai controller", message, args.log_format)
            return 2
        stoppers.append(metrics.stop)
    try:
        kube = Kube.from_kubeconfig(args.kubeconfig)
        stoppers.append(kube.close)
        recorder = EventRecorder(kube, "kai-controller").start()
        stoppers.append(recorder.stop)
        elector = None
        if not args.no_leader_election:
            elector = LeaderElector(
                kube, "kai-controller", args.namespace, identity("kai-controller")
            ).start()
            stoppers.append(elector.stop)
        controller, informers = start_controller(
            kube,
            recorder,
            ControllerOptions(namespace=args.namespace, resync=args.resync),
            is_leader=(lambda: elector.is_leader) if elector else None,
            registry=registry,
        )
        stoppers.append(informers.stop)
        stoppers.append(controller.stop)
    except (ConfigError, KubeError) as exc:
        what = exc if isinstance(exc, ConfigError) else f"cannot reach the cluster: {exc}"
        complain("kai controller", str(what), args.log_format)
        stop_all()
        return 2
    started.append(True)
    try:
        code = wait_for_signal()
    finally:
        stop_all()
    return code
