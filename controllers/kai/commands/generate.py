"""``kai generate``: regenerate schemas/ and manifests/crds/ from the API models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kai.commands._output import add_output_option, render

HELP = "regenerate schemas/ and manifests/crds/ from the API models"

EPILOG = """\
Prints one line per file written or removed (or, with --check, per stale, missing or orphaned
file). With -o json or -o yaml, one document instead:
  write: {ok: true, written: [PATH...], removed: [PATH...]}
  check: {ok, stale: [PATH...], missing: [PATH...], orphaned: [PATH...]}
Exit status: 0 done (or up to date with --check), 1 --check found out-of-date files, 2 bad
usage, 3 internal error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kai.api import generate

    parser.epilog = EPILOG
    generate.add_arguments(parser)
    add_output_option(parser)


def run(args: argparse.Namespace) -> int:
    from kai.api import generate

    root: Path | None = args.root if args.root is not None else generate.default_root()
    if root is None:
        print("kai generate: not inside a kai checkout; pass --root DIR", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"kai generate: {root} is not a directory", file=sys.stderr)
        return 2
    if args.check:
        drift = generate.check(root)
        document: dict[str, Any] = {
            "ok": not drift,
            "stale": drift.stale,
            "missing": drift.missing,
            "orphaned": drift.orphaned,
        }
        sys.stdout.write(render(document, args.output, lambda: _lines(drift.lines())))
        if drift:
            print(
                "kai generate: generated files are out of date; run `kai generate`", file=sys.stderr
            )
            return 1
        return 0
    touched = generate.write(root)
    written = [rel for rel in touched if (root / rel).exists()]
    removed = [rel for rel in touched if not (root / rel).exists()]

    def text() -> str:
        lines = [f"wrote {rel}" for rel in written] + [f"removed {rel}" for rel in removed]
        return _lines(lines or ["generated files are up to date"])

    sys.stdout.write(
        render({"ok": True, "written": written, "removed": removed}, args.output, text)
    )
    return 0


def _lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)
