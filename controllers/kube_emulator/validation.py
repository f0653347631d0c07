"""What kube-apiserver refuses in built-in objects and the emulator must refuse too, worded as
the real server words it (checked against kube-apiserver v1.36):

- resource quantities (pod requests and limits, node capacity and allocatable, ResourceQuota
  ``hard``): a string that is no quantity (``"lots"``) is a 400, as the real decoder's; a
  negative amount, a fraction of an extended resource (``nvidia.com/gpu: 500m``), an extended
  resource requested without a limit or with a request other than its limit, and a cpu or memory
  request above its limit are 422 ``Invalid``;
- integers beyond int64 (``99999999999999999999``, which a JSON parser turns into a float):
  a 400, as Go's decoder refuses them for every integer field of a built-in type;
- finalizer names: qualified names, and on built-in kinds either standard (``kubernetes``,
  ``orphan``, ``foregroundDeletion``) or domain-qualified (``example.com/name``);
- pod container statuses get the fields Go always writes (``image``, ``imageID``, ``ready``,
  ``restartCount``, ``state``, ``lastState``), so that every client (the official Python
  client refuses a status without ``imageID``) can read any pod back.
"""

from __future__ import annotations

import decimal
import functools
import re
from typing import Any

from kube_emulator.errors import ApiError, field_cause

Cause = dict[str, str]

QUANTITY_SYNTAX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")
_CONTEXT = decimal.Context(prec=80, Emax=10**6, Emin=-(10**6))
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


QUANTITY_FORMAT = f"quantities must match the regular expression '{QUANTITY_SYNTAX}'"
QUANTITY_SUFFIX = "unable to parse quantity's suffix"


def _digits(text: str, pos: int) -> int:
    """The end of the run of ASCII digits at ``pos``."""
    while pos < len(text) and "0" <= text[pos] <= "9":
        pos += 1
    return pos


