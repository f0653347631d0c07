"""Read GitOps files into plain data that remembers where every key and value was written.

``load_paths`` takes files, directories (searched recursively for ``*.yaml`` / ``*.yml``,
skipping names that start with ``.``) and ``-`` for standard input (named ``<stdin>``). Each
YAML document becomes a :class:`Document`: its data as plain ``dict``/``list``/scalars (what
JSON Schema validation and the models want) plus a table from field path to the 1-based line and
column of the value and of the key. File-level trouble (unreadable, not UTF-8, binary, empty,
malformed YAML, tabs used for indentation) and repeated mapping keys come back as problems, never
as exceptions.

The YAML is parsed with ruamel.yaml's compose API (YAML 1.2: ``yes`` is a string, not a boolean),
and the data is built here from the node graph so that no position is lost and every duplicate
key is reported at its second occurrence.
"""

from __future__ import annotations

import io
import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kai.gitops.problems import Problem, Source

__all__ = [
    "Document",
    "FieldPath",
    "LoadResult",
    "UsageError",
    "field_path",
    "format_path",
    "load_paths",
    "load_text",
]

FieldPath = tuple[str | int, ...]
STDIN_NAME = "<stdin>"
YAML_SUFFIXES = (".yaml", ".yml")


class UsageError(Exception):
    """A path that does not exist or holds no YAML file: the command exits 2."""


@dataclass
class Document:
    """One YAML document with the positions of its values and keys."""

    file: str
    index: int  # 0-based position of the document in its file
    data: Any
    values: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)

    @property
    def api_version(self) -> str | None:
        value = self.data.get("apiVersion") if isinstance(self.data, dict) else None
        return value if isinstance(value, str) else None

    @property
    def kind(self) -> str | None:
        value = self.data.get("kind") if isinstance(self.data, dict) else None
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str | None:
        if not isinstance(self.data, dict):
            return None
        meta = self.data.get("metadata")
        value = meta.get("name") if isinstance(meta, dict) else None
        return value if isinstance(value, str) else None

    @property
    def object_name(self) -> str:
        """``Kind/name`` as problems show it (``?`` for a part that is missing)."""
        return f"{self.kind or '?'}/{self.name or '?'}"

    def value_at(self, path: FieldPath) -> Source:
        """Where the value at ``path`` is written (the nearest written ancestor if it is not)."""
        return self._lookup(self.values, path)

    def key_at(self, path: FieldPath) -> Source:
        """Where the key of the mapping entry at ``path`` is written (else the value's place)."""
        if path in self.keys:
            line, column = self.keys[path]
            return Source(self.file, line, column)
        return self._lookup(self.values, path)

    def has(self, path: FieldPath) -> bool:
        return path in self.values

    def _lookup(self, table: dict[FieldPath, tuple[int, int]], path: FieldPath) -> Source:
        for cut in range(len(path), -1, -1):
            found = table.get(path[:cut])
            if found is not None:
                return Source(self.file, found[0], found[1])
        return Source(self.file, 1, 1)


@dataclass
class LoadResult:
    documents: list[Document] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def format_path(path: Iterable[str | int]) -> str:
    """``("spec", "queues", 0, "name")`` -> ``spec.queues[0].name``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def field_path(path: FieldPath) -> str:
    """A field path as problems show it: relative to ``spec`` (``queues[0].quota.gpu``)."""
    if path and path[0] == "spec":
        path = path[1:]
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# --------------------------------------------------------------------------------------------
# Finding files


def _display(path: str) -> str:
    return os.path.normpath(path)


def _walk(directory: str) -> Iterator[str]:
    """YAML files under ``directory`` in a stable order, hidden names skipped."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and name.endswith(YAML_SUFFIXES):
                yield os.path.join(root, name)


def load_paths(paths: Iterable[str], *, stdin: io.BufferedIOBase | None = None) -> LoadResult:
    """Load every document under ``paths``. Raises :class:`UsageError` for a missing path."""
    result = LoadResult()
    seen: set[str] = set()
    for given in paths:
        if given == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            _load_bytes(result, STDIN_NAME, stream.read())
            continue
        if os.path.isdir(given):
            found = sorted(_walk(given))
            if not found:
                raise UsageError(f"{given}: no YAML files (*.yaml, *.yml) under this directory")
            for file_path in found:
                shown = _display(file_path)
                if shown in seen:
                    continue
                seen.add(shown)
                try:
                    with open(file_path, "rb") as handle:
                        raw = handle.read()
                except OSError as exc:
                    result.files.append(shown)
                    result.problems.append(
                        Problem.at(Source(shown, 1, 1), "io", f"cannot read file: {exc.strerror}")
                    )
                    continue
                _load_bytes(result, shown, raw)
        elif os.path.exists(given):
            shown = _display(given)
            if shown in seen:
                continue
            seen.add(shown)
            try:
                with open(given, "rb") as handle:
                    raw = handle.read()
            except OSError as exc:
                raise UsageError(f"{given}: cannot read: {exc.strerror}") from exc
            _load_bytes(result, shown, raw)
        else:
            raise UsageError(f"{given}: no such file or directory")
    return result


def load_text(text: str | bytes, name: str = STDIN_NAME) -> LoadResult:
    """Load one file's content (tests and the webhook use this)."""
    result = LoadResult()
    _load_bytes(result, name, text.encode() if isinstance(text, str) else text)
    return result


