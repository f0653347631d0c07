"""Read GitOps files into plain data that remembers where every key and value was written.

``load_paths`` takes files, directories (searched recursively for ``*.yaml`` / ``*.yml``,
skipping names that start with ``.``) and ``-`` for standard input (named ``<stdin>``). Each
YAML document becomes a :class:`Document`: its data as plain ``dict``/``list``/scalars (what
JSON Schema validation and the models want) plus a table from field path to the 1-based line and
column of the value and of the key. File-level trouble (unreadable, not UTF-8, binary, empty,
malformed YAML, tabs used for indentation) and repeated mapping keys come back as problems, never
as exceptions.

The YAML is parsed by libyaml (PyYAML's C parser: linear time, nesting depth bounded) with the
YAML 1.2 core schema's scalars (``yes`` is a string, not a boolean), and the data is built here
from the node graph so that no position is lost, every duplicate key is reported at its second
occurrence, and aliases expand only within ``--max-yaml-aliases`` (values) and
``--max-yaml-expansion`` (bytes of text). Merge keys (``<<``) follow YAML 1.1. A file holds at
most ``--max-yaml-documents`` documents, a document at most :data:`MAX_DEPTH` levels of nesting
(deeper is a ``document`` error, never a shorter document). A plain file (see
``_NOT_FAST``) is read by the fast loader instead, about 15 times faster and without positions:
its document finds them by reading the file again with libyaml when a problem cites one.
Files are read through :mod:`kai.api.untrusted_files` (regular files only, links kept inside
the root, size limits).
"""

from __future__ import annotations

import errno
import functools
import io
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kai.api.untrusted_files import (
    DEFAULT_LIMITS,
    FileLimits,
    UntrustedFileError,
    inside,
    read_stream,
    read_untrusted,
)
from kai.gitops.problems import Problem, Source

__all__ = [
    "Document",
    "FieldPath",
    "LoadResult",
    "UsageError",
    "field_path",
    "format_path",
    "load_bytes",
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
    """One YAML document with the positions of its values and keys.

    A document read by the fast loader keeps its file's ``text`` instead of the two tables: the
    places it hands out (:meth:`value_at`, :meth:`key_at`) are found only when a problem cites
    one, by reading that one file again with the full parser (:meth:`position`)."""

    file: str
    index: int  # 0-based position of the document in its file
    data: Any
    values: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)
    text: str | None = field(default=None, repr=False, compare=False)

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

    def order(self) -> tuple[str, int]:
        """Sorts documents as the places of their starts do (by file, then within the file)."""
        return (self.file, self.index)

    def value_at(self, path: FieldPath) -> Source:
        """Where the value at ``path`` is written (the nearest written ancestor if it is not)."""
        if self.text is not None:
            return Source.lazy(self.file, self, path, (), False)
        return self._lookup(self.values, path)

    def key_at(self, path: FieldPath) -> Source:
        """Where the key of the mapping entry at ``path`` is written (else the value's place)."""
        if self.text is not None:
            return Source.lazy(self.file, self, path, (), True)
        if path in self.keys:
            line, column = self.keys[path]
            return Source(self.file, line, column)
        return self._lookup(self.values, path)

    def value_in(self, base: FieldPath, rel: FieldPath) -> Source:
        """:meth:`value_at` of ``base + rel``; a place found later shares ``base``."""
        if self.text is not None:
            return Source.lazy(self.file, self, base, rel, False)
        return self._lookup(self.values, (*base, *rel))

    def key_in(self, base: FieldPath, rel: FieldPath) -> Source:
        """:meth:`key_at` of ``base + rel``."""
        if self.text is not None:
            return Source.lazy(self.file, self, base, rel, True)
        return self.key_at((*base, *rel))

    def has(self, path: FieldPath) -> bool:
        if self.text is None:
            return path in self.values
        data = self.data  # the fast loader's data: every value in it is written in the file
        for part in path:
            written = (isinstance(data, dict) and isinstance(part, str) and part in data) or (
                isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
            )
            if not written:
                return False
            data = data[part]
        return True

    def position(self, path: FieldPath, of_key: bool) -> tuple[int, int]:
        """Line and column of the value (``of_key``: of the key) at ``path``."""
        if self.text is not None:
            self._read_positions()
        if of_key and path in self.keys:
            return self.keys[path]
        found = self.values.get(path)
        if found is not None:
            return found
        for cut in range(len(path) - 1, -1, -1):
            found = self.values.get(path[:cut])
            if found is not None:
                return found
        return (1, 1)

    def _read_positions(self) -> None:
        """Parse the file again with the full parser, for the tables of this document."""
        text, self.text = self.text, None
        again = LoadResult()
        _parse(again, self.file, text or "", lambda line, column, message: None)
        for other in again.documents:
            if other.index == self.index:
                self.values, self.keys = other.values, other.keys

    def _lookup(self, table: dict[FieldPath, tuple[int, int]], path: FieldPath) -> Source:
        found = table.get(path)
        if found is not None:  # the usual case: the value is written
            return Source(self.file, found[0], found[1])
        for cut in range(len(path) - 1, -1, -1):
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


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _walk(result: LoadResult, directory: str) -> Iterator[str]:
    """YAML files under ``directory`` in a stable order, hidden names skipped.

    A folder that cannot be listed is an ``io`` problem (never silently skipped). Links to
    folders are not descended into: a folder inside the root is read where it really is, and
    one outside is not read at all (an ``io`` problem naming the link)."""

    def unreadable(exc: OSError) -> None:
        shown = _display(exc.filename or directory)
        result.files.append(shown)
        result.problems.append(
            Problem.at(Source(shown, 1, 1), "io", f"cannot read folder: {exc.strerror}")
        )

    root = os.path.realpath(directory)
    for folder, dirs, files in os.walk(directory, onerror=unreadable):
        kept = []
        for name in sorted(dirs):
            if _hidden(name):
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path):
                if not inside(os.path.realpath(path), root):
                    shown = _display(path)
                    result.files.append(shown)
                    result.problems.append(
                        Problem.at(
                            Source(shown, 1, 1),
                            "io",
                            f"{shown} is a symbolic link to a place outside {directory}; links "
                            "are followed only within the directory given, so it was not read",
                        )
                    )
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            if not _hidden(name) and name.endswith(YAML_SUFFIXES):
                yield os.path.join(folder, name)