def parse_quantity(value: Any) -> decimal.Decimal | str:
    """Cached :func:`_parse_quantity` (the same few amounts come back on every pod write)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return _parse_cached(value, type(value).__name__)  # 1 and 1.0 and "1" cached apart
    return _parse_quantity(value)


@functools.lru_cache(maxsize=4096)
def _parse_cached(value: Any, _kind: str) -> decimal.Decimal | str:
    return _parse_quantity(value)


def _parse_quantity(value: Any) -> decimal.Decimal | str:
    """The amount a Kubernetes quantity (``"1.5Gi"``, ``"100m"``, ``"2e3"``, ``4``) stands for,
    or the real decoder's error message (apimachinery's ParseQuantity, step by step: ``"Gi"``
    is 0, ``"1."`` is 1, ``"--1"`` and ``"1e"`` have a bad suffix, ``"5 Gi"`` a bad format)."""
    if isinstance(value, bool) or value is None:
        return QUANTITY_FORMAT
    if isinstance(value, int | float):
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        return QUANTITY_FORMAT
    text = value.strip()
    if not text or len(text) > 256:
        return QUANTITY_FORMAT
    pos, end = 0, len(text)
    sign = 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        pos = 1
    start, pos = pos, _digits(text, pos)
    whole = text[start:pos] or "0"
    fraction = ""
    if pos < end and text[pos] == ".":
        start, pos = pos + 1, _digits(text, pos + 1)
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    if _digits(text, pos) < end:
        return QUANTITY_FORMAT
    suffix = text[suffix_start:]
    number = decimal.Decimal(f"{whole}.{fraction or '0'}") * sign
    if suffix in _BINARY:
        return _CONTEXT.multiply(number, decimal.Decimal(2) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return _CONTEXT.scaleb(number, _DECIMAL[suffix])
    exponent = _EXPONENT.match(suffix)
    if exponent is None or abs(int(exponent[1])) > 2**31 - 1:
        return QUANTITY_SUFFIX
    return _CONTEXT.scaleb(number, max(-(10**5), min(10**5, int(exponent[1]))))


def is_extended_resource(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-qualified name outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _undecodable(kind: str, version: str, detail: str) -> ApiError:
    return ApiError(
        400,
        f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}',
        "BadRequest",
    )


def _amounts(
    kind: str, version: str, path: str, values: Any, causes: list[Cause], extended_whole: bool
) -> dict[str, decimal.Decimal]:
    """Parse one resource map (400 on a non-quantity); negative amounts and fractions of
    extended resources become causes."""
    out: dict[str, decimal.Decimal] = {}
    if not isinstance(values, dict):
        return out
    for name, raw in values.items():
        amount = parse_quantity(raw)
        if isinstance(amount, str):
            raise _undecodable(kind, version, amount)
        out[name] = amount
        if amount < 0:
            causes.append(
                field_cause(
                    f"{path}[{name}]",
                    f'Invalid value: "{raw}": must be greater than or equal to 0',
                )
            )
        elif extended_whole and is_extended_resource(name) and amount != amount.to_integral():
            causes.append(
                field_cause(f"{path}[{name}]", f'Invalid value: "{raw}": must be an integer')
            )
    return out


def _container_resources(
    kind: str, version: str, path: str, container: Any, causes: list[Cause]
) -> None:
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return
    raw_requests = resources.get("requests") or {}
    raw_limits = resources.get("limits") or {}
    limits = _amounts(kind, version, f"{path}.limits", raw_limits, causes, True)
    requests = _amounts(kind, version, f"{path}.requests", raw_requests, causes, True)
    for name, amount in requests.items():
        limit = limits.get(name)
        if is_extended_resource(name):
            if limit is None:
                causes.append(
                    field_cause(
                        f"{path}.limits",
                        "Required value: Limit must be set for non overcommitable resources",
                        "FieldValueRequired",
                    )
                )
            elif amount != limit:
                causes.append(
                    field_cause(
                        f"{path}.requests",
                        f'Invalid value: "{raw_requests[name]}": must be equal to {name} '
                        f"limit of {raw_limits[name]}",
                    )
                )
        elif limit is not None and name in ("cpu", "memory") and amount > limit:
            causes.append(
                field_cause(
                    f"{path}.requests",
                    f'Invalid value: "{raw_requests[name]}": must be less than or equal to '
                    f"{name} limit of {raw_limits[name]}",
                )
            )


def resource_causes(
    key: tuple[str, str], version: str, kind: str, obj: dict[str, Any]
) -> list[Cause]:
    """Quantity checks of a pod, node or ResourceQuota (400 raised for a non-quantity)."""
    causes: list[Cause] = []
    if key == ("", "pods"):
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return causes
        for group in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(group) or []):
                where = f"spec.{group}[{i}].resources"
                _container_resources(kind, version, where, container, causes)
        _amounts(kind, version, "spec.overhead", spec.get("overhead"), causes, True)
    elif key == ("", "nodes"):
        status = obj.get("status")
        if isinstance(status, dict):
            for part in ("capacity", "allocatable"):
                _amounts(kind, version, f"status.{part}", status.get(part), causes, True)
    elif key == ("", "resourcequotas"):
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _amounts(kind, version, "spec.hard", spec.get("hard"), causes, False)
    return causes


# maps of quantities (a quantity may be a JSON number of any size: ``cpu: 1e3``)
_QUANTITY_MAPS = frozenset(
    ("requests", "limits", "capacity", "allocatable", "hard", "used", "overhead")
)
# built-in kinds with free-form JSON inside (schemas, defaults, raw revisions)
_FREE_FORM = frozenset(
    (("apiextensions.k8s.io", "customresourcedefinitions"), ("apps", "controllerrevisions"))
)


def check_int64(key: tuple[str, str], kind: str, version: str, obj: Any) -> None:
    """400 for a number no int64 holds in a built-in object: a JSON parser reads
    99999999999999999999 as the float 1e20, which Go's decoder refuses for an integer field
    (and a built-in kind has no float fields, only quantities)."""
    if key in _FREE_FORM or _int64_ok(obj):
        return
    path, number = _first_out_of_range(obj, "")
    shown = f"{number:.0f}" if isinstance(number, float) else str(number)
    raise _undecodable(
        kind,
        version,
        f"json: cannot unmarshal number {shown} into Go struct field {kind}.{path} of type int64",
    )


def _int64_ok(obj: Any) -> bool:
    """No number out of the int64 range outside quantity maps (the fast walk, no paths)."""
    todo = [obj]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, dict | list):
                    if k not in _QUANTITY_MAPS:
                        todo.append(v)
                elif (type(v) is int or type(v) is float) and not INT64_MIN <= v <= INT64_MAX:
                    return False
        elif isinstance(node, list):
            for v in node:
                if isinstance(v, dict | list):
                    todo.append(v)
                elif (type(v) is int or type(v) is float) and not INT64_MIN <= v <= INT64_MAX:
                    return False
    return True


def _first_out_of_range(node: Any, path: str) -> tuple[str, Any]:
    """Where the number out of range is (the slow walk, once a bad one is known to exist)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _QUANTITY_MAPS and isinstance(v, dict | list):
                continue
            found = _first_out_of_range(v, f"{path}.{k}" if path else str(k))
            if found[0]:
                return found
    elif isinstance(node, list):
        for v in node:
            found = _first_out_of_range(v, path)
            if found[0]:
                return found
    elif (type(node) is int or type(node) is float) and not INT64_MIN <= node <= INT64_MAX:
        return path or "(root)", node
    return "", None


_STANDARD_FINALIZERS = frozenset(("kubernetes", "orphan", "foregroundDeletion"))
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


