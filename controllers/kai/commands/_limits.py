"""``--max-file-size``, ``--max-total-size``, ``--max-yaml-aliases``, ``--max-yaml-expansion``,
``--max-yaml-documents``: the limits on untrusted input shared by ``kai validate``, ``kai render``,
``kai plan`` and (the first three) ``kai simulate`` (docs/security.md)."""

from __future__ import annotations

import argparse

from kai.api.untrusted_files import DEFAULT_LIMITS, FileLimits, parse_size


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be above 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return value


def _mib(size: int) -> str:
    return f"{size // 2**20}Mi" if size % 2**20 == 0 else str(size)


def add_limit_options(
    parser: argparse.ArgumentParser, *, total: bool = True, gitops: bool = True
) -> None:
    """The ``--max-*`` flags; ``gitops``: also those only the GitOps loader applies."""
    parser.add_argument(
        "--max-file-size",
        type=_size,
        default=DEFAULT_LIMITS.max_file_bytes,
        metavar="SIZE",
        help="a larger file (or standard input) is refused with an [io] error; bytes, or with "
        f"a suffix: 512Ki, 16Mi, 1Gi (default: {_mib(DEFAULT_LIMITS.max_file_bytes)})",
    )
    if total:
        parser.add_argument(
            "--max-total-size",
            type=_size,
            default=DEFAULT_LIMITS.max_total_bytes,
            metavar="SIZE",
            help="files beyond this many bytes read in all are refused with an [io] error "
            f"(default: {_mib(DEFAULT_LIMITS.max_total_bytes)})",
        )
    parser.add_argument(
        "--max-yaml-aliases",
        type=_count,
        default=DEFAULT_LIMITS.max_alias_nodes,
        metavar="N",
        help="values a YAML file may add by repeating anchors through aliases (*name); more "
        f"is refused, which stops alias bombs (default: {DEFAULT_LIMITS.max_alias_nodes})",
    )
    if not gitops:
        return
    parser.add_argument(
        "--max-yaml-expansion",
        type=_size,
        default=DEFAULT_LIMITS.max_alias_bytes,
        metavar="SIZE",
        help="bytes of text (values and keys) a YAML file may add by repeating anchors "
        "through aliases; more is refused, which stops a large value repeated many times "
        f"(default: {_mib(DEFAULT_LIMITS.max_alias_bytes)})",
    )
    parser.add_argument(
        "--max-yaml-documents",
        type=_count,
        default=DEFAULT_LIMITS.max_documents,
        metavar="N",
        help="YAML documents (empty ones too) one file may hold; reading stops at the first "
        f"one over (default: {DEFAULT_LIMITS.max_documents})",
    )


def limits_from(args: argparse.Namespace) -> FileLimits:
    return FileLimits(
        max_file_bytes=args.max_file_size,
        max_total_bytes=getattr(args, "max_total_size", DEFAULT_LIMITS.max_total_bytes),
        max_alias_nodes=args.max_yaml_aliases,
        max_alias_bytes=getattr(args, "max_yaml_expansion", DEFAULT_LIMITS.max_alias_bytes),
        max_documents=getattr(args, "max_yaml_documents", DEFAULT_LIMITS.max_documents),
    )
