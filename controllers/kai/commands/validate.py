"""``kai validate``: check GitOps documents (schema + hierarchy rules), change nothing."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "check GitOps documents (schema + hierarchy rules)"

EPILOG = """\
Every document under the paths is checked together, so parents and duplicate names across
files are caught. Problems go to standard output, one per line:
  FILE:LINE:COL: error: [rule-id] OBJECT FIELD-PATH: message
Exit status: 0 no errors (warnings allowed), 1 errors found, 2 bad usage or unreadable path,
3 internal error.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or directories (searched for *.yaml, *.yml); '-' reads standard input "
        "(default: the current directory)",
    )
    parser.add_argument(
        "--output", "-o", choices=("text", "json"), default="text", help="output format"
    )
    parser.add_argument(
        "--capacity",
        metavar="FILE",
        help='YAML mapping of the cluster\'s capacity, e.g. {gpu: 512, cpu: "4096", '
        "memory: 32Ti}; top-level quotas above it are warned about",
    )
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Exception as exc:  # never a traceback: an internal error is exit 3
        print(f"kai validate: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3


def _run(args: argparse.Namespace) -> int:
    from kai.gitops.loader import UsageError
    from kai.gitops.validate import validate_paths

    try:
        report = validate_paths(args.paths or ["."], capacity_file=args.capacity)
    except UsageError as exc:
        print(f"kai validate: error: {exc}", file=sys.stderr)
        return 2
    if args.strict:
        report = report.strict()
    if args.output == "json":
        body = {
            "ok": report.ok,
            "documents": len(report.documents),
            "problems": [p.as_json() for p in report.problems],
        }
        sys.stdout.write(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    else:
        for problem in report.problems:
            sys.stdout.write(problem.text() + "\n")
        errors, warnings = len(report.errors), len(report.warnings)
        files = len(report.files)
        documents = len(report.documents)
        print(
            f"kai validate: {documents} document{'s' if documents != 1 else ''} in {files} "
            f"file{'s' if files != 1 else ''}: {errors} error{'s' if errors != 1 else ''}, "
            f"{warnings} warning{'s' if warnings != 1 else ''}",
            file=sys.stderr,
        )
    sys.stdout.flush()
    return 0 if report.ok else 1
