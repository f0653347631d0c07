"""What the Kubernetes API server would refuse: object names and the range of every number.

A document that passes here renders into objects an API server accepts, and ``kai render
--out DIR`` builds file names only from names checked here (no ``/``, no ``..``).

- ``name``: ``metadata.name`` of every document of our groups is a DNS-1123 subdomain (at most
  253 characters of ``a-z``, ``0-9``, ``-`` and ``.``, each dot-separated part starting and
  ending with a letter or digit), as the API server requires of custom resources;
  ``metadata.namespace`` is a DNS-1123 label. A KAI Queue's name (a DNS-1123 label) is the
  hierarchy rules' business (:mod:`kai.gitops.quota_rules`).
- ``schema``: ``metadata.labels`` and ``metadata.annotations`` follow the API server's rules
  (apimachinery's ``ValidateLabels`` / ``ValidateAnnotations``): every key a qualified name (an
  optional DNS-1123 subdomain prefix of at most 253 characters and ``/``, then a name of at most
  63 characters of ``A-Z a-z 0-9 - _ .`` starting and ending with a letter or digit); label
  values strings of at most 63 such characters (or empty); annotation values strings, keys and
  values together at most 256 KiB (262,144 bytes).
- ``document``: the object's JSON is at most :data:`MAX_OBJECT_BYTES`: etcd refuses a request
  over 1.5 MiB (``--max-request-bytes``, 1,572,864 bytes by default: "etcdserver: request is
  too large"), and the API server adds its own metadata (``managedFields``, ``uid``, times) to
  what is stored, for which 64 KiB are kept. Past 256 KiB a warning says that ``kubectl apply``
  (client-side) cannot apply it: it copies the object into an annotation, limited to 256 KiB.
- ``values``: a ``priority`` is an int32; every other integer an int64; every number and every
  quantity (``"1e400"``, ``"100000000Ei"``) at most 2^63-1 in magnitude in the unit it renders
  to (cpu in millicores: at most (2^63-1)/1000 cores), the largest amount a Kubernetes quantity
  holds.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from kai.api.quantity import QuantityError, parse_quantity
from kai.gitops.loader import Document, FieldPath, field_path
from kai.gitops.problems import Problem

__all__ = [
    "INT32",
    "INT64",
    "MAX_ANNOTATIONS_BYTES",
    "MAX_OBJECT_BYTES",
    "check_api_limits",
    "qualified_name_problem",
    "subdomain_problem",
]

#: etcd's default request limit (1.5 MiB) less 64 KiB for what the API server adds.
MAX_OBJECT_BYTES = 1_572_864 - 65_536
#: the size of an object's annotations, keys and values (apimachinery's TotalAnnotationSizeLimitB)
MAX_ANNOTATIONS_BYTES = 262_144
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY_KINDS = {"QueueTree"}
_AMOUNT_FIELDS = {"quota", "limit"}
# cpu renders to millicores: the rendered number, not the written one, must fit an int64.
_UNIT = {"cpu": Fraction(1000), "memory": Fraction(1), "gpu": Fraction(1)}


def subdomain_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain, or None when it is one."""
    if not name:
        return "is empty"
    if len(name) > 253:
        return f"is {len(name)} characters long; at most 253 are allowed"
    if not _SUBDOMAIN.match(name):
        return (
            "is not a DNS-1123 subdomain: use lower-case letters, digits, '-' and '.', each "
            "dot-separated part starting and ending with a letter or digit (no '/', no '..')"
        )
    return None


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name (a label or annotation key), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "has an empty prefix before '/'"
        if len(prefix) > 253:
            return f"has a prefix of {len(prefix)} characters; at most 253 are allowed"
        if not _SUBDOMAIN.match(prefix):
            return "has a prefix that is not a DNS-1123 subdomain (lower-case, digits, '-', '.')"
    if not name:
        return "has an empty name"
    if len(name) > 63:
        return f"has a name part of {len(name)} characters; at most 63 are allowed"
    if not _QUALIFIED.match(name):
        return (
            "is not a qualified name: letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit, optionally after a DNS-1123 subdomain prefix and '/'"
        )
    return None


def check_api_limits(documents: list[Document]) -> list[Problem]:
    problems: list[Problem] = []
    for doc in documents:
        problems.extend(_name_problems(doc))
        problems.extend(_metadata_problems(doc))
        problems.extend(_size_problems(doc))
        problems.extend(_number_problems(doc))
    return problems


def _metadata_problems(doc: Document) -> Iterator[Problem]:
    meta = doc.data.get("metadata")
    if not isinstance(meta, dict):
        return
    for part in ("labels", "annotations"):
        entries = meta.get(part)
        if entries is None:
            continue
        where: FieldPath = ("metadata", part)
        if not isinstance(entries, dict):
            yield _schema(doc, where, f"metadata.{part} must be a mapping of strings to strings")
            continue
        total = 0
        for key, value in entries.items():
            at: FieldPath = (*where, key)
            why = qualified_name_problem(key) if isinstance(key, str) else "is not a string"
            if why is not None:
                yield _schema(doc, at, f"key {_short(str(key))} {why}", of_key=True)
            if not isinstance(value, str):
                yield _schema(doc, at, f"value is a {_kind(value)}; {part} hold strings (quote it)")
                continue
            total += len(str(key).encode()) + len(value.encode())
            if part == "labels" and (len(value) > 63 or (value and not _QUALIFIED.match(value))):
                yield _schema(
                    doc,
                    at,
                    f"label value {_short(value)} is not valid: at most 63 characters of "
                    "letters, digits, '-', '_' and '.', starting and ending with a letter or "
                    "digit (or empty)",
                )
        if part == "annotations" and total > MAX_ANNOTATIONS_BYTES:
            yield _schema(
                doc,
                where,
                f"the annotations hold {total} bytes (keys and values); the API server allows "
                f"at most {MAX_ANNOTATIONS_BYTES} (256 KiB)",
            )