def load_paths(
    paths: Iterable[str],
    *,
    stdin: io.BufferedIOBase | None = None,
    limits: FileLimits = DEFAULT_LIMITS,
) -> LoadResult:
    """Load every document under ``paths``. Raises :class:`UsageError` for a missing path.

    Only regular files are read, links only when they stay inside the directory given (for a
    file given by name: inside its own folder), and no more than ``limits`` allow; every file
    refused is an ``io`` problem naming it."""
    result = LoadResult()
    seen: set[str] = set()
    budget = _Budget(limits.max_total_bytes)
    for given in paths:
        if given == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            try:
                raw = read_stream(stream, STDIN_NAME, min(limits.max_file_bytes, budget.left))
            except UntrustedFileError as exc:
                _io_problem(result, STDIN_NAME, str(exc))
                continue
            budget.take(len(raw))
            _load_bytes(result, STDIN_NAME, raw, limits)
            continue
        if os.path.isdir(given):
            before = len(result.problems)
            found = sorted(_walk(result, given))
            if not found and len(result.problems) == before:
                raise UsageError(f"{given}: no YAML files (*.yaml, *.yml) under this directory")
            for file_path in found:
                _load_file(result, seen, budget, file_path, given, limits, in_directory=True)
        elif os.path.lexists(given):
            _load_file(
                result,
                seen,
                budget,
                given,
                os.path.dirname(given) or ".",
                limits,
                in_directory=False,
            )
        else:
            raise UsageError(f"{given}: no such file or directory")
    return result


class _Budget:
    """What is left of ``--max-total-size``."""

    def __init__(self, total: int) -> None:
        self.left = total
        self.total = total
        self.exhausted = False

    def take(self, size: int) -> None:
        self.left -= size


def _io_problem(result: LoadResult, shown: str, message: str) -> None:
    result.files.append(shown)
    result.problems.append(Problem.at(Source(shown, 1, 1), "io", message))


def _load_file(
    result: LoadResult,
    seen: set[str],
    budget: _Budget,
    path: str,
    root: str,
    limits: FileLimits,
    *,
    in_directory: bool,
) -> None:
    shown = _display(path)
    if shown in seen:
        return
    seen.add(shown)
    if budget.exhausted:
        return
    try:
        raw = read_untrusted(path, root, limits.max_file_bytes)
    except UntrustedFileError as exc:
        _io_problem(result, shown, str(exc))
        return
    except OSError as exc:
        if not in_directory and exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UsageError(f"{path}: no such file or directory") from exc
        _io_problem(result, shown, f"cannot read file: {exc.strerror}")
        return
    if len(raw) > budget.left:
        budget.exhausted = True
        _io_problem(
            result,
            shown,
            f"the files read so far and {shown} hold more than the {budget.total} bytes allowed "
            "in all (--max-total-size); it and the files after it were not read",
        )
        return
    budget.take(len(raw))
    _load_bytes(result, shown, raw, limits)


