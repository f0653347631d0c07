"""``kai scheduler``: the live scheduler against a Kubernetes API, until SIGTERM.

This module also holds what every live command shares (``kai binder``, ``kai podgrouper``):
the common flags (``--kubeconfig``, ``--scheduler-name``, ``--metrics-port``, ``--log-level``,
``--log-format``) and :func:`run_live`, which starts components, serves metrics and stops
cleanly on SIGTERM (exit 0) or Ctrl-C (exit 130), or exits 2 with one line when the cluster
cannot be reached.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from kai.commands._logs import add_logging_options, complain, setup_logging
from kai.commands._signals import wait_for_signal

HELP = "run the scheduler against a Kubernetes API"

log = logging.getLogger("kai.commands")


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default: in-cluster config, then $KUBECONFIG)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=None,
        help="handle pods whose spec.schedulerName is this (default: spec.global.schedulerName "
        "of KAI's Config kai-config if there is one, else kai-scheduler)",
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


def add_node_pool_label_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-pool-label-key",
        default=None,
        metavar="KEY",
        help="label naming the node pool (shard) of nodes, Queues and workloads (default: "
        "spec.global.nodePoolLabelKey of KAI's Config kai-config, else kai.scheduler/node-pool)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_live_arguments(parser)
    add_node_pool_label_argument(parser)
    parser.add_argument(
        "--shard",
        metavar="NAME",
        help="serve only the node pool of this SchedulingShard (its partitionLabelValue): its "
        "nodes, Queues and PodGroups, its ConfigMap section, its own Lease (default: no shard, "
        "KAI's default pool: the nodes, Queues and workloads without the node-pool label; a "
        "cluster without the label is served whole)",
    )
    parser.add_argument(
        "--period",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="pace of the time-based work (stale gangs, preemption delays, minimum runtimes, "
        "time-based fair share, retries); cycles also run on new work (default: 1)",
    )
    parser.add_argument(
        "--coalesce",
        type=float,
        default=0.1,
        metavar="SECONDS",
        help="a cycle starts this long after the first relevant change (new pod, PodGroup, "
        "freed node, Queue or config change), so that a burst makes one cycle; no change, no "
        "cycle (default: 0.1)",
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
    parser.add_argument(
        "--bind-mode",
        choices=("direct", "bindRequest"),
        default="direct",
        help="direct: the scheduler binds pods that need no binder work (no shared GPU, MIG, "
        "volume claim or DRA claim) itself, one API request each, no BindRequest; bindRequest: "
        "every pod through a BindRequest and the binder, as KAI does (default: direct)",
    )
    parser.add_argument(
        "--also",
        default="",
        metavar="COMPONENTS",
        help="also run these components (comma-separated: binder, podgrouper) in this "
        "process, sharing the scheduler's client and informers: one LIST and WATCH of pods "
        "instead of one per process; each keeps its own Lease and its default settings "
        "(32 workers; the queue label key of --queue-label-key, the scheduler's node-pool label "
        "key) "
        "(default: none, each runs as its own command)",
    )
    parser.add_argument(
        "--queue-label-key",
        default=None,
        metavar="KEY",
        help="with --also podgrouper: the label naming a workload's queue (default: "
        "spec.global.queueLabelKey of KAI's Config kai-config, else kai.scheduler/queue)",
    )


def run_live(
    args: argparse.Namespace,
    component: str,
    on_start: Callable[[Any], None] | None = None,
    also: tuple[str, ...] = (),
    **options: Any,
) -> int:
    """Start ``component`` of the live system (and the components ``also`` in the same
    process, sharing its informers) and run it until a signal; ``on_start`` is called with the
    started :class:`kai.sim.system.System`."""
    setup_logging(args.log_level, args.log_format)
    from kai.kube.client import ConfigError, KubeError
    from kai.metrics import MetricsServer
    from kai.reconcilers.shard import ShardError
    from kai.sim.system import System, SystemOptions

    try:
        resolve_kai_config(args, options)
    except (ConfigError, KubeError) as exc:
        what = exc if isinstance(exc, ConfigError) else f"cannot reach the cluster: {exc}"
        complain(f"kai {component}", str(what), args.log_format)
        return 2
    opts = SystemOptions(
        scheduler_name=args.scheduler_name,
        leader_election=not args.no_leader_election,
        lease_namespace=args.namespace,
        components=(component, *also),
        share_informers=bool(also),
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
    except (ConfigError, KubeError, ShardError) as exc:
        what = str(exc) if not isinstance(exc, KubeError) else f"cannot reach the cluster: {exc}"
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


def resolve_kai_config(args: argparse.Namespace, options: dict[str, Any]) -> None:
    """Fill what the command line left unset from KAI's Config ``kai-config`` (scheduler name,
    queue and node-pool label keys), else KAI's defaults. Flags given explicitly win."""
    from kai.kube.client import Kube
    from kai.reconcilers.shard import NODE_POOL_LABEL, read_kai_config

    wanted = args.scheduler_name is None or (
        "queue_label" in options and options["queue_label"] is None
    )
    wanted = wanted or ("node_pool_label" in options and options["node_pool_label"] is None)
    found: dict[str, str] = {}
    if wanted:
        kube = Kube.from_kubeconfig(args.kubeconfig)
        try:
            found = read_kai_config(kube)
        finally:
            kube.close()
    if found:
        log.info("KAI Config kai-config: %s", ", ".join(f"{k}={v}" for k, v in found.items()))
    if args.scheduler_name is None:
        args.scheduler_name = found.get("schedulerName", "kai-scheduler")
    if "queue_label" in options and options["queue_label"] is None:
        options["queue_label"] = found.get("queueLabelKey", "kai.scheduler/queue")
    if "node_pool_label" in options and options["node_pool_label"] is None:
        options["node_pool_label"] = found.get("nodePoolLabelKey", NODE_POOL_LABEL)


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
    also = tuple(part.strip() for part in args.also.split(",") if part.strip())
    unknown = sorted(set(also) - {"binder", "podgrouper"})
    if unknown:
        print(
            f"kai scheduler: --also {args.also}: unknown component {unknown[0]!r} "
            "(binder, podgrouper)",
            file=sys.stderr,
        )
        return 2
    if args.queue_label_key and "podgrouper" not in also:
        print("kai scheduler: --queue-label-key needs --also podgrouper", file=sys.stderr)
        return 2
    extra: dict[str, Any] = {"queue_label": args.queue_label_key} if "podgrouper" in also else {}
    import tempfile

    directory = args.snapshot_dir or tempfile.gettempdir()

    def on_start(system: Any) -> None:
        import signal

        from kai.commands._signals import on_signal

        def dump() -> None:
            scheduler = system.scheduler
            if scheduler is not None:
                scheduler.write_snapshot(directory)

        on_signal(signal.SIGUSR1, dump)

    return run_live(
        args,
        "scheduler",
        on_start=on_start,
        also=tuple(dict.fromkeys(also)),
        period=args.period,
        coalesce=args.coalesce,
        status_period=args.status_period,
        config_map=args.config_map,
        usage_source=args.usage_source,
        prometheus_url=args.prometheus_url,
        usage_history=usage_history,
        shard=args.shard,
        node_pool_label=args.node_pool_label_key,
        bind_mode=args.bind_mode,
        **extra,
    )