@functools.lru_cache(maxsize=8192)
def qualified_name_problems(value: str) -> tuple[str, ...]:
    """apimachinery's IsQualifiedName: every problem, in its order, with the real server's
    messages (cached: the same few keys come back on every write of an object)."""
    parts = value.split("/")
    if len(parts) > 2:
        return (
            f"a valid label key {_NAME_RULE} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')",
        )
    problems: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                problems.append("prefix part must be no more than 253 bytes")
            if not _SUBDOMAIN.match(prefix):
                problems.append(f"prefix part {_SUBDOMAIN_RULE}")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 bytes")
    if not _NAME_PART.match(name):
        problems.append(f"name part {_NAME_RULE}")
    return tuple(problems)


def qualified_name_problem(value: str) -> str | None:
    """The first of :func:`qualified_name_problems`, or None."""
    problems = qualified_name_problems(value)
    return problems[0] if problems else None


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@functools.lru_cache(maxsize=8192)
def label_value_problems(value: str) -> tuple[str, ...]:
    """apimachinery's IsValidLabelValue, with the real server's messages."""
    problems: list[str] = []
    if len(value.encode()) > 63:
        problems.append("must be no more than 63 bytes")
    if not _LABEL_VALUE.match(value):
        problems.append(_LABEL_VALUE_RULE)
    return tuple(problems)


MAX_SECRET_SIZE = 1024 * 1024  # corev1.MaxSecretSize: ConfigMaps and Secrets alike
CONFIGMAPS_KEY = ("", "configmaps")
SECRETS_KEY = ("", "secrets")


def _decoded_len(value: Any) -> int:
    """The byte length of a base64 ``[]byte`` field (the server counts decoded bytes)."""
    if not isinstance(value, str):
        return 0
    text = value.rstrip("=")
    return len(text) * 3 // 4


def data_size_causes(key: tuple[str, str], obj: dict[str, Any]) -> list[Cause]:
    """The real server's 1 MiB limit on the data of a ConfigMap (``data`` and ``binaryData``
    together, reported on the whole object) and of a Secret (reported on ``data``)."""
    if key == CONFIGMAPS_KEY:
        total = 0
        data = obj.get("data")
        if isinstance(data, dict):
            total += sum(len(v.encode()) for v in data.values() if isinstance(v, str))
        binary = obj.get("binaryData")
        if isinstance(binary, dict):
            total += sum(_decoded_len(v) for v in binary.values())
        where = "[]"
    elif key == SECRETS_KEY:
        data = obj.get("data")
        total = sum(_decoded_len(v) for v in data.values()) if isinstance(data, dict) else 0
        where = "data"
    else:
        return []
    if total <= MAX_SECRET_SIZE:
        return []
    return [
        field_cause(
            where, f"Too long: may not be more than {MAX_SECRET_SIZE} bytes", "FieldValueTooLong"
        )
    ]


def finalizer_causes(md: dict[str, Any], builtin: bool) -> tuple[list[Cause], list[str]]:
    """Causes (422) and warnings for ``metadata.finalizers``."""
    causes: list[Cause] = []
    warnings: list[str] = []
    finalizers = md.get("finalizers")
    if not isinstance(finalizers, list):
        return causes, warnings
    for name in finalizers:
        if isinstance(name, str):
            problem = qualified_name_problem(name)
            if problem:
                causes.append(
                    field_cause("metadata.finalizers", f'Invalid value: "{name}": {problem}')
                )
    for i, name in enumerate(finalizers):
        if not isinstance(name, str) or "/" in name or name in _STANDARD_FINALIZERS:
            continue
        if builtin:
            causes.append(
                field_cause(
                    f"metadata.finalizers[{i}]",
                    f'Invalid value: "{name}": name is neither a standard finalizer name nor '
                    "is it fully qualified",
                )
            )
        else:
            warnings.append(
                f'metadata.finalizers: "{name}": prefer a domain-qualified finalizer name '
                "including a path (/) to avoid accidental conflicts with other finalizer writers"
            )
    return causes, warnings


_STATUS_LISTS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")


_STATUS_DEFAULTS: dict[str, Any] = {
    "state": {},
    "lastState": {},
    "ready": False,
    "restartCount": 0,
    "image": "",
    "imageID": "",
}


def default_container_statuses(pod: dict[str, Any]) -> None:
    """The fields a real server always writes in a container status (Go zero values). The
    status is replaced, never changed in place: it may be shared with the stored object."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return
    changed: dict[str, Any] = {}
    for key in _STATUS_LISTS:
        entries = status.get(key)
        if not isinstance(entries, list):
            continue
        if all(
            not isinstance(e, dict) or all(e.get(k) is not None for k in _STATUS_DEFAULTS)
            for e in entries
        ):
            continue
        changed[key] = [
            {**e, **{k: v for k, v in _STATUS_DEFAULTS.items() if e.get(k) is None}}
            if isinstance(e, dict)
            else e
            for e in entries
        ]
    if changed:
        pod["status"] = {**status, **changed}