def load_text(
    text: str | bytes, name: str = STDIN_NAME, *, limits: FileLimits = DEFAULT_LIMITS
) -> LoadResult:
    """Load one file's content (tests and the webhook use this)."""
    result = LoadResult()
    _load_bytes(result, name, text.encode() if isinstance(text, str) else text, limits)
    return result


def load_bytes(
    result: LoadResult, name: str, raw: bytes | None, limits: FileLimits, *, refused: str = ""
) -> None:
    """Add one file read elsewhere (a git revision) to ``result``: its content ``raw``, or
    None with the reason it was ``refused`` (an ``io`` problem)."""
    if raw is None:
        _io_problem(result, name, refused)
    else:
        _load_bytes(result, name, raw, limits)


# --------------------------------------------------------------------------------------------
# Decoding and parsing


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def _load_bytes(result: LoadResult, name: str, raw: bytes, limits: FileLimits) -> None:
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
    data = _fast_data(text)
    if data is not None:
        result.documents.append(Document(name, 0, data, text=text))
        return
    _parse(result, name, text, fail, limits)


# The fast loader (yaml-rs, a YAML 1.2 parser in Rust: about 15x faster than libyaml through
# PyYAML, and it keeps no positions) takes only files in which it cannot differ from the full
# parser below: printable ASCII without tabs; no tags, anchors, aliases, directives, block
# scalars, escapes, complex keys or reserved indicators; no number spelled in a way the two
# read differently (0x / 0o / 0b prefixes, digits with '_', 1000-digit numbers); exactly one
# document, a mapping; every key a string. Anything else (and any file it refuses) goes to the
# full parser, which also reports every problem. The places of a fast-loaded document are found
# by parsing its file again, only when a problem cites one.
_NOT_FAST = re.compile(
    r"[^\n\x20-\x7e]|[!&*%|>\\?@`_]|[0-9]{1000}|(?<![A-Za-z0-9])0[xXoObB]"
    r"|(?:^|[\s\[{,]):\S|:[\[\]{},]|^\.\.\.|<<"
    # plain values YAML 1.1 tools read otherwise (booleans such as yes/on/n, octal 017)
    r"|(?:^[ \t]*-[ \t]|[:\[{,]|^)[ \t]*(?:[yYnN]|[yY]es|YES|[nN]o|NO|[oO]n|ON|[oO]ff|OFF)"
    r"[ \t]*(?:[,\]}#]|$)"
    r"|(?<![\w.])[-+]?0[0-9]",
    re.MULTILINE,
)
_MAX_FAST_DEPTH = 100
_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})


def _fast_data(text: str) -> dict[str, Any] | None:
    """The document of a plain single-document file, or None to take the full parser."""
    if text.count("---") > 1 or _NOT_FAST.search(text) is not None:
        return None  # several documents (or a stream of empty ones): the full parser
    try:
        import yaml_rs

        data = yaml_rs.loads(text, parse_datetime=False)
    except Exception:  # whatever it refuses, the full parser judges
        return None
    if type(data) is not dict:
        return None
    try:
        plain: dict[str, Any] = _plain(data, 0, {})
    except _NotPlain:
        return None
    return plain


class _NotPlain(Exception):
    pass


def _plain(value: Any, depth: int, keys: dict[str, str]) -> Any:
    """A copy of ``value`` whose keys are shared strings (thousands of queues write the same
    few keys: one string each saves a third of the memory), checking on the way that it holds
    only string keys, plain scalars and bounded nesting (what the full parser builds)."""
    kind = type(value)
    if kind is dict:
        if depth > _MAX_FAST_DEPTH:
            raise _NotPlain
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out[keys.setdefault(key, key)] = _plain(item, depth + 1, keys)
        return out
    if kind is list:
        if depth > _MAX_FAST_DEPTH:
            raise _NotPlain
        return [_plain(item, depth + 1, keys) for item in value]
    if kind not in _LEAF_TYPES:
        raise _NotPlain
    return value


@functools.cache
def _composer_class() -> Any:
    from yaml._yaml import CParser

    resolver = _resolver_class()

    class Composer(CParser, resolver):  # type: ignore[misc,valid-type]
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            resolver.__init__(self)

    return Composer


