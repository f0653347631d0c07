"""Document identity (``document`` rule) and JSON Schema validation (``schema`` rule).

Each document of the groups ``gitops.kai.scheduler``, ``scheduling.run.ai`` and ``kai.scheduler``
must be a mapping with ``apiVersion``, ``kind`` and ``metadata.name`` naming a kind this project
knows (:mod:`kai.api.registry`); documents of other groups are skipped. Known documents are
checked against the kind's JSON Schema (the one committed under ``schemas/``), and every schema
error becomes one problem at the line and column of the offending value (for an unknown field:
its key), with a message in plain words.

Precedence: values that a specific hierarchy rule judges (queue names, quota / limit / weight
numbers, priorities, parent references) are left to that rule, so ``-2`` is reported once, as
``values``, and ``Research`` once, as ``name``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from kai.api.quantity import QuantityError, parse_quantity
from kai.gitops.loader import Document, FieldPath, field_path
from kai.gitops.problems import Problem

__all__ = ["OUR_GROUPS", "check_documents", "is_ours"]

OUR_GROUPS = ("gitops.kai.scheduler", "scheduling.run.ai", "kai.scheduler")

_RESOURCE_FIELDS = ("quota", "limit", "overQuotaWeight")
_RESOURCES = ("gpu", "cpu", "memory")


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def is_ours(doc: Document) -> bool:
    """Whether the document belongs to one of the groups ``kai validate`` checks."""
    return doc.api_version is not None and _group(doc.api_version) in OUR_GROUPS


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


def _pattern_words(pattern: str) -> str:
    from kai.api import types

    known = {
        types.DNS_LABEL_PATTERN: "a DNS-1123 label (lower-case letters, digits and '-', "
        "starting and ending with a letter or digit)",
        types.DURATION_PATTERN: "a duration such as 90s, 10m or 1h30m",
        types.LABEL_KEY_PATTERN: "a label key such as topology.kubernetes.io/zone",
    }
    if pattern in known:
        return known[pattern]
    if "y|w|d|h|m|s|ms" in pattern:
        return "a Prometheus range such as 1w, 7d or 12h"
    if "[-A-Za-z0-9_.]" in pattern and "/" not in pattern:
        return "a label value (letters, digits, '-', '_' and '.', at most 63)"
    return f"of the form {pattern}"


# --------------------------------------------------------------------------------------------
# Precedence: values judged by a specific rule


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _quantity_like(value: Any) -> bool:
    if _is_number(value):
        return True
    if isinstance(value, str):
        try:
            parse_quantity(value)
        except QuantityError:
            return False
        return True
    return False


def _queue_item_tail(path: FieldPath) -> FieldPath | None:
    """For a path inside a QueueTree queue entry, the part after the entry; else None."""
    if len(path) < 3 or path[:2] != ("spec", "queues") or not isinstance(path[2], int):
        return None
    rest = path[3:]
    while len(rest) >= 2 and rest[0] == "children" and isinstance(rest[1], int):
        rest = rest[2:]
    return rest


def _owned_by_rule(kind: str | None, path: FieldPath, value: Any) -> bool:
    if kind == "QueueTree":
        return _queue_tree_owned(path, value)
    if kind == "Queue":
        return _queue_owned(path, value)
    return False


def _queue_tree_owned(path: FieldPath, value: Any) -> bool:
    if path == ("spec", "parent"):
        return isinstance(value, str)
    tail = _queue_item_tail(path)
    if tail is None and len(path) >= 2 and path[:2] == ("spec", "defaults"):
        tail = path[2:]
    if tail is None:
        return False
    if tail == ("name",):
        return isinstance(value, str)
    if tail == ("priority",):
        return _is_number(value)
    if len(tail) == 2 and tail[0] in _RESOURCE_FIELDS and tail[1] in _RESOURCES:
        if tail[0] == "overQuotaWeight" or tail[1] == "gpu":
            return _is_number(value)
        return _quantity_like(value)
    return False


def _queue_owned(path: FieldPath, value: Any) -> bool:
    if path in (("metadata", "name"), ("spec", "parentQueue")):
        return isinstance(value, str)
    if path == ("spec", "priority"):
        return _is_number(value)
    if (
        len(path) == 4
        and path[:2] == ("spec", "resources")
        and path[2] in _RESOURCES
        and path[3] in _RESOURCE_FIELDS
    ):
        return _is_number(value)
    return False


# --------------------------------------------------------------------------------------------
# Schema errors in words


@functools.cache
def _validator(api_version: str, kind: str) -> Any:
    from jsonschema import Draft202012Validator

    from kai.api import registry

    info = registry.lookup(api_version, kind)
    assert info is not None
    return Draft202012Validator(registry.json_schema(info))


@functools.cache
def _fast_validator(api_version: str, kind: str) -> Any:
    """The same schema compiled by jsonschema-rs: it only says valid or not, 10-50x faster.

    A document it finds valid is not walked again by jsonschema (whose errors make the
    messages); one it finds invalid, or cannot take (huge integers), is."""
    import jsonschema_rs

    from kai.api import registry

    info = registry.lookup(api_version, kind)
    assert info is not None
    return jsonschema_rs.Draft202012Validator(registry.json_schema(info), validate_formats=False)


def _fast_valid(doc: Document) -> bool:
    try:
        return bool(_fast_validator(doc.api_version or "", doc.kind or "").is_valid(doc.data))
    except (ValueError, TypeError, OverflowError):
        return False


def _value(data: Any, path: FieldPath) -> Any:
    for part in path:
        data = data[part]
    return data


def _branch_errors(error: Any) -> dict[int, list[Any]]:
    branches: dict[int, list[Any]] = {}
    for sub in error.context or ():
        branches.setdefault(int(sub.relative_schema_path[0]), []).append(sub)
    return branches


def _leaf_errors(error: Any) -> Iterator[Any]:
    """Resolve anyOf/oneOf errors to the errors of the branch that fits the value best."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        yield error
        return
    branches = _branch_errors(error)
    options = error.validator_value
    live = {
        i: errs
        for i, errs in branches.items()
        if not (isinstance(options[i], dict) and options[i].get("type") == "null")
    }
    if not live:
        yield error
        return
    # Branches that fail only because the value has another type do not fit at all.
    fitting = {
        i: errs
        for i, errs in live.items()
        if not any(
            e.validator == "type" and list(e.absolute_path) == list(error.absolute_path)
            for e in errs
        )
    }
    if not fitting:
        types: list[str] = []
        for i in sorted(live):
            for sub in live[i]:
                if sub.validator == "type":
                    wanted = sub.validator_value
                    for t in wanted if isinstance(wanted, list) else [wanted]:
                        word = _TYPE_WORDS.get(str(t), str(t))
                        if word not in types:
                            types.append(word)
        error.kai_expected = types
        yield error
        return
    best = min(fitting)
    for sub in fitting[best]:
        yield from _leaf_errors(sub)


