"""``kai render``: compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)"

EPILOG = """\
Validates first (the same checks as `kai validate`) and refuses to render when there is an
error. Output: a multi-document YAML stream on standard output, or one file per object
(<kind>-<name>.yaml) under --out DIR. Exit status: 0 rendered, 1 validation errors (nothing
written), 2 bad usage or unreadable path, 3 internal error.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or directories; '-' reads standard input (default: the current directory)",
    )
    parser.add_argument("--out", metavar="DIR", help="write one file per object into DIR")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Exception as exc:  # never a traceback: an internal error is exit 3
        print(f"kai render: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3


def _run(args: argparse.Namespace) -> int:
    from kai.gitops.compile import compile_documents, dump_object, dump_objects, object_file_name
    from kai.gitops.loader import UsageError
    from kai.gitops.validate import validate_paths

    try:
        report = validate_paths(args.paths or ["."])
    except UsageError as exc:
        print(f"kai render: error: {exc}", file=sys.stderr)
        return 2
    for problem in report.problems:
        print(problem.text(), file=sys.stderr)
    if not report.ok:
        print(
            f"kai render: {len(report.errors)} validation error(s); nothing rendered",
            file=sys.stderr,
        )
        return 1
    objects = compile_documents(report.documents)
    if args.out is None:
        sys.stdout.write(dump_objects(objects))
        sys.stdout.flush()
        return 0
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        print(f"kai render: error: {args.out} exists and is not a directory", file=sys.stderr)
        return 2
    rendered = [(object_file_name(obj), dump_object(obj)) for obj in objects]
    try:
        os.makedirs(args.out, exist_ok=True)
        for name, text in rendered:
            target = os.path.join(args.out, name)
            temporary = f"{target}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, target)
    except OSError as exc:
        print(f"kai render: error: cannot write to {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"kai render: wrote {len(rendered)} files to {args.out}", file=sys.stderr)
    return 0