def _composer(text: str) -> Any:
    """libyaml's parser and composer (linear time, nesting bounded) with YAML 1.2 scalars."""
    return _composer_class()(text)


def _parse(
    result: LoadResult, name: str, text: str, fail: Any, limits: FileLimits = DEFAULT_LIMITS
) -> None:
    import yaml

    composer = _composer(text)
    count = 0
    index = 0
    budget = _Expansion(limits)
    try:
        while composer.check_node():
            if index >= limits.max_documents:
                mark = composer.peek_event().start_mark
                fail(
                    mark.line + 1,
                    mark.column + 1,
                    f"the file holds more than {limits.max_documents} YAML documents (empty ones "
                    "included; --max-yaml-documents); the file was not read further",
                )
                return
            node = composer.get_node()
            if node is None or _is_empty(node):
                index += 1
                continue
            count += 1
            builder = _Builder(name, budget)
            data = builder.build(node, ())
            document = Document(name, index, data, builder.values, builder.keys)
            index += 1
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
            _report_ambiguous(result, document, builder.ambiguous)
            result.documents.append(document)
    except _AliasLimit as exc:
        if exc.bytes:
            fail(
                exc.line,
                exc.column,
                f"YAML aliases (*name) repeat the values written here so often that the file "
                f"expands by more than {limits.max_alias_bytes} bytes of text "
                "(--max-yaml-expansion); the file was not read further",
            )
            return
        fail(
            exc.line,
            exc.column,
            f"YAML aliases (*name) repeat the value written here so often that the file "
            f"expands to more than {limits.max_alias_nodes} extra values (--max-yaml-aliases; "
            "an alias bomb?); the file was not read further",
        )
        return
    except _BadMerge as exc:
        fail(exc.line, exc.column, exc.message)
        return
    except _DepthLimit as exc:
        result.problems.append(
            Problem.at(
                Source(name, exc.line, exc.column),
                "document",
                f"mappings and lists are nested more than {MAX_DEPTH} levels deep here; "
                f"at most {MAX_DEPTH} are read, so the document was not read (nothing of it "
                "is dropped silently)",
            )
        )
        return
    except yaml.reader.ReaderError as exc:
        line, column = _line_col(text, _char_offset(text, exc.position))
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        fail(line, column, f"character {character!r} is not allowed in YAML text ({exc.reason})")
        return
    except yaml.MarkedYAMLError as exc:
        _report_syntax(text, exc, fail)
        return
    except yaml.YAMLError as exc:  # pragma: no cover - libyaml raises the marked kinds above
        fail(1, 1, f"malformed YAML: {exc}")
        return
    except RecursionError:
        fail(1, 1, "malformed YAML: the document is nested too deeply to read")
        return
    finally:
        composer.dispose()
    if count == 0:
        fail(1, 1, "empty file: it holds no YAML document")


def _char_offset(text: str, byte_offset: int) -> int:
    """libyaml reports offsets in UTF-8 bytes; the text is indexed by characters."""
    if text.isascii():
        return byte_offset
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "ignore"))


def _is_empty(node: Any) -> bool:
    import yaml

    return (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:null"
        and node.value == ""
    )


def _report_syntax(text: str, exc: Any, fail: Any) -> None:
    problem = str(exc.problem or "malformed YAML")
    context = str(exc.context or "")
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    # A tab in the indentation is the usual cause of a scanner error on or before that line.
    start = 0
    for number in range(1, line + 1):
        end = text.find("\n", start)
        content = text[start:] if end < 0 else text[start:end]
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        if "\t" in indent:
            fail(
                number,
                indent.index("\t") + 1,
                "tab character used for indentation; YAML indents with spaces only",
            )
            return
        if end < 0:
            break
        start = end + 1
    if "quoted scalar" in context and exc.context_mark is not None:
        started = exc.context_mark
        fail(started.line + 1, started.column + 1, "unclosed quote: this quoted string never ends")
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


#: How deep mappings and lists may nest in one document; deeper is a ``document`` error.
MAX_DEPTH = 200


class _AliasLimit(Exception):
    def __init__(self, line: int, column: int, *, bytes: bool = False) -> None:
        super().__init__(f"{line}:{column}")
        self.line = line
        self.column = column
        self.bytes = bytes


class _DepthLimit(Exception):
    def __init__(self, line: int, column: int) -> None:
        super().__init__(f"{line}:{column}")
        self.line = line
        self.column = column