def _kind(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _schema(doc: Document, path: FieldPath, message: str, *, of_key: bool = False) -> Problem:
    return Problem.at(
        doc.key_at(path) if of_key else doc.value_at(path),
        "schema",
        message,
        object=doc.object_name,
        path=".".join(str(p) for p in path),
    )


def _size_problems(doc: Document) -> Iterator[Problem]:
    import orjson

    try:
        size = len(orjson.dumps(doc.data))
    except TypeError:  # not JSON (a huge int): the values rule reports it
        return
    if size <= 262_144:
        return
    if size > MAX_OBJECT_BYTES:
        yield Problem.at(
            doc.value_at(()),
            "document",
            f"the object is {size} bytes as JSON; the API server stores at most about 1.5 MiB "
            f"(etcd's request limit) and kai allows {MAX_OBJECT_BYTES}, keeping 64 KiB for the "
            "metadata the server adds; split it into several documents",
            object=doc.object_name,
        )
        return
    yield Problem.at(
        doc.value_at(()),
        "document",
        f"the object is {size} bytes as JSON: `kubectl apply` (client-side) copies it into the "
        "last-applied-configuration annotation, limited to 256 KiB, and fails; apply it with "
        "`kubectl apply --server-side` (or Argo CD's ServerSideApply=true)",
        object=doc.object_name,
        severity="warning",
    )


def _name_problems(doc: Document) -> Iterator[Problem]:
    meta = doc.data.get("metadata")
    if not isinstance(meta, dict):
        return
    name = meta.get("name")
    if isinstance(name, str) and doc.kind != "Queue":
        why = subdomain_problem(name)
        if why is not None:
            yield Problem.at(
                doc.value_at(("metadata", "name")),
                "name",
                f"{doc.kind} name {_short(name)} {why}",
                object=f"{doc.kind}/{_short(name, quoted=False)}",
                path="metadata.name",
            )
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and (len(namespace) > 63 or not _LABEL.match(namespace)):
        yield Problem.at(
            doc.value_at(("metadata", "namespace")),
            "name",
            f"namespace {_short(namespace)} is not a DNS-1123 label: use at most 63 lower-case "
            "letters, digits and '-', starting and ending with a letter or digit",
            object=doc.object_name,
            path="metadata.namespace",
        )


def _short(text: str, *, quoted: bool = True) -> str:
    """A name as a message shows it: at most 80 characters (a huge name stays readable)."""
    shown = text if len(text) <= 80 else text[:77] + "..."
    return repr(shown) if quoted else shown


def _scalars(value: Any, path: FieldPath) -> Iterator[tuple[FieldPath, Any]]:
    stack: list[tuple[FieldPath, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack.extend(((*where, k), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend(((*where, i), v) for i, v in enumerate(item))
        else:
            yield where, item


def _number_problems(doc: Document) -> Iterator[Problem]:
    amounts = doc.kind in _QUANTITY_KINDS
    low32, high32 = INT32
    low64, high64 = INT64
    for path, value in _scalars(doc.data, ()):
        kind = type(value)
        message = None
        if kind is int:
            if low32 <= value <= high32:
                pass  # fits everything, the common case
            elif path and path[-1] == "priority":
                message = _int_message(value, 32)
            elif not low64 <= value <= high64:
                message = _int_message(value, 64)
            elif amounts:
                message = _amount_problem(path, value)
        elif kind is float:
            if not math.isfinite(value):
                continue  # the schema rule reports .inf and .nan
            if abs(value) > high64:
                message = (
                    f"{value!r} is too large: numbers are at most {high64} (2^63-1) in magnitude"
                )
            elif amounts:
                message = _amount_problem(path, value)
        elif kind is str and amounts:
            message = _amount_problem(path, value)
        if message is not None:
            yield Problem.at(
                doc.value_at(path),
                "values",
                message,
                object=doc.object_name,
                path=field_path(path),
            )


def _int_message(value: int, bits: int) -> str:
    low, high = INT32 if bits == 32 else INT64
    return (
        f"{_number_text(value)} does not fit a {bits}-bit integer (from {low} to {high}); "
        "the API server refuses it"
    )


def _number_text(value: int) -> str:
    digits = str(abs(value)) if value.bit_length() < 4000 else None
    if digits is None or len(digits) > 30:
        return f"a {len(digits) if digits else 'very'}-digit number"
    return str(value)


def _amount_problem(path: FieldPath, value: Any) -> str | None:
    """A QueueTree quota or limit that no Kubernetes quantity (or KAI Queue field) can hold."""
    if len(path) < 2:
        return None
    resource, field = path[-1], path[-2]
    if field not in _AMOUNT_FIELDS or resource not in _UNIT:
        return None
    return _amount_message(str(resource), type(value).__name__, value)


@functools.lru_cache(maxsize=4096)
def _amount_message(resource: str, _type: str, value: Any) -> str | None:
    if isinstance(value, str) and resource == "gpu":
        return None  # the schema rule says gpu amounts are numbers
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        if "out of range" not in str(exc):
            return None  # the schema rule reports what is not a quantity at all
        return f"{exc}: a Kubernetes quantity holds at most {INT64[1]} (2^63-1)"
    rendered = abs(amount) * _UNIT[str(resource)]
    if rendered > INT64[1]:
        unit = " millicores" if resource == "cpu" else ""
        return (
            f"{_short(str(value))} is too large: a quantity holds at most {INT64[1]}{unit} "
            "(2^63-1); the API server refuses it"
        )
    return None
