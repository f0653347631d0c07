"""``kai binder``: bind pods as BindRequests ask, until SIGTERM (see kai.reconcilers.binder)."""

from __future__ import annotations

import argparse

HELP = "run the binder (BindRequest -> pod binding) against a Kubernetes API"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kai.commands.scheduler import add_live_arguments

    add_live_arguments(parser)
    parser.add_argument(
        "--workers", type=int, default=32, help="BindRequests handled at once (default: 32)"
    )


def run(args: argparse.Namespace) -> int:
    from kai.commands.scheduler import run_live

    return run_live(args, "binder", binder_workers=args.workers)