class _BadMerge(Exception):
    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.message = message


class _Expansion:
    """What aliases may still add to one file: values (``--max-yaml-aliases``) and bytes of
    text (``--max-yaml-expansion``)."""

    __slots__ = ("bytes", "nodes")

    def __init__(self, limits: FileLimits) -> None:
        self.nodes = limits.max_alias_nodes
        self.bytes = limits.max_alias_bytes


def _is_merge_key(node: Any) -> bool:
    """A plain ``<<`` key (YAML 1.1's merge key); a quoted ``"<<"`` is an ordinary key."""
    if node.id != "scalar" or node.value != "<<":
        return False
    return node.style in (None, "") or node.tag == "tag:yaml.org,2002:merge"


class _Builder:
    """Turns a composed node graph into plain data, recording positions and duplicate keys.

    A node met again is an alias being expanded: each value built that way, and the bytes of
    its text, are taken from ``budget`` (shared by the documents of one file), and running out
    stops the file. Merge keys (``<<: *defaults``, ``<<: [*a, *b]``) follow YAML 1.1: the keys
    written in the mapping win, then the merged mappings in their order; a merged value keeps
    the place where it is written (in the anchored mapping)."""

    def __init__(self, file: str, budget: _Expansion) -> None:
        self.file = file
        self.values: dict[FieldPath, tuple[int, int]] = {}
        self.keys: dict[FieldPath, tuple[int, int]] = {}
        self.duplicates: list[tuple[FieldPath, tuple[int, int], tuple[int, int]]] = []
        self._depth = 0
        self._seen: set[int] = set()
        self._budget = budget
        #: plain scalars kubectl and Argo CD read otherwise: (path, line, column, text, their
        #: reading, ours)
        self.ambiguous: list[tuple[FieldPath, int, int, str, Any, Any]] = []

    def _take(self, node: Any, size: int) -> None:
        budget = self._budget
        budget.nodes -= 1
        budget.bytes -= size
        if budget.nodes < 0 or budget.bytes < 0:
            mark = node.start_mark
            raise _AliasLimit(mark.line + 1, mark.column + 1, bytes=budget.nodes >= 0)

    def build(self, node: Any, path: FieldPath) -> Any:
        mark = node.start_mark
        self.values[path] = (mark.line + 1, mark.column + 1)
        kind = node.id
        again = id(node) in self._seen
        if again:
            self._take(node, len(node.value) if kind == "scalar" else 0)
        else:
            self._seen.add(id(node))
        if kind == "scalar":
            value = _scalar(node.tag, node.value, node.style)
            if not node.style and not again:  # plain ('' from libyaml)
                theirs = yaml11_reading(node.value)
                if theirs is not _SAME and (theirs != value or type(theirs) is not type(value)):
                    at = (mark.line + 1, mark.column + 1)
                    self.ambiguous.append((path, *at, node.value, theirs, value))
            return value
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _DepthLimit(mark.line + 1, mark.column + 1)
            if kind == "mapping":
                return self._mapping(node, path, again)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self._depth -= 1

    def _mapping(self, node: Any, path: FieldPath, again: bool) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merges: list[Any] = []
        for key_node, value_node in node.value:
            if _is_merge_key(key_node):
                merges.append(value_node)
                continue
            key = self._key(key_node)
            if again:
                self._take(key_node, len(key))
            key_mark = key_node.start_mark
            key_pos = (key_mark.line + 1, key_mark.column + 1)
            child: FieldPath = (*path, key)
            if key in out:
                self.duplicates.append((child, self.keys.get(child, key_pos), key_pos))
                continue
            self.keys[child] = key_pos
            out[key] = self.build(value_node, child)
        for merge in merges:
            sources = merge.value if merge.id == "sequence" else [merge]
            for source in sources:
                if source.id != "mapping":
                    at = source.start_mark
                    raise _BadMerge(
                        at.line + 1,
                        at.column + 1,
                        "a merge key (<<) takes a mapping or a list of mappings (usually "
                        "aliases such as *defaults or [*a, *b])",
                    )
                self._merge(out, source, path, 0)
        return out

    def _merge(self, out: dict[Any, Any], source: Any, path: FieldPath, depth: int) -> None:
        """Add the entries of mapping ``source`` (and of its own merges) not yet in ``out``."""
        if depth > MAX_DEPTH:
            at = source.start_mark
            raise _DepthLimit(at.line + 1, at.column + 1)
        repeated = id(source) in self._seen
        if repeated:
            self._take(source, 0)
        else:
            self._seen.add(id(source))
        nested = []
        for key_node, value_node in source.value:
            if _is_merge_key(key_node):
                nested.append(value_node)
                continue
            key = self._key(key_node)
            if key in out:
                continue  # a key written in the mapping (or merged earlier) wins
            if repeated:
                self._take(key_node, len(key))
            key_mark = key_node.start_mark
            child: FieldPath = (*path, key)
            self.keys[child] = (key_mark.line + 1, key_mark.column + 1)
            out[key] = self.build(value_node, child)
        for merge in nested:
            for inner in merge.value if merge.id == "sequence" else [merge]:
                if inner.id == "mapping":
                    self._merge(out, inner, path, depth + 1)

    def _key(self, node: Any) -> str:
        if node.id == "scalar":
            value = _scalar(node.tag, node.value, node.style)
            return value if isinstance(value, str) else str(node.value)
        return f"<{type(node).__name__}>"


