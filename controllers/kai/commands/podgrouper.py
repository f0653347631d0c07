"""``kai podgrouper``: a PodGroup for every pod of the scheduler, grouped by its top owner's
kind (docs/workloads.md), until SIGTERM (see kai.reconcilers.podgrouper)."""

from __future__ import annotations

import argparse

HELP = "run the pod-grouper against a Kubernetes API"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kai.commands.scheduler import add_live_arguments, add_node_pool_label_argument

    add_live_arguments(parser)
    parser.add_argument(
        "--workers", type=int, default=32, help="pods grouped at once (default: 32)"
    )
    parser.add_argument(
        "--queue-label-key",
        default=None,
        metavar="KEY",
        help="label naming a workload's queue (default: spec.global.queueLabelKey of KAI's "
        "Config kai-config, else kai.scheduler/queue)",
    )
    parser.add_argument(
        "--default-priorities-config-map",
        metavar="NAMESPACE/NAME",
        help="ConfigMap whose key 'types' gives per-kind default priority classes "
        "(JSON list of {typeName, group, priorityName, preemptibility}) (default: none)",
    )
    add_node_pool_label_argument(parser)


def run(args: argparse.Namespace) -> int:
    from kai.commands.scheduler import run_live

    return run_live(
        args,
        "podgrouper",
        grouper_workers=args.workers,
        queue_label=args.queue_label_key,
        default_priorities=args.default_priorities_config_map,
        node_pool_label=args.node_pool_label_key,
    )
