"""``kai render``: compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterable
from typing import Any

from kai.commands._limits import add_limit_options, limits_from
from kai.commands._output import add_output_option, to_json

HELP = "compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)"

EPILOG = """\
Validates first (the same checks as `kai validate`) and refuses to render when there is an
error; problems go to standard error. Output: a multi-document YAML stream on standard output
(-o yaml), a Kubernetes List (-o json), a table of the objects (-o text), or one file per object
(<kind>-<name>.yaml or .json) under --out DIR. Exit status: 0 rendered, 1 validation errors
(nothing written), 2 bad usage or unreadable path, 3 internal error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or directories; '-' reads standard input (default: the current directory)",
    )
    add_output_option(
        parser,
        default="yaml",
        help="yaml: the objects as a YAML stream; json: a v1 List of them; text: a table of "
        "their kinds and names",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="write one file per object into DIR (default: write to standard output)",
    )
    add_limit_options(parser)


def run(args: argparse.Namespace) -> int:
    from kai.commands._console import style_for
    from kai.gitops.compile import compile_documents, iter_compiled
    from kai.gitops.loader import UsageError
    from kai.gitops.validate import validate_paths

    if args.out is not None and args.output == "text":
        print("kai render: error: --out writes yaml or json files, not text", file=sys.stderr)
        return 2
    try:
        report = validate_paths(args.paths or ["."], limits=limits_from(args))
    except UsageError as exc:
        print(f"kai render: error: {exc}", file=sys.stderr)
        return 2
    style = style_for(sys.stderr, args.color)
    for problem in report.problems:
        print(style.problem(problem), file=sys.stderr)
    if not report.ok:
        print(
            f"kai render: {len(report.errors)} validation error(s); nothing rendered",
            file=sys.stderr,
        )
        return 1
    if args.out is None:
        sys.stdout.write(_stream(compile_documents(report.documents), args.output, args.color))
        return 0
    # One object at a time: 100,000 Queues never sit in memory together.
    return _write_files(iter_compiled(report.documents), args.out, args.output)


def _stream(objects: list[dict[str, Any]], output: str, colour: str) -> str:
    from kai.gitops.compile import dump_objects

    if output == "yaml":
        return dump_objects(objects)
    if output == "json":
        return to_json({"apiVersion": "v1", "kind": "List", "items": objects})
    from kai.commands._console import style_for, table

    rows = [
        [str(o["kind"]), str(o["metadata"].get("namespace") or "-"), str(o["metadata"]["name"])]
        for o in objects
    ]
    lines = table(["KIND", "NAMESPACE", "NAME"], rows, style_for(sys.stdout, colour))
    return "".join(line + "\n" for line in lines)


def _write_files(objects: Iterable[dict[str, Any]], out: str, output: str) -> int:
    """Write each object to its own file in ``out``. A new ``out`` is built as a staging
    directory beside it and renamed into place at the end (files created directly: a crash
    leaves ``out`` absent, never half-written); an existing one gets each file through a
    temporary name renamed over the old file."""
    import tempfile

    from kai.gitops.compile import dump_object, object_file_name

    if os.path.exists(out) and not os.path.isdir(out):
        print(f"kai render: error: {out} exists and is not a directory", file=sys.stderr)
        return 2
    staging: str | None = None
    written = 0
    try:
        if not os.path.lexists(out):
            parent = os.path.dirname(os.path.abspath(out))
            os.makedirs(parent, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.rendering-", dir=parent)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(staging, 0o777 & ~umask)  # as os.makedirs would have made it
            directory = staging
        else:
            directory = os.path.realpath(out)
        for obj in objects:
            if output == "json":
                name = object_file_name(obj).removesuffix(".yaml") + ".json"
                text = to_json(obj)
            else:
                name, text = object_file_name(obj), dump_object(obj)
            target = _confined(directory, name)
            if target is None:
                print(
                    f"kai render: error: refusing to write {name!r}: the path leaves {out}",
                    file=sys.stderr,
                )
                _discard(staging)
                return 3
            _write_one(target, text.encode("utf-8"), direct=staging is not None)
            written += 1
        if staging is not None:
            os.rename(staging, out)  # fails if another process made a non-empty out meanwhile
            staging = None
    except OSError as exc:
        _discard(staging)
        print(f"kai render: error: cannot write to {out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"kai render: wrote {written} files to {out}", file=sys.stderr)
    return 0


def _write_one(target: str, data: bytes, *, direct: bool) -> None:
    """``data`` into ``target``: created directly in a private staging directory, else through
    ``target.tmp`` renamed over it. O_NOFOLLOW: a link planted at the name written to is
    refused, never written through."""
    path = target if direct else f"{target}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    handle = os.open(path, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view) :]
    finally:
        os.close(handle)
    if not direct:
        os.replace(path, target)


def _discard(staging: str | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)


def _confined(directory: str, name: str) -> str | None:
    """``directory/name`` when ``name`` is one plain file name that stays in ``directory``.

    Names are checked by validation already (DNS-1123); this guards the write itself."""
    if not name or name != os.path.basename(name) or name in (".", "..") or "\x00" in name:
        return None
    # One path component under a directory already resolved: it cannot lead elsewhere (a link
    # found at the name is replaced by the rename, not written through).
    return os.path.join(directory, name)
