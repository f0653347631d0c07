"""Reading a scenario file into plain Python data, with source positions available on demand.

Small files are YAML: they are composed with PyYAML's C loader, which keeps a line/column mark on
every node, so a repeated key is caught where it is written and any later problem can be located
by walking the node tree along its field path. Large generated files are JSON: they are parsed
with a fast JSON parser and only re-read as YAML (JSON is YAML) when a problem must be located.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from kai.api.untrusted_files import DEFAULT_LIMITS, FileLimits, UntrustedFileError, read_untrusted

#: a field path: mapping keys and 0-based list indexes, from the document root
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldProblem:
    """One reason why a file is invalid.

    ``path`` names the offending field. The position reported is that of the value at ``locate``
    (default: ``path``; a missing key is located at the mapping that lacks it), or of the key when
    ``at_key`` is set (an unknown key), unless ``mark`` gives an explicit (line, column).
    """

    path: Path
    message: str
    at_key: bool = False
    mark: tuple[int, int] | None = None
    locate: Path | None = None


def format_path(path: Path) -> str:
    """``jobs[2].tasks[0].request.gpuFraction``; the document root is ``(document)``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"


class ScenarioError(Exception):
    """A scenario file is unreadable or invalid; ``lines`` are the ready-to-print messages."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class Document:
    """The parsed file: plain data plus what is needed to turn a field path into a position."""

    def __init__(self, filename: str, text: str, data: Any, root: yaml.Node | None) -> None:
        self.filename = filename
        self.text = text
        self.data = data
        self._root = root
        self._composed = root is not None
        self.problems: list[FieldProblem] = []

    def _root_node(self) -> yaml.Node | None:
        if not self._composed:
            self._composed = True
            try:
                self._root = yaml.compose(self.text, Loader=yaml.CSafeLoader)
            except yaml.YAMLError:
                self._root = None
        return self._root

    def position(self, problem: FieldProblem) -> tuple[int, int]:
        """1-based (line, column) of a problem; (1, 1) when it cannot be located."""
        if problem.mark is not None:
            return problem.mark
        node = self._root_node()
        if node is None:
            return (1, 1)
        path = problem.path if problem.locate is None else problem.locate
        for index, part in enumerate(path):
            last = index == len(path) - 1
            child = _child(node, part, want_key=last and problem.at_key)
            if child is None:
                break
            node = child
        return (node.start_mark.line + 1, node.start_mark.column + 1)

    def format(self, problem: FieldProblem) -> str:
        line, column = self.position(problem)
        return f"{self.filename}:{line}:{column}: {format_path(problem.path)}: {problem.message}"


_scalar_constructor = yaml.constructor.SafeConstructor()
_scalar_functions: dict[Any, Any] = yaml.constructor.SafeConstructor.yaml_constructors


def _scalar_value(node: yaml.ScalarNode) -> Any:
    """The Python value of a scalar node, by its resolved tag (YAML 1.1 core types)."""
    function = _scalar_functions.get(node.tag)
    if function is None:
        return node.value  # an explicit unknown tag: keep the text
    return function(_scalar_constructor, node)


def _child(node: yaml.Node, part: str | int, *, want_key: bool) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        return node.value[part] if 0 <= part < len(node.value) else None
    if isinstance(node, yaml.MappingNode):
        found: yaml.Node | None = None
        for key_node, value_node in node.value:  # the last occurrence wins, as in the data
            if isinstance(key_node, yaml.ScalarNode) and _same_key(key_node, part):
                found = key_node if want_key else value_node
        return found
    return None


def _same_key(key_node: yaml.ScalarNode, part: str | int) -> bool:
    try:
        value = _scalar_value(key_node)
    except (yaml.YAMLError, ValueError, TypeError):
        return False
    return bool(value == part and type(value) is type(part))


def _mark(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _AliasLimit(Exception):
    def __init__(self, node: yaml.Node) -> None:
        super().__init__("alias limit")
        self.mark = _mark(node)


class _Builder:
    """Turns a composed node tree into dicts, lists and scalars, noting repeated keys.

    A node met again is an alias (``*name``) being expanded; at most ``max_alias_nodes`` values
    are built that way, so an alias bomb stops early instead of filling the memory."""

    def __init__(self, max_alias_nodes: int = DEFAULT_LIMITS.max_alias_nodes) -> None:
        self.problems: list[FieldProblem] = []
        self._seen: set[int] = set()
        self._left = max_alias_nodes

    def build(self, node: yaml.Node, path: Path) -> Any:
        if id(node) in self._seen:
            self._left -= 1
            if self._left < 0:
                raise _AliasLimit(node)
        else:
            self._seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problems.append(
                        FieldProblem(
                            path, "a mapping key must be a plain string", mark=_mark(key_node)
                        )
                    )
                    continue
                key = _scalar_value(key_node)
                if isinstance(key, float) and math.isnan(key):
                    key = key_node.value
                try:
                    hash(key)
                except TypeError:
                    key = key_node.value
                if key in out:
                    self.problems.append(
                        FieldProblem(
                            (*path, key),
                            f"key {key_node.value!r} is repeated in this mapping",
                            mark=_mark(key_node),
                        )
                    )
                out[key] = self.build(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        try:
            return _scalar_value(node)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            self.problems.append(FieldProblem(path, f"unreadable value: {exc}", mark=_mark(node)))
            return None


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return out


def _looks_like_json(filename: str, text: str) -> bool:
    return filename.endswith(".json") or text.lstrip()[:1] in ("{", "[")


def read_document(filename: str, limits: FileLimits = DEFAULT_LIMITS) -> Document:
    """Read and parse one file. Raises :class:`ScenarioError` when it cannot be parsed at all;
    a repeated key is recorded in ``Document.problems`` (the data keeps the last value).

    The file is read only when it is a regular file (a link only when it stays in the file's
    own folder) of at most ``limits.max_file_bytes``; see :mod:`kai.api.untrusted_files`."""
    try:
        raw = read_untrusted(filename, os.path.dirname(filename) or ".", limits.max_file_bytes)
    except UntrustedFileError as exc:
        raise ScenarioError([f"{filename}:1:1: (document): [io] {exc}"]) from None
    except OSError as exc:
        raise ScenarioError(
            [f"{filename}:1:1: (document): cannot read the file: {exc.strerror or exc}"]
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ScenarioError(
            [f"{filename}:{line}:{column}: (document): the file is not valid UTF-8"]
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if _looks_like_json(filename, text):
        document = _read_json(filename, text)
        if document is not None:
            return document
    return _read_yaml(filename, text, limits.max_alias_nodes)


def _read_json(filename: str, text: str) -> Document | None:
    """Fast path for JSON text; None when the text is not strict JSON (then it is read as YAML)."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs_without_repeats)
    except _RepeatedKey:
        return None  # the YAML reader locates the repeated key
    except ValueError:
        return None
    return Document(filename, text, data, None)


