"""``-o/--output text|json|yaml``: one option and one renderer for every command that prints data.

A command builds one document (plain dicts, lists, strings, numbers) and a text form for people;
:func:`render` turns the document into JSON or YAML. The JSON and YAML of a command carry the same
document, with keys in the order the command builds them, and are described in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

FORMATS = ("text", "json", "yaml")


def add_output_option(
    parser: argparse.ArgumentParser,
    *,
    formats: Sequence[str] = FORMATS,
    default: str = "text",
    help: str = "text: for people; json, yaml: one document for programs (see docs/cli.md)",
) -> None:
    """Add ``-o/--output FORMAT`` with ``formats`` (the same choices everywhere by default)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=tuple(formats),
        default=default,
        metavar="{" + ",".join(formats) + "}",
        help=help,
    )


def to_json(document: Any, *, compact: bool = False) -> str:
    """JSON followed by a newline: indented by two spaces, or on one line with ``compact``.

    Non-ASCII characters are written as they are (UTF-8), never as ``\\u`` escapes.
    """
    if compact:
        import orjson

        return orjson.dumps(document).decode("utf-8") + "\n"
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def to_yaml(document: Any) -> str:
    """Block-style YAML, keys in the document's order, no line folding."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text: str = yaml.dump(
        document,
        Dumper=dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,
    )
    return text


def render(
    document: Any,
    output: str,
    text: Callable[[], str],
    *,
    compact_json: bool = False,
) -> str:
    """The command's output in format ``output``; ``text`` is called only for ``text``."""
    if output == "json":
        return to_json(document, compact=compact_json)
    if output == "yaml":
        return to_yaml(document)
    if output == "text":
        return text()
    raise ValueError(f"unknown output format {output!r}; expected one of {', '.join(FORMATS)}")
