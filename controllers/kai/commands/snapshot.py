"""``kai snapshot``: write everything the scheduler reads from a cluster into one file."""

from __future__ import annotations

import argparse
import sys

HELP = "capture what the scheduler reads from a cluster into one snapshot file"

EPILOG = """\
Lists nodes, pods, PodGroups, Queues, BindRequests, Topologies, PriorityClasses and the
scheduler ConfigMap, and writes them as one versioned JSON document (kind ClusterSnapshot,
formatVersion 1; docs/explain.md). Secrets are never read; pods lose their environment,
commands, arguments and volumes, every object its managedFields. Read it back with
`kai simulate --snapshot`, `kai explain --snapshot`, `kai queues --snapshot`, `kai plan
--snapshot`. Nothing is written to the cluster. A running `kai scheduler` writes one on SIGUSR1
(see --snapshot-dir). Exit status: 0 written, 2 bad usage or the cluster cannot be read."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the cluster (default: in-cluster config, then $KUBECONFIG)",
    )
    parser.add_argument(
        "-o",
        "--out",
        metavar="FILE",
        help="write the snapshot to FILE (default: standard output)",
    )
    parser.add_argument(
        "--scheduler-name",
        default="kai-scheduler",
        help="recorded in the snapshot: the scheduler whose pods count (default: kai-scheduler)",
    )
    parser.add_argument(
        "--config-map",
        default="kai-scheduler/kai-scheduler-config",
        metavar="NAMESPACE/NAME",
        help="the scheduler's rendered ConfigMap (default: kai-scheduler/kai-scheduler-config)",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from kai.commands._cluster_source import SourceError, capture_cluster

    try:
        snap = capture_cluster(args.kubeconfig, args.scheduler_name, args.config_map)
    except SourceError as exc:
        print(f"kai snapshot: error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        try:
            snap.write(args.out)
        except OSError as exc:
            print(f"kai snapshot: error: {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(json.dumps(snap.to_document(), indent=1) + "\n")
    counts = ", ".join(f"{len(v)} {k}" for k, v in snap.objects.items())
    print(f"kai snapshot: {counts}", file=sys.stderr)
    for note in snap.notes:
        print(f"kai snapshot: note: {note}", file=sys.stderr)
    return 0