def _read_yaml(filename: str, text: str, max_alias_nodes: int) -> Document:
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.CSafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        reason = exc.problem or exc.context or "syntax error"
        raise ScenarioError(
            [f"{filename}:{line}:{column}: (document): not valid YAML: {reason}"]
        ) from None
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{filename}:1:1: (document): not valid YAML: {exc}"]) from None
    if not nodes or (
        isinstance(nodes[0], yaml.ScalarNode)
        and nodes[0].tag == "tag:yaml.org,2002:null"
        and nodes[0].value == ""
    ):
        raise ScenarioError([f"{filename}:1:1: (document): the file is empty"])
    if len(nodes) > 1:
        line, column = _mark(nodes[1])
        raise ScenarioError(
            [f"{filename}:{line}:{column}: (document): one scenario per file, found a second"]
        )
    root = nodes[0]
    builder = _Builder(max_alias_nodes)
    try:
        data = builder.build(root, ())
    except _AliasLimit as exc:
        line, column = exc.mark
        raise ScenarioError(
            [
                f"{filename}:{line}:{column}: (document): YAML aliases (*name) repeat the value "
                f"written here so often that the file expands to more than {max_alias_nodes} "
                "extra values (--max-yaml-aliases; an alias bomb?)"
            ]
        ) from None
    document = Document(filename, text, data, root)
    document.problems.extend(builder.problems)
    return document
