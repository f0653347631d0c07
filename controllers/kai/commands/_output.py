"""``-o/--output text|json|yaml``: one option and one renderer for every command that prints data.

A command builds one document (plain dicts, lists, strings, numbers) and a text form for people;
:func:`render` turns the document into JSON or YAML. The JSON and YAML of a command carry the same
document, with keys in the order the command builds them, and are described in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
import re
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


# Characters JSON may carry raw inside a string that a terminal or a log must not receive raw:
# DEL, the C1 controls, the Unicode line separators, the bidirectional overrides, and lone
# surrogates (a byte of a file name that is not UTF-8, as os.fsdecode gives it), which cannot
# even be written as UTF-8. They can only occur inside strings, where \\uXXXX means the same.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069]")


def _json_escape(text: str) -> str:
    if _JSON_UNSAFE.search(text) is None:
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def to_json(document: Any, *, compact: bool = False) -> str:
    """JSON followed by a newline: indented by two spaces, or on one line with ``compact``.

    Non-ASCII characters are written as they are (UTF-8), never as ``\\u`` escapes, except
    control characters, line separators, bidirectional overrides and the bytes of a file name
    that is not UTF-8 (``\\udcXX`` for byte ``XX``, Python's surrogateescape: ``json.loads``
    then ``os.fsencode`` give the name back)."""
    if compact:
        import orjson

        try:
            return _json_escape(orjson.dumps(document).decode("utf-8")) + "\n"
        except TypeError:  # a lone surrogate: orjson refuses it, json writes it
            compact_text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
            return _json_escape(compact_text) + "\n"
    return _json_escape(json.dumps(document, indent=2, ensure_ascii=False)) + "\n"


def to_yaml(document: Any) -> str:
    """Block-style YAML, keys in the document's order, no line folding.

    Control characters and line breaks inside strings are escaped by the YAML emitter (in a
    double-quoted scalar); a document holding a bidirectional override is written with every
    non-ASCII character escaped. A file name that is not UTF-8 holds lone surrogates
    (``\\udcXX`` for byte ``XX``, Python's surrogateescape), which libyaml cannot write: such a
    document is written by PyYAML's own emitter, as ``\\uDCXX`` escapes."""
    import yaml

    options: dict[str, Any] = {
        "sort_keys": False,
        "default_flow_style": False,
        "allow_unicode": True,
        "width": 1_000_000,
    }
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    try:
        text: str = yaml.dump(document, Dumper=dumper, **options)
    except UnicodeEncodeError:
        text = yaml.dump(document, Dumper=yaml.SafeDumper, **options)
    if _BIDI.search(text) is not None:  # YAML calls them printable: escape every non-ASCII
        text = yaml.dump(document, Dumper=yaml.SafeDumper, **{**options, "allow_unicode": False})
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