def _error_problems(doc: Document, error: Any) -> Iterator[tuple[FieldPath, str, str]]:
    """(path, where to point: "value" / "key" / "parent", message) for one jsonschema error."""
    path: FieldPath = tuple(error.absolute_path)
    value = error.instance
    validator = error.validator
    if validator in ("additionalProperties", "unevaluatedProperties") and isinstance(value, dict):
        schema = error.schema
        allowed = sorted(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        for key in value:
            if key in allowed or any(re.search(p, key) for p in patterns):
                continue
            hint = f"; allowed here: {', '.join(allowed)}" if allowed and len(allowed) <= 14 else ""
            yield (*path, key), "key", f"unknown field {key!r}{hint}"
        return
    if validator == "required" and isinstance(value, dict):
        for name in error.validator_value:
            if name not in value:
                yield (*path, name), "parent", f"missing required field {name!r}"
        return
    yield path, "value", _value_message(error, value)


def _value_message(error: Any, value: Any) -> str:
    """What is wrong with the value a jsonschema error points at, in words."""
    describe = _MESSAGES.get(error.validator)
    return describe(error, value) if describe is not None else str(error.message)


def _any_of_message(error: Any, value: Any) -> str:
    expected = getattr(error, "kai_expected", None)
    if expected:
        return f"expected {' or '.join(expected)}, got {_describe(value)}"
    return f"{_describe(value)} does not fit any allowed form"


def _type_message(error: Any, value: Any) -> str:
    wanted = error.validator_value
    wanted = wanted if isinstance(wanted, list) else [wanted]
    names = [str(t) for t in wanted if t != "null" or value is None]
    return f"expected {' or '.join(_TYPE_WORDS.get(t, t) for t in names)}, got {_describe(value)}"


def _enum_message(error: Any, value: Any) -> str:
    options = ", ".join(repr(v) for v in error.validator_value)
    return f"{_describe(value)} is not allowed; expected one of: {options}"


_BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "more than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _bound_message(error: Any, value: Any) -> str:
    return f"must be {_BOUND_WORDS[error.validator]} {error.validator_value}, got {value}"


def _length_message(error: Any, value: Any) -> str:
    size = "at least" if error.validator == "minLength" else "at most"
    return f"must be {size} {error.validator_value} characters long"


def _items_message(error: Any, value: Any) -> str:
    count = "at least" if error.validator == "minItems" else "at most"
    return f"must have {count} {error.validator_value} entries, has {len(value)}"


_MESSAGES: dict[str, Callable[[Any, Any], str]] = {
    "anyOf": _any_of_message,
    "oneOf": _any_of_message,
    "type": _type_message,
    "pattern": lambda error, value: _pattern_message(error.validator_value, value),
    "enum": _enum_message,
    "const": lambda error, value: f"expected {error.validator_value!r}, got {_describe(value)}",
    **dict.fromkeys(_BOUND_WORDS, _bound_message),
    "minLength": _length_message,
    "maxLength": _length_message,
    "minItems": _items_message,
    "maxItems": _items_message,
    "uniqueItems": lambda error, value: "entries must be unique",
}


def _pattern_message(pattern: str, value: Any) -> str:
    from kai.api.quantity import QUANTITY_PATTERN

    if pattern != QUANTITY_PATTERN:
        return f"{value!r} is not {_pattern_words(pattern)}"
    try:
        parse_quantity(value)
    except QuantityError as exc:
        return str(exc)
    return f"{value!r} is not a Kubernetes quantity"


def _all_finite(data: Any) -> bool:
    """No .inf / .nan anywhere (JSON's encoder, in C, refuses them: the usual case is quick)."""
    try:
        json.dumps(data, allow_nan=False)
    except (ValueError, TypeError):  # a non-finite number, or something to look at closely
        return False
    return True


def _non_finite(data: Any, path: FieldPath = ()) -> Iterator[FieldPath]:
    """Paths of .inf / .nan numbers, which JSON Schema's "number" lets through."""
    if isinstance(data, float) and not math.isfinite(data):
        yield path
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _non_finite(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _non_finite(value, (*path, index))


def _schema_problems(doc: Document) -> list[Problem]:
    validator = _validator(doc.api_version or "", doc.kind or "")
    problems: list[Problem] = [
        Problem.at(
            doc.value_at(path),
            "schema",
            f"expected a finite number, got {_value(doc.data, path)}",
            object=doc.object_name,
            path=field_path(path) or None,
        )
        for path in ([] if _all_finite(doc.data) else _non_finite(doc.data))
    ]
    for top in [] if _fast_valid(doc) else validator.iter_errors(doc.data):
        for error in _leaf_errors(top):
            for path, point, message in _error_problems(doc, error):
                try:
                    value = _value(doc.data, path)
                except (KeyError, IndexError, TypeError):
                    value = None
                if _owned_by_rule(doc.kind, path, value):
                    continue
                if point == "key":
                    where = doc.key_at(path)
                elif point == "parent":  # a missing field: the mapping that lacks it
                    where = doc.key_at(path[:-1]) if path[:-1] else doc.value_at(())
                else:
                    where = doc.value_at(path)
                problems.append(
                    Problem.at(
                        where,
                        "schema",
                        message,
                        object=doc.object_name,
                        path=field_path(path) or None,
                    )
                )
    return problems


# --------------------------------------------------------------------------------------------
# The document rule


def check_documents(documents: list[Document]) -> tuple[list[Document], list[Problem]]:
    """The known documents of our groups (to check further) and the problems found so far."""
    from kai.api import registry

    known: list[Document] = []
    problems: list[Problem] = []
    for doc in documents:
        start = doc.value_at(())
        if not isinstance(doc.data, dict):
            problems.append(
                Problem.at(
                    start,
                    "document",
                    f"a document must be a mapping with apiVersion, kind and metadata; "
                    f"got {_describe(doc.data)}",
                )
            )
            continue
        missing = [k for k in ("apiVersion", "kind") if not isinstance(doc.data.get(k), str)]
        if missing:
            problems.append(
                Problem.at(
                    start,
                    "document",
                    f"missing {' and '.join(missing)}: every document needs apiVersion and kind",
                    object=doc.object_name if doc.name or doc.kind else None,
                )
            )
            continue
        api_version, kind = doc.api_version or "", doc.kind or ""
        group = _group(api_version)
        if group not in OUR_GROUPS:
            continue
        info = registry.lookup(api_version, kind)
        if info is None:
            versions = registry.known_versions(group, kind)
            if versions:
                problems.append(
                    Problem.at(
                        doc.value_at(("apiVersion",)),
                        "document",
                        f"unknown version {api_version!r} of kind {kind}; known: "
                        + ", ".join(f"{group}/{v}" for v in versions),
                        object=doc.object_name,
                        path="apiVersion",
                    )
                )
            else:
                kinds = sorted({i.kind for i in registry.all_kinds() if i.group == group})
                problems.append(
                    Problem.at(
                        doc.value_at(("kind",)),
                        "document",
                        f"unknown kind {kind!r} in group {group}; known kinds: " + ", ".join(kinds),
                        object=doc.object_name,
                        path="kind",
                    )
                )
            continue
        if doc.name is None:
            meta = doc.data.get("metadata")
            where = doc.value_at(("metadata",)) if isinstance(meta, dict) else start
            problems.append(
                Problem.at(
                    where,
                    "document",
                    "missing metadata.name: every document needs a name",
                    object=doc.object_name,
                    path="metadata.name",
                )
            )
            continue
        known.append(doc)
        problems.extend(_schema_problems(doc))
    problems.extend(_same_object_twice(known))
    return known, problems


# Kinds whose duplicates a more specific rule reports (``name`` for Queues, ``topology`` for
# Topologies, which share one namespace with TopologyPolicies).
_DUPLICATES_ELSEWHERE = {"Queue", "Topology", "TopologyPolicy"}


def _same_object_twice(documents: list[Document]) -> list[Problem]:
    """Two documents for the same object: when applied, the second silently replaces the first."""
    problems: list[Problem] = []
    first: dict[tuple[str, str, str, str], Document] = {}
    for doc in sorted(documents, key=Document.order):
        if doc.kind in _DUPLICATES_ELSEWHERE:
            continue
        meta = doc.data.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        key = (
            _group(doc.api_version or ""),
            doc.kind or "",
            namespace if isinstance(namespace, str) else "",
            doc.name or "",
        )
        if key not in first:
            first[key] = doc
            continue
        earlier = first[key].value_at(("metadata", "name"))
        problems.append(
            Problem.at(
                doc.value_at(("metadata", "name")),
                "document",
                f"{doc.object_name} is already defined at {earlier.file}:{earlier.line}; "
                "two documents for one object replace each other when applied",
                object=doc.object_name,
                path="metadata.name",
            )
        )
    return problems
