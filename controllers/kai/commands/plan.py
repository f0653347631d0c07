"""``kai plan``: what merging a change to the GitOps documents would do (for pull requests)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Any

from kai.commands._cluster_source import add_source_options
from kai.commands._output import add_output_option

HELP = "show what a change to the GitOps documents would do: Queue diff, fair share, workloads"

EPILOG = """\
Validates PATH (the checks of `kai validate`) and its base, compiles both (`kai render`) and
prints per Queue the field diff (added, changed, removed; a removed queue that still has child
queues or PodGroups is "prune blocked"). With a cluster (--kubeconfig or --snapshot) it also
gives each queue's fair share for the current demand before and after (the scheduler core's
division) and the workloads that would become reclaimable, over limit, or start. The base:
--base PATH or GIT-REF (a commit of PATH's repository), else, when a cluster is given, the
Queues the repository owns there (those kai manages and those of the names PATH produces),
else HEAD. Markdown output fits a pull-request comment; --template FILE renders a team's own
comment (a sandboxed Jinja template, see docs/cli.md).
Exit status: 0 planned (with or without changes), 1 PATH or the base is invalid (the messages of
`kai validate`), 2 bad usage or unreadable path, cluster or git ref, or a template that cannot
be rendered (its file and line are named)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "path", metavar="PATH", help="the changed GitOps documents (file or directory)"
    )
    parser.add_argument(
        "--base",
        metavar="PATH|GIT-REF",
        help="what PATH is compared with (default: the cluster's Queues that PATH owns with a "
        "cluster, else git HEAD)",
    )
    add_source_options(parser, required=False)
    add_output_option(
        parser,
        formats=("markdown", "text", "json"),
        default="markdown",
        help="markdown: for a pull-request comment; text: for a terminal; json: for programs",
    )
    parser.add_argument(
        "--template",
        metavar="FILE",
        help="render the plan with this Jinja template instead of --output (sandboxed; the "
        "data it receives is in docs/cli.md) (default: none, --output)",
    )


class _Invalid(Exception):
    def __init__(self, what: str, report: Any) -> None:
        super().__init__(what)
        self.what = what
        self.report = report


class _Usage(Exception):
    pass


def _compile(paths: list[str], what: str) -> list[dict[str, Any]]:
    from kai.gitops.compile import compile_documents
    from kai.gitops.loader import UsageError
    from kai.gitops.validate import validate_paths

    try:
        report = validate_paths(paths)
    except UsageError as exc:
        raise _Usage(f"{what}: {exc}") from exc
    if not report.ok:
        raise _Invalid(what, report)
    return compile_documents(report.documents)


def _git_base(path: str, ref: str, workdir: str) -> str:
    """Extract ``path`` as of ``ref`` into ``workdir``; the extracted path."""
    where = path if os.path.isdir(path) else os.path.dirname(path) or "."

    def git(cwd: str, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", cwd, *argv], capture_output=True, check=False)

    top = git(where, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise _Usage(f"--base {ref}: {path} is not in a git repository and {ref} is no path")
    root = top.stdout.decode().strip()
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    archive = git(root, "archive", "--format=tar", ref, "--", rel)
    extracted = os.path.join(workdir, rel)
    if archive.returncode != 0 and git(root, "rev-parse", "--verify", "-q", ref).returncode == 0:
        os.makedirs(extracted, exist_ok=True)  # PATH is new in this change: an empty base
        return extracted
    if archive.returncode != 0:
        message = archive.stderr.decode(errors="replace").strip().splitlines()
        raise _Usage(f"--base {ref}: {message[-1] if message else 'git archive failed'}")
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(workdir, filter="data")
    return extracted


def run(args: argparse.Namespace) -> int:
    from kai.commands._cluster_source import SourceError, load_source, wanted
    from kai.commands._console import style_for
    from kai.commands._output import to_json
    from kai.insight.plan import cluster_base, make_plan, markdown, text

    snap = None
    try:
        if wanted(args):
            snap = load_source(args)
        new = _compile([args.path], args.path)
        with tempfile.TemporaryDirectory(prefix="kai-plan-") as tmp:
            if args.base is not None and os.path.exists(args.base):
                base = _compile([args.base], args.base)
            elif args.base is None and snap is not None:
                base = cluster_base(snap.objects.get("queues", []), new)
            else:
                ref = args.base or "HEAD"
                base = _compile([_git_base(args.path, ref, tmp)], f"{args.path} at {ref}")
    except SourceError as exc:
        print(f"kai plan: error: {exc}", file=sys.stderr)
        return 2
    except _Usage as exc:
        print(f"kai plan: error: {exc}", file=sys.stderr)
        return 2
    except _Invalid as exc:
        style = style_for(sys.stdout, args.color)
        for problem in exc.report.problems:
            print(style.problem(problem))
        print(
            f"kai plan: {exc.what}: {len(exc.report.errors)} validation error(s); no plan",
            file=sys.stderr,
        )
        return 1
    plan = make_plan(base, new, snap)
    if args.template is not None:
        from kai.insight.plan_template import TemplateError, render

        try:
            rendered = render(args.template, plan)
        except TemplateError as exc:
            print(f"kai plan: error: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(rendered)
    elif args.output == "json":
        sys.stdout.write(to_json(plan.as_dict()))
    elif args.output == "text":
        sys.stdout.write(text(plan))
    else:
        sys.stdout.write(markdown(plan))
    return 0
