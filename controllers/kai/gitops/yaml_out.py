"""A small deterministic YAML writer for the objects ``kai render`` emits.

The compiled objects are plain data (mappings, lists, strings, numbers, booleans, null), so a
writer of forty lines does the job faster than a general emitter and keeps the byte layout under
our control: block style, keys in insertion order, two-space indentation, list items at their
key's indentation, multi-line strings as literal blocks. A string is written plain only when
every YAML 1.1 and 1.2 reader reads it back as the same string; otherwise it is double-quoted
(JSON string syntax, which YAML accepts).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["dump_queue", "dump_yaml"]

_PLAIN = re.compile(r"^[A-Za-z0-9_/(][A-Za-z0-9_./,()@+=-]*( [A-Za-z0-9_./,()@+=-]+)*$")
_NUMBER_LIKE = re.compile(
    r"^[-+]?(\.[0-9_]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?$"
    r"|^0[xXoObB]"
    r"|^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"|^[-+]?\.(inf|Inf|INF|nan|NaN|NAN)$"
)
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", ""}


_TEXTS: dict[str, str] = {}  # strings already written (keys and repeated values), up to a bound
_MAX_TEXTS = 4096


def _scalar(value: Any) -> str:
    if type(value) is str:
        text = _TEXTS.get(value)
        if text is None:
            text = _string(value)
            if len(_TEXTS) >= _MAX_TEXTS:  # full of one-off strings: start again
                _TEXTS.clear()
            _TEXTS[value] = text
        return text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)  # YAML 1.1 wants a dot in a float: 1e-05 -> 1.0e-05
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    return _string(str(value))


def _string(text: str) -> str:
    if _PLAIN.match(text) and not _NUMBER_LIKE.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def _literal(text: str, indent: str) -> str | None:
    """A literal block (``|``) for a multi-line string, or None when one cannot hold it."""
    if text.startswith((" ", "\n")) or "\r" in text or "\t" in text:
        return None
    body = text[:-1] if text.endswith("\n") else text
    if body.endswith("\n"):
        return None
    header = "|" if text.endswith("\n") else "|-"
    lines = [f"{indent}{line}" if line else "" for line in body.split("\n")]
    return header + "\n" + "\n".join(lines) + "\n"


def _mapping(value: dict[Any, Any], indent: str, out: list[str]) -> None:
    for key, item in value.items():
        prefix = f"{indent}{_scalar(key)}:"
        _entry(prefix, item, indent, out)


def _entry(prefix: str, item: Any, indent: str, out: list[str]) -> None:
    kind = type(item)
    if kind is int or kind is float or (kind is str and "\n" not in item):
        out.append(f"{prefix} {_scalar(item)}\n")  # the usual case first
    elif isinstance(item, dict) and item:
        out.append(prefix + "\n")
        _mapping(item, indent + "  ", out)
    elif isinstance(item, list) and item:
        out.append(prefix + "\n")
        _sequence(item, indent, out)
    elif isinstance(item, dict):
        out.append(prefix + " {}\n")
    elif isinstance(item, list):
        out.append(prefix + " []\n")
    elif isinstance(item, str) and "\n" in item and (block := _literal(item, indent + "  ")):
        out.append(f"{prefix} {block}")
    else:
        out.append(f"{prefix} {_scalar(item)}\n")


def _sequence(value: list[Any], indent: str, out: list[str]) -> None:
    for item in value:
        if isinstance(item, dict) and item:
            first = len(out)
            _mapping(item, indent + "  ", out)
            out[first] = indent + "- " + out[first][len(indent) + 2 :]
        elif isinstance(item, list) and item:
            out.append(indent + "-\n")
            _sequence(item, indent + "  ", out)
        else:
            _entry(indent + "-", item, indent, out)


def dump_yaml(value: dict[str, Any]) -> str:
    """One YAML document (without a ``---`` line) for a mapping."""
    out: list[str] = []
    _mapping(value, "", out)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# The same bytes for the one shape that comes by the hundred thousand: a compiled Queue.


class _OtherShape(Exception):
    """The value is not of the shape :func:`dump_queue` writes: use the general writer."""


def _flat(value: Any) -> str:
    """The text after ``key: `` of a one-line scalar, as :func:`_entry` writes it."""
    kind = type(value)
    if kind is str:
        if "\n" in value:
            raise _OtherShape
        text = _TEXTS.get(value)
        return text if text is not None else _scalar(value)
    if kind is int:
        return str(value)
    if kind is float or kind is bool or value is None:
        return _scalar(value)
    raise _OtherShape


def _flat_mapping(value: Any, indent: str, out: list[str]) -> None:
    """A non-empty mapping of one-line scalars, one ``key: value`` line each."""
    if type(value) is not dict or not value:
        raise _OtherShape
    texts = _TEXTS
    for key, item in value.items():
        # a key is always written by _scalar (a cached string's text is that); an int value
        # by str()
        out.append(
            f"{indent}{texts.get(key) or _flat(key)}: "
            f"{str(item) if type(item) is int else _flat(item)}\n"
        )


_QUEUE_KEYS = ("apiVersion", "kind", "metadata", "spec")
_METADATA_KEYS = ("name", "labels", "annotations")


def dump_queue(value: dict[str, Any]) -> str:
    """:func:`dump_yaml` of a compiled Queue, byte for byte, with a fraction of the calls: the
    fixed keys are written as text and only the values go through the scalar rules. Any other
    shape (an empty mapping, a list, a multi-line string, ...) goes to :func:`dump_yaml`."""
    try:
        if tuple(value) != _QUEUE_KEYS:
            raise _OtherShape
        metadata, spec = value["metadata"], value["spec"]
        if type(metadata) is not dict or tuple(metadata) != _METADATA_KEYS:
            raise _OtherShape
        if type(spec) is not dict or not spec:
            raise _OtherShape
        out = [
            f"apiVersion: {_flat(value['apiVersion'])}\nkind: {_flat(value['kind'])}\n"
            f"metadata:\n  name: {_flat(metadata['name'])}\n  labels:\n"
        ]
        _flat_mapping(metadata["labels"], "    ", out)
        out.append("  annotations:\n")
        _flat_mapping(metadata["annotations"], "    ", out)
        out.append("spec:\n")
        for key, item in spec.items():
            if type(item) is dict:
                if not item:
                    raise _OtherShape
                out.append(f"  {_flat(key)}:\n")
                for inner, entry in item.items():
                    out.append(f"    {_TEXTS.get(inner) or _flat(inner)}:\n")
                    _flat_mapping(entry, "      ", out)
            else:
                out.append(f"  {_flat(key)}: {_flat(item)}\n")
        return "".join(out)
    except _OtherShape:
        return dump_yaml(value)
