"""``kai plan``: what merging a change to the GitOps documents would do (for pull requests)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from kai.api.untrusted_files import FileLimits
from kai.commands._cluster_source import add_source_options
from kai.commands._limits import add_limit_options, limits_from
from kai.commands._output import add_output_option

HELP = "show what a change to the GitOps documents would do: Queue diff, fair share, workloads"

EPILOG = """\
Validates PATH (the checks of `kai validate`) and its base, compiles both (`kai render`) and
prints per Queue the field diff (added, changed, removed; a removed queue that still has child
queues or PodGroups is "prune blocked"). With a cluster (--kubeconfig or --snapshot) it also
gives each queue's fair share for the current demand before and after (the scheduler core's
division) and the workloads that would become reclaimable, over limit, or start. The base:
--base GIT-REF (a commit of PATH's repository, read from git under the same --max-* limits as
PATH, never from a folder of that name) or --base-dir PATH, else, when a cluster is given, the
Queues the repository owns there (those kai manages and those of the names PATH produces), else
HEAD. Markdown output fits a pull-request comment; --template FILE renders a team's own comment
(a sandboxed Jinja template, see docs/cli.md).
Exit status: 0 planned (with or without changes), 1 PATH or the base is invalid (the messages of
`kai validate`), 2 bad usage or unreadable path, cluster or git ref, or a template that cannot
be rendered (its file and line are named)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "path", metavar="PATH", help="the changed GitOps documents (file or directory)"
    )
    base = parser.add_mutually_exclusive_group()
    base.add_argument(
        "--base",
        metavar="GIT-REF",
        help="the git revision (branch, tag or commit of PATH's repository) PATH is compared "
        "with; never read as a path (default: the cluster's Queues that PATH owns with a cluster, "
        "else git HEAD)",
    )
    base.add_argument(
        "--base-dir",
        metavar="PATH",
        help="compare PATH with the documents of this file or directory instead of a git revision "
        "(default: none)",
    )
    add_source_options(parser, required=False)
    add_output_option(
        parser,
        formats=("markdown", "text", "json"),
        default="markdown",
        help="markdown: for a pull-request comment; text: for a terminal; json: for programs",
    )
    add_limit_options(parser)
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


def _compile(paths: list[str], what: str, limits: FileLimits) -> list[dict[str, Any]]:
    from kai.gitops.loader import UsageError
    from kai.gitops.validate import validate_paths

    try:
        report = validate_paths(paths, limits=limits)
    except UsageError as exc:
        raise _Usage(f"{what}: {exc}") from exc
    return _compiled(what, report)


def _compiled(what: str, report: Any) -> list[dict[str, Any]]:
    from kai.gitops.compile import compile_documents

    if not report.ok:
        raise _Invalid(what, report)
    return compile_documents(report.documents)


def _git_base(path: str, ref: str, limits: FileLimits) -> list[dict[str, Any]]:
    """``path`` as of the git revision ``ref``, validated and compiled.

    ``ref`` is only ever a revision of the repository holding ``path`` (never a path, never an
    option); its files are read from git under the same limits as the working tree."""
    from kai.api.untrusted_git import GitBlob, GitRefError, read_git_tree, resolve_commit
    from kai.gitops.loader import YAML_SUFFIXES, LoadResult, load_bytes
    from kai.gitops.problems import printable
    from kai.gitops.validate import validate

    shown = printable(ref)
    try:
        tree = resolve_commit(path, ref)
        loaded = LoadResult()
        for item in read_git_tree(tree, limits, YAML_SUFFIXES, single_file=os.path.isfile(path)):
            name = f"{ref}:{item.path}"
            if isinstance(item, GitBlob):
                load_bytes(loaded, name, item.data, limits)
            else:
                load_bytes(loaded, name, None, limits, refused=item.reason)
    except GitRefError as exc:
        raise _Usage(f"--base {shown}: {exc}") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise _Usage(f"--base {shown}: cannot run git: {exc}") from exc
    if not loaded.files:
        return []  # PATH is new in this change: an empty base
    return _compiled(f"{path} at {shown}", validate(loaded))


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~#"})


def for_people(plan: Any, *, markdown: bool) -> Any:
    """A copy of ``plan`` whose values written in the documents (a ``displayName``) can neither
    forge a line of the text output (control characters and line breaks are escaped) nor break
    the markdown table or add links or markup to a pull-request comment."""
    import copy
    import html

    from kai.gitops.problems import printable

    def safe(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        shown = printable(value)
        return html.escape(shown, quote=False).translate(_MARKDOWN_SPECIAL) if markdown else shown

    shown = copy.deepcopy(plan)
    for queue in shown.queues:
        for change in queue.changes:
            change.before, change.after = safe(change.before), safe(change.after)
    return shown


def run(args: argparse.Namespace) -> int:
    from kai.commands._cluster_source import SourceError, load_source, wanted
    from kai.commands._console import style_for
    from kai.commands._output import to_json
    from kai.gitops.problems import printable
    from kai.insight.plan import cluster_base, make_plan, markdown, text

    snap = None
    try:
        if wanted(args):
            snap = load_source(args)
        limits = limits_from(args)
        new = _compile([args.path], args.path, limits)
        if args.base_dir is not None:
            base = _compile([args.base_dir], args.base_dir, limits)
        elif args.base is None and snap is not None:
            base = cluster_base(snap.objects.get("queues", []), new)
        else:
            base = _git_base(args.path, args.base or "HEAD", limits)
    except SourceError as exc:
        print(f"kai plan: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except _Usage as exc:
        print(f"kai plan: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except _Invalid as exc:
        style = style_for(sys.stdout, args.color)
        for problem in exc.report.problems:
            print(style.problem(problem))
        print(
            f"kai plan: {printable(exc.what)}: {len(exc.report.errors)} validation error(s); "
            "no plan",
            file=sys.stderr,
        )
        return 1
    plan = make_plan(base, new, snap)
    if args.template is not None:
        from kai.insight.plan_template import TemplateError, render

        try:
            rendered = render(args.template, plan)
        except TemplateError as exc:
            print(f"kai plan: error: {printable(str(exc))}", file=sys.stderr)
            return 2
        sys.stdout.write(rendered)
        return 0
    if args.output != "json":
        plan = for_people(plan, markdown=args.output == "markdown")
    if args.output == "json":
        sys.stdout.write(to_json(plan.as_dict()))
    elif args.output == "text":
        sys.stdout.write(text(plan))
    else:
        sys.stdout.write(markdown(plan))
    return 0
