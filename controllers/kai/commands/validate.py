"""``kai validate``: check GitOps documents (schema + hierarchy rules), change nothing."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kai.commands._limits import add_limit_options, limits_from
from kai.commands._output import add_output_option, render

HELP = "check GitOps documents (schema + hierarchy rules)"

EPILOG = """\
Every document under the paths is checked together, so parents and duplicate names across
files are caught. Problems go to standard output, one per line:
  FILE:LINE:COL: error: [rule-id] OBJECT FIELD-PATH: message
and a summary line to standard error. With -o json or -o yaml, one document instead:
  {ok, documents, problems: [{file, line, column, severity, rule, object, path, message}]}
Exit status: 0 no errors (warnings allowed), 1 errors found, 2 bad usage or unreadable path,
3 internal error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or directories (searched for *.yaml, *.yml); '-' reads standard input "
        "(default: the current directory)",
    )
    add_output_option(parser)
    parser.add_argument(
        "--capacity",
        metavar="FILE",
        help='YAML mapping of the cluster\'s capacity, e.g. {gpu: 512, cpu: "4096", '
        "memory: 32Ti}; top-level quotas above it are warned about (default: no check)",
    )
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
    add_limit_options(parser)


def run(args: argparse.Namespace) -> int:
    from kai.commands._console import style_for
    from kai.gitops.loader import UsageError
    from kai.gitops.problems import printable
    from kai.gitops.validate import validate_paths

    try:
        report = validate_paths(
            args.paths or ["."], capacity_file=args.capacity, limits=limits_from(args)
        )
    except UsageError as exc:
        print(f"kai validate: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.strict:
        report = report.strict()
    document: dict[str, Any] = {
        "ok": report.ok,
        "documents": len(report.documents),
        "problems": [p.as_json() for p in report.problems],
    }

    def text() -> str:
        style = style_for(sys.stdout, args.color)
        return "".join(style.problem(problem) + "\n" for problem in report.problems)

    sys.stdout.write(render(document, args.output, text))
    if args.output == "text":
        errors, warnings = len(report.errors), len(report.warnings)
        files, documents = len(report.files), len(report.documents)
        print(
            f"kai validate: {_count(documents, 'document')} in {_count(files, 'file')}: "
            f"{_count(errors, 'error')}, {_count(warnings, 'warning')}",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
