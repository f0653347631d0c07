"""``kai explain``: why a pod or PodGroup is pending, with numbers, from the scheduler's core."""

from __future__ import annotations

import argparse
import sys

from kai.commands._cluster_source import add_source_options
from kai.commands._output import add_output_option

HELP = "say why a pod or PodGroup is pending, with numbers and what would unblock it"

EPILOG = """\
Runs the scheduler's next cycle on the cluster (or a snapshot file) with the scheduler's own
code, and reports for the job: the first pending reason and the others, in the taxonomy's
precedence (QueueDoesNotExist > QueueNotLeaf > OverLimit > NonPreemptibleOverQuota >
PreemptionDelayNotElapsed > WaitingForFairShare > GangDoesNotFit > TopologyDoesNotFit >
NoNodeFits > WaitingForEviction > Pipelined), the nodes failing each filter, the queue path
with quota, fair share, allocated and limit, the job's position in its queue, and what would
unblock it. Nothing is written.
Exit status: 0 explained, 1 no such pod or PodGroup, 2 bad usage or unreadable cluster or
snapshot."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "target",
        metavar="[NAMESPACE/]NAME",
        help="a PodGroup, or a pod (its PodGroup is explained)",
    )
    add_source_options(parser)
    add_output_option(parser)


def run(args: argparse.Namespace) -> int:
    from kai.commands._cluster_source import SourceError, load_source
    from kai.commands._output import render
    from kai.insight.explain import TargetError, explain, text

    try:
        snap = load_source(args)
    except SourceError as exc:
        print(f"kai explain: error: {exc}", file=sys.stderr)
        return 2
    try:
        found = explain(snap, args.target)
    except TargetError as exc:
        print(f"kai explain: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render(found.as_dict(), args.output, lambda: text(found)))
    return 0
