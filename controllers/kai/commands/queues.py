"""``kai queues``: the queue tree with quota, fair share, allocated and pending demand."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kai.commands._cluster_source import add_source_options
from kai.commands._output import add_output_option

if TYPE_CHECKING:
    from kai.commands._console import Style
    from kai.insight.figures import QueueRow

HELP = "show the queue tree: quota, fair share, allocated, pending demand per resource"

EPILOG = """\
The figures are the scheduler core's fair-share division at the start of a cycle on the
cluster (or a snapshot file): quota, fair share, allocated, pending demand (requested minus
allocated), limit and over-quota weight, per resource (-o json: gpu, cpu millicores, memory
bytes). --watch repeats every --interval seconds until Ctrl-C (only with --kubeconfig).
Exit status: 0 shown, 2 bad usage or unreadable cluster or snapshot, 130 interrupted."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_source_options(parser)
    add_output_option(parser)
    parser.add_argument("--watch", action="store_true", help="show again every --interval seconds")
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="time between two views with --watch (default: 2)",
    )


def run(args: argparse.Namespace) -> int:
    import functools
    import threading

    from kai.commands._cluster_source import SourceError, load_source
    from kai.commands._console import style_for
    from kai.commands._output import render
    from kai.insight.queues import document, rows
    from kai.reconcilers.cluster_snapshot import rfc3339

    if args.watch and args.snapshot is not None:
        print("kai queues: error: --watch reads a cluster, not a snapshot", file=sys.stderr)
        return 2
    if args.interval <= 0:
        print("kai queues: error: --interval must be above 0", file=sys.stderr)
        return 2
    style = style_for(sys.stdout, args.color)
    stop = threading.Event()
    status = None
    if args.watch:
        from kai.commands._signals import stop_on_signals

        status = stop_on_signals(stop)
    while True:
        try:
            snap = load_source(args)
        except SourceError as exc:
            print(f"kai queues: error: {exc}", file=sys.stderr)
            return 2
        found = rows(snap.build())
        captured = rfc3339(snap.captured_at)
        out = render(document(found, captured), args.output, functools.partial(text, found, style))
        if args.watch and args.output == "text" and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write(out)
        sys.stdout.flush()
        if not args.watch or stop.wait(args.interval):
            return status() if status is not None else 0


def text(found: list[QueueRow], style: Style) -> str:
    """GPU columns in full, cpu cores and memory as fair share / allocated; -o json has every
    resource in full."""
    from kai.commands._console import table
    from kai.insight.figures import amount

    header = ["QUEUE", "PRIO", "GPU-QUOTA", "GPU-FAIR", "GPU-ALLOC", "GPU-PENDING", "GPU-LIMIT"]
    header += ["GPU-WEIGHT", "CPU-FAIR/ALLOC", "MEM-FAIR/ALLOC"]
    body = []
    for row in found:
        line = ["  " * row.depth + row.name, str(row.priority)]
        line += [
            amount("gpu", row.quota.get("gpu", 0.0)),
            amount("gpu", row.fair_share.get("gpu", 0.0)),
            amount("gpu", row.allocated.get("gpu", 0.0)),
            amount("gpu", row.pending.get("gpu", 0.0)),
            amount("gpu", row.limit.get("gpu", -1.0)),
            amount("gpu", row.weight.get("gpu", 1.0)),
        ]
        for r in ("cpu", "memory"):
            fair, alloc = row.fair_share.get(r, 0.0), row.allocated.get(r, 0.0)
            line.append(f"{amount(r, fair)}/{amount(r, alloc)}")
        body.append(line)
    if not body:
        return "no queues\n"
    return "\n".join(table(header, body, style)) + "\n"