# --------------------------------------------------------------------------------------------
# Decoding and parsing


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def _load_bytes(result: LoadResult, name: str, raw: bytes) -> None:
    result.files.append(name)

    def fail(line: int, column: int, message: str) -> None:
        result.problems.append(Problem.at(Source(name, line, column), "yaml", message))

    if b"\x00" in raw:
        offset = raw.index(b"\x00")
        line = raw.count(b"\n", 0, offset) + 1
        fail(
            line,
            offset - (raw.rfind(b"\n", 0, offset) + 1) + 1,
            "binary file (it contains NUL bytes); expected UTF-8 YAML text",
        )
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        fail(
            line,
            column,
            f"not UTF-8: byte 0x{raw[exc.start]:02x} cannot be decoded; save the file as UTF-8",
        )
        return
    _parse(result, name, text, fail)


def _parse(result: LoadResult, name: str, text: str, fail: Any) -> None:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    yaml = YAML(typ="safe", pure=True)  # the compose API; no comment gathering (faster)
    count = 0
    try:
        for index, node in enumerate(yaml.compose_all(io.StringIO(text))):
            if _is_empty(node):
                continue
            count += 1
            builder = _Builder(name)
            data = builder.build(node, ())
            document = Document(name, index, data, builder.values, builder.keys)
            for path, first, second in builder.duplicates:
                key = path[-1]
                result.problems.append(
                    Problem.at(
                        Source(name, second[0], second[1]),
                        "duplicate-key",
                        f"key {key!r} is repeated (first written at line {first[0]}); "
                        "YAML keys must be unique within a mapping",
                        object=document.object_name if isinstance(data, dict) else None,
                        path=field_path(path),
                    )
                )
            result.documents.append(document)
    except ReaderError as exc:
        line, column = _line_col(text, exc.position)
        fail(
            line, column, f"character {exc.character!r} is not allowed in YAML text ({exc.reason})"
        )
        return
    except MarkedYAMLError as exc:
        _report_syntax(text, exc, fail)
        return
    except YAMLError as exc:  # pragma: no cover - ruamel raises the marked kinds above
        fail(1, 1, f"malformed YAML: {exc}")
        return
    except RecursionError:
        fail(1, 1, "malformed YAML: the document is nested too deeply to read")
        return
    if count == 0:
        fail(1, 1, "empty file: it holds no YAML document")


def _is_empty(node: Any) -> bool:
    from ruamel.yaml.nodes import ScalarNode

    return (
        isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null" and node.value == ""
    )


def _report_syntax(text: str, exc: Any, fail: Any) -> None:
    problem = str(exc.problem or "malformed YAML")
    context = str(exc.context or "")
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    lines = text.split("\n")
    # A tab in the indentation is the usual cause of a scanner error on or before that line.
    for number, content in enumerate(lines[:line], start=1):
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        if "\t" in indent:
            fail(
                number,
                indent.index("\t") + 1,
                "tab character used for indentation; YAML indents with spaces only",
            )
            return
    if "quoted scalar" in context and exc.context_mark is not None:
        start = exc.context_mark
        fail(start.line + 1, start.column + 1, "unclosed quote: this quoted string never ends")
        return
    if exc.context_mark is not None and exc.problem_mark is not None and context:
        started = exc.context_mark
        fail(
            line,
            column,
            f"malformed YAML: {problem} ({context} started at line {started.line + 1})",
        )
        return
    fail(line, column, f"malformed YAML: {problem}")


class _Builder:
    """Turns a composed node graph into plain data, recording positions and duplicate keys."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.values: dict[FieldPath, tuple[int, int]] = {}
        self.keys: dict[FieldPath, tuple[int, int]] = {}
        self.duplicates: list[tuple[FieldPath, tuple[int, int], tuple[int, int]]] = []
        self._depth = 0

    def build(self, node: Any, path: FieldPath) -> Any:
        from ruamel.yaml.nodes import MappingNode, SequenceNode

        self.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        self._depth += 1
        try:
            if self._depth > 200:  # an alias loop or absurd nesting: stop, keep what we have
                return None
            if isinstance(node, MappingNode):
                out: dict[Any, Any] = {}
                for key_node, value_node in node.value:
                    key = self._key(key_node)
                    key_pos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                    child: FieldPath = (*path, key)
                    if key in out:
                        self.duplicates.append((child, self.keys.get(child, key_pos), key_pos))
                        continue
                    self.keys[child] = key_pos
                    out[key] = self.build(value_node, child)
                return out
            if isinstance(node, SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            return _scalar(node.tag, node.value, getattr(node, "style", None))
        finally:
            self._depth -= 1

    def _key(self, node: Any) -> str:
        from ruamel.yaml.nodes import ScalarNode

        if isinstance(node, ScalarNode):
            value = _scalar(str(node.tag), str(node.value), getattr(node, "style", None))
            return value if isinstance(value, str) else str(node.value)
        return f"<{type(node).__name__}>"


_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}


def _scalar(tag: str, value: str, style: Any) -> Any:
    """YAML 1.2 core schema scalars; anything unusual stays a string."""
    if style in ("'", '"', "|", ">"):
        return value
    if tag.endswith(":null"):
        return None
    if tag.endswith(":bool"):
        return value in _TRUE if value in _TRUE | _FALSE else value
    if tag.endswith(":int"):
        try:
            text = value.replace("_", "")
            if text.lstrip("+-").startswith(("0x", "0X")):
                return int(text, 16)
            if text.lstrip("+-").startswith(("0o", "0O")):
                return int(text.replace("0o", "").replace("0O", ""), 8)
            return int(text, 10)
        except ValueError:
            return value
    if tag.endswith(":float"):
        lowered = value.lower().replace("_", "")
        if lowered in (".inf", "+.inf"):
            return math.inf
        if lowered == "-.inf":
            return -math.inf
        if lowered == ".nan":
            return math.nan
        try:
            return float(lowered)
        except ValueError:
            return value
    return value