_SAME = object()
# go-yaml v2's plain-scalar rules where they differ from YAML 1.2's core schema (what kubectl,
# through sigs.k8s.io/yaml, and Argo CD read a manifest with): YAML 1.1's booleans, octal with a
# leading 0, binary, and digits grouped with '_'
_YAML11_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "off", "Off", "OFF"), False),
}
_YAML11_INT = re.compile(r"[-+]?(?:0[0-7_]+|0b[01_]+|[0-9][0-9_]*)")


def yaml11_reading(text: str) -> Any:
    """What kubectl reads a plain scalar as, where YAML 1.2 may read it otherwise; ``_SAME`` for
    every other scalar."""
    if text in _YAML11_BOOLS:
        return _YAML11_BOOLS[text]
    if not _YAML11_INT.fullmatch(text) or "__" in text or text.endswith("_"):
        return _SAME
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").replace("_", "")
    if digits.startswith("0b"):
        return sign * int(digits[2:], 2)
    if len(digits) > 1 and digits.startswith("0"):
        return sign * int(digits, 8)
    return sign * int(digits) if "_" in text else _SAME


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"the number {value}"


def _report_ambiguous(
    result: LoadResult, document: Document, found: list[tuple[FieldPath, int, int, str, Any, Any]]
) -> None:
    """An error per plain value kubectl reads otherwise, in the documents kai validates."""
    if document.api_version is None or _api_group(document.api_version) not in _OUR_GROUPS:
        return
    for path, line, column, written, theirs, ours in found:
        result.problems.append(
            Problem.at(
                Source(document.file, line, column),
                "yaml",
                f"the plain value {written} is {_shown(theirs)} to kubectl and Argo CD (YAML "
                f"1.1) but {_shown(ours)} to YAML 1.2: the cluster would store something else "
                f'than what is checked here; quote it ("{written}") or write the value you mean',
                object=document.object_name,
                path=field_path(path),
            )
        )


_OUR_GROUPS = ("gitops.kai.scheduler", "scheduling.run.ai", "kai.scheduler")


def _api_group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


_STR = "tag:yaml.org,2002:str"
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}


def _scalar(tag: str, value: str, style: Any) -> Any:
    """YAML 1.2 core schema scalars; anything unusual stays a string."""
    if tag == _STR or style in ("'", '"', "|", ">"):
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
            if len(text) > 4000:  # Python refuses longer decimal ints; no API field takes them
                return value
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


def _resolver_class() -> Any:
    """The YAML 1.2 core schema's implicit tags (``yes`` stays a string, ``0o17`` is octal).

    libyaml calls ``resolve`` once per node, so it is one dictionary look-up and at most one
    regular expression."""
    import re

    import yaml

    pattern = re.compile(
        r"^(?:(?P<null>~|null|Null|NULL)|(?P<bool>true|True|TRUE|false|False|FALSE)"
        r"|(?P<int>[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)"
        r"|(?P<float>[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)))$"
    )
    tags = {name: f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float")}
    first = set("~nNtTfF-+.0123456789")
    scalar, sequence = yaml.ScalarNode, yaml.SequenceNode

    class Resolver12(yaml.resolver.BaseResolver):
        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is scalar:
                if implicit[0]:
                    if not value:
                        return tags["null"]
                    if value[0] in first:
                        match = pattern.match(value)
                        if match is not None:
                            return tags[str(match.lastgroup)]
                return _STR
            if kind is sequence:
                return "tag:yaml.org,2002:seq"
            return "tag:yaml.org,2002:map"

    return Resolver12
