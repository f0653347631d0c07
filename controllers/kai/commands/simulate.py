"""``kai simulate SCENARIO [--output text|json] [--check]``: run one scenario file through the
scheduler core (the format: docs/scenario-format.md).

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

if TYPE_CHECKING:
    from kai.scenario import SessionFn

HELP = "run a scheduling scenario file through the scheduler core"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", metavar="SCENARIO.yaml", help="the scenario file (YAML or JSON)"
    )
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: a table for people (default); json: exactly one JSON object",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the outcome with the file's expected block (exit 1 on a mismatch)",
    )


@dataclass(frozen=True)
class Outcome:
    """What one run prints and returns; ``unsupported_action`` names an action the core refused."""

    code: int
    stdout: str
    stderr: str
    unsupported_action: str | None = None


def execute(
    path: str, *, output: str = "text", check: bool = False, session: SessionFn | None = None
) -> Outcome:
    """Run one scenario file; nothing is printed (the caller prints ``Outcome``).

    ``session`` replaces the core's ``run_session`` (tests); by default the core is used.
    """
    from kai.scenario import (
        CoreOutputError,
        ScenarioError,
        build_report,
        load_scenario,
        render_json,
        render_text,
        run_scenario,
    )
    from kai.scheduler.errors import UnsupportedActionError

    try:
        scenario = load_scenario(path, require_expected=check)
    except ScenarioError as exc:
        return Outcome(2, "", "".join(line + "\n" for line in exc.lines))
    except Exception:
        details = traceback.format_exc()
        return Outcome(3, "", f"kai simulate: internal error reading {path}\n{details}")
    try:
        if session is None:
            from kai.scheduler.session import run_session

            session = run_session
        rounds = run_scenario(scenario, session)
        report = build_report(scenario, rounds, check=check)
        text = render_json(report) if output == "json" else render_text(report)
    except UnsupportedActionError as exc:
        action = str(getattr(exc, "action", "") or "")
        message = f"kai simulate: {path}: {exc}; the scenario cannot run with this build\n"
        return Outcome(2, "", message, unsupported_action=action or None)
    except CoreOutputError as exc:
        return Outcome(3, "", f"kai simulate: internal error running {path}: {exc}\n")
    except Exception:
        details = traceback.format_exc()
        return Outcome(
            3, "", f"kai simulate: internal error in the scheduler core running {path}\n{details}"
        )
    if not check:
        return Outcome(0, text, "")
    assert report.mismatches is not None
    code = 1 if report.mismatches else 0
    if output == "json":
        stderr = "".join(m.line() + "\n" for m in report.mismatches)
        return Outcome(code, text, stderr)
    return Outcome(code, text, "")


def run(args: argparse.Namespace) -> int:
    outcome = execute(args.scenario, output=args.output, check=args.check)
    try:
        if outcome.stdout:
            sys.stdout.write(outcome.stdout)
            sys.stdout.flush()
        if outcome.stderr:
            sys.stderr.write(outcome.stderr)
            sys.stderr.flush()
    except BrokenPipeError:  # e.g. `kai simulate ... | head`: the reader left, nothing to report
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return outcome.code
