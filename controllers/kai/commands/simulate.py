"""``kai simulate SCENARIO [-o text|json|yaml] [--check]``: run one scenario file through the
scheduler core (the format: docs/scenario-format.md; the command: docs/cli.md).

Exit status: 0 ran (and matched with ``--check``), 1 ``--check`` found mismatches, 2 bad usage
or an invalid file or an action the core does not implement yet, 3 an internal error (nothing is
printed on standard output then).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kai.api.untrusted_files import DEFAULT_LIMITS, FileLimits
from kai.commands._limits import add_limit_options, limits_from
from kai.commands._output import add_output_option, render

if TYPE_CHECKING:
    from kai.commands._console import Style
    from kai.scenario import SessionFn

HELP = "run a scheduling scenario file through the scheduler core"

EPILOG = """\
-o text prints a table per round for people; -o json exactly one JSON object on one line
({id, mode, rounds: [{result: {tasks, nodes}, next?: {tasks, nodes}}]}); -o yaml the same
document as YAML. With --check, mismatches are listed after the table (text) or on standard
error (json, yaml). Exit status: 0 ran (and matched), 1 --check found mismatches, 2 bad usage,
an invalid file or an action this build does not implement, 3 internal error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "scenario",
        metavar="SCENARIO.yaml",
        nargs="?",
        help="the scenario file (YAML or JSON) (default: none; --snapshot instead)",
    )
    parser.add_argument(
        "--snapshot",
        metavar="FILE",
        help="run the scheduler's next cycle on a cluster snapshot (`kai snapshot`) instead of "
        "a scenario: its binds, pipelined pods, evictions and pending reasons (default: off)",
    )
    add_output_option(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the outcome with the file's expected block (exit 1 on a mismatch)",
    )
    add_limit_options(parser, total=False, gitops=False)


@dataclass(frozen=True)
class Outcome:
    """What one run prints and returns; ``unsupported_action`` names an action the core refused."""

    code: int
    stdout: str
    stderr: str
    unsupported_action: str | None = None


def _internal(message: str, debug: bool) -> Outcome:
    """Exit 3 with one line; the traceback of the exception being handled only with ``debug``."""
    details = traceback.format_exc() if debug else ""
    hint = "" if debug else " (run with --debug or KAI_DEBUG=1 for the traceback)"
    return Outcome(3, "", f"{details}kai simulate: internal error {message}{hint}\n")


def execute(
    path: str,
    *,
    output: str = "text",
    check: bool = False,
    session: SessionFn | None = None,
    debug: bool = False,
    limits: FileLimits = DEFAULT_LIMITS,
) -> Outcome:
    """Run one scenario file; nothing is printed (the caller prints ``Outcome``).

    ``session`` replaces the core's ``run_session`` (tests); by default the core is used.
    """
    from kai.scenario import (
        CoreOutputError,
        ScenarioError,
        build_report,
        load_scenario,
        render_text,
        report_document,
        run_scenario,
    )
    from kai.scheduler.errors import UnsupportedActionError

    try:
        scenario = load_scenario(path, require_expected=check, limits=limits)
    except ScenarioError as exc:
        return Outcome(2, "", "".join(line + "\n" for line in exc.lines))
    except Exception as exc:
        return _internal(f"reading {path}: {type(exc).__name__}: {exc}", debug)
    try:
        if session is None:
            from kai.scheduler.session import run_session

            session = run_session
        rounds = run_scenario(scenario, session)
        report = build_report(scenario, rounds, check=check)
        # The JSON form is the scenario contract's: one object on one line.
        text = render(
            report_document(report), output, lambda: render_text(report), compact_json=True
        )
    except UnsupportedActionError as exc:
        action = str(getattr(exc, "action", "") or "")
        message = f"kai simulate: {path}: {exc}; the scenario cannot run with this build\n"
        return Outcome(2, "", message, unsupported_action=action or None)
    except CoreOutputError as exc:
        return _internal(f"running {path}: {exc}", debug)
    except Exception as exc:
        return _internal(
            f"in the scheduler core running {path}: {type(exc).__name__}: {exc}", debug
        )
    if not check:
        return Outcome(0, text, "")
    assert report.mismatches is not None
    code = 1 if report.mismatches else 0
    if output != "text":
        stderr = "".join(m.line() + "\n" for m in report.mismatches)
        return Outcome(code, text, stderr)
    return Outcome(code, text, "")


def colour_report(text: str, style: Style) -> str:
    """The text report with table headers bold, rows and lines that differ red, the verdict
    green or red."""
    if not style.enabled:
        return text
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        stripped = body.lstrip()
        if stripped.startswith(("TASK ", "NODE ")):
            body = style.bold(body)
        elif stripped.startswith("!") or body.startswith(("MISMATCH", "CHECK FAIL")):
            body = style.severity(body, "error")
        elif body.startswith("CHECK PASS"):
            body = style.severity(body, "ok")
        lines.append(body + line[len(line.rstrip("\n")) :])
    return "".join(lines)


def run_snapshot(args: argparse.Namespace) -> int:
    """``--snapshot FILE``: the decisions of one cycle on the snapshot, with pending reasons."""
    from kai.insight.decisions import document, text
    from kai.insight.explain import run as run_cycle
    from kai.reconcilers.cluster_snapshot import SnapshotFormatError, load
    from kai.scheduler.errors import UnsupportedActionError

    try:
        built, result = run_cycle(load(args.snapshot))
    except SnapshotFormatError as exc:
        print(f"kai simulate: error: {exc}", file=sys.stderr)
        return 2
    except UnsupportedActionError as exc:
        print(f"kai simulate: {args.snapshot}: {exc}", file=sys.stderr)
        return 2
    doc = document(built, result)
    sys.stdout.write(render(doc, args.output, lambda: text(doc)))
    return 0


def run(args: argparse.Namespace) -> int:
    from kai.commands._console import style_for

    if (args.scenario is None) == (args.snapshot is None):
        print("kai simulate: error: give a SCENARIO.yaml or --snapshot FILE (one)", file=sys.stderr)
        return 2
    if args.snapshot is not None:
        if args.check:
            print("kai simulate: error: --check needs a scenario file", file=sys.stderr)
            return 2
        return run_snapshot(args)
    outcome = execute(
        args.scenario,
        output=args.output,
        check=args.check,
        debug=args.debug,
        limits=limits_from(args),
    )
    if outcome.stdout:
        stdout = outcome.stdout
        if args.output == "text":
            stdout = colour_report(stdout, style_for(sys.stdout, args.color))
        sys.stdout.write(stdout)
        sys.stdout.flush()
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    return outcome.code
