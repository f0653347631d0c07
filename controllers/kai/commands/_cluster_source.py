"""``--kubeconfig FILE | --snapshot FILE``: where ``kai explain``, ``kai queues`` and ``kai plan``
read the cluster from. A snapshot file is read as it is; a kubeconfig is read once, through the
same capture as ``kai snapshot`` (nothing is written to the cluster)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kai.reconcilers.cluster_snapshot import ClusterSnapshot


class SourceError(Exception):
    """The cluster or the snapshot file cannot be read (the message says which and why)."""


def add_source_options(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    group = parser.add_mutually_exclusive_group(required=False)
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read the cluster through this kubeconfig (default: in-cluster config, then "
        "$KUBECONFIG, unless --snapshot is given)"
        if required
        else "read the cluster through this kubeconfig (default: no cluster)",
    )
    group.add_argument(
        "--snapshot",
        metavar="FILE",
        help="read a snapshot file written by `kai snapshot` (default: read the cluster)"
        if required
        else "read a snapshot file written by `kai snapshot` (default: no cluster)",
    )
    parser.add_argument(
        "--scheduler-name",
        default="kai-scheduler",
        help="with --kubeconfig: the scheduler whose pods count (default: kai-scheduler)",
    )
    parser.add_argument(
        "--config-map",
        default="kai-scheduler/kai-scheduler-config",
        metavar="NAMESPACE/NAME",
        help="with --kubeconfig: the scheduler's rendered ConfigMap "
        "(default: kai-scheduler/kai-scheduler-config)",
    )


def wanted(args: argparse.Namespace) -> bool:
    return args.kubeconfig is not None or args.snapshot is not None


def load_source(args: argparse.Namespace) -> ClusterSnapshot:
    """The snapshot of ``--snapshot``, or a fresh capture through ``--kubeconfig``."""
    from kai.reconcilers.cluster_snapshot import SnapshotFormatError, load

    if args.snapshot is not None:
        try:
            return load(args.snapshot)
        except SnapshotFormatError as exc:
            raise SourceError(str(exc)) from exc
    return capture_cluster(args.kubeconfig or None, args.scheduler_name, args.config_map)


def capture_cluster(
    kubeconfig: str | None, scheduler_name: str, config_map: str
) -> ClusterSnapshot:
    from kai.kube.client import ConfigError, Kube, KubeError
    from kai.reconcilers.cluster_snapshot import capture

    if "/" not in config_map:
        raise SourceError(f"--config-map {config_map!r}: expected NAMESPACE/NAME")
    try:
        kube = Kube.from_kubeconfig(kubeconfig)
    except ConfigError as exc:
        raise SourceError(str(exc)) from exc
    try:
        return capture(kube, scheduler_name=scheduler_name, config_map=config_map)
    except KubeError as exc:
        raise SourceError(f"cannot read the cluster: {exc}") from exc
    finally:
        kube.close()
