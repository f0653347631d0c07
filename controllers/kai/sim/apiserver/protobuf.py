"""Reading the Kubernetes protobuf encoding for the few kinds kubectl's typed ``create``
commands send that way (``kubectl create namespace|configmap|secret|serviceaccount|
priorityclass``). Responses are always JSON, which such clients accept.

The envelope is the 4 bytes ``k8s\\0`` followed by a ``runtime.Unknown`` message: field 1
TypeMeta (1 apiVersion, 2 kind), field 2 the object's own encoding. Field numbers follow the
Kubernetes API's protobuf definitions; fields this server does not know are skipped, and zero
values mean "unset", as in proto3.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from kai.sim.apiserver.errors import ApiError

MAGIC = b"k8s\x00"
SUPPORTED = ("Namespace", "ConfigMap", "Secret", "ServiceAccount", "PriorityClass", "Eviction")

Fields = list[tuple[int, int, Any]]  # (field number, wire type, value)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, i
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes) -> Fields:
    out: Fields = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, wire, value))
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ValueError("truncated field")
            out.append((number, wire, data[i : i + size]))
            i += size
        elif wire == 1:
            out.append((number, wire, data[i : i + 8]))
            i += 8
        elif wire == 5:
            out.append((number, wire, data[i : i + 4]))
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _text(value: Any) -> str:
    return bytes(value).decode("utf-8")


def _entry(value: bytes, as_bytes: bool = False) -> tuple[str, str]:
    key, val = "", ""
    for number, _, v in _fields(value):
        if number == 1:
            key = _text(v)
        elif number == 2:
            val = base64.b64encode(bytes(v)).decode() if as_bytes else _text(v)
    return key, val


def _meta(data: bytes) -> dict[str, Any]:
    md: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for number, _, v in _fields(data):
        if number in names and v:
            md[names[number]] = _text(v)
        elif number in (11, 12):
            key, val = _entry(v)
            md.setdefault("labels" if number == 11 else "annotations", {})[key] = val
        elif number == 14:
            md.setdefault("finalizers", []).append(_text(v))
    return md


def _configmap(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number in (2, 3):
            key, val = _entry(v, as_bytes=number == 3)
            obj.setdefault("data" if number == 2 else "binaryData", {})[key] = val
        elif number == 4:
            obj["immutable"] = bool(v)


def _secret(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number == 2:
            key, val = _entry(v, as_bytes=True)
            obj.setdefault("data", {})[key] = val
        elif number == 3 and v:
            obj["type"] = _text(v)
        elif number == 4:
            key, val = _entry(v)
            obj.setdefault("stringData", {})[key] = val
        elif number == 5:
            obj["immutable"] = bool(v)


def _namespace(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number == 2:
            finalizers = [_text(f) for n, _, f in _fields(v) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}


def _service_account(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number == 3:
            name = next((_text(x) for n, _, x in _fields(v) if n == 1), "")
            obj.setdefault("imagePullSecrets", []).append({"name": name})
        elif number == 4:
            obj["automountServiceAccountToken"] = bool(v)


def _priority_class(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number == 2:
            value = v - (1 << 64) if v >= 1 << 63 else v  # int32 sign-extended as a varint
            obj["value"] = value
        elif number == 3:
            obj["globalDefault"] = bool(v)
        elif number == 4 and v:
            obj["description"] = _text(v)
        elif number == 5 and v:
            obj["preemptionPolicy"] = _text(v)


def _eviction(fields: Fields, obj: dict[str, Any]) -> None:
    for number, _, v in fields:
        if number == 2:
            options: dict[str, Any] = {}
            for n, _, x in _fields(v):
                if n == 1:
                    options["gracePeriodSeconds"] = x - (1 << 64) if x >= 1 << 63 else x
                elif n == 4 and x:
                    options["propagationPolicy"] = _text(x)
            obj["deleteOptions"] = options


_DECODERS: dict[str, Callable[[Fields, dict[str, Any]], None]] = {
    "Eviction": _eviction,
    "ConfigMap": _configmap,
    "Secret": _secret,
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
    "PriorityClass": _priority_class,
}


def decode(raw: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object, or 415 naming what can be sent instead."""
    try:
        if not raw.startswith(MAGIC):
            raise ValueError("missing the k8s protobuf envelope")
        api_version = kind = ""
        body = b""
        for number, _, v in _fields(raw[len(MAGIC) :]):
            if number == 1:
                for n, _, t in _fields(v):
                    if n == 1:
                        api_version = _text(t)
                    elif n == 2:
                        kind = _text(t)
            elif number == 2:
                body = bytes(v)
        decoder = _DECODERS.get(kind)
        if decoder is None:
            raise LookupError(kind)
        fields = _fields(body)
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {}}
        for number, _, v in fields:
            if number == 1:
                obj["metadata"] = _meta(v)
        decoder(fields, obj)
        return obj
    except LookupError as exc:
        raise ApiError(
            415,
            f"this server reads protobuf only for {', '.join(SUPPORTED)}, not {exc.args[0]!r}; "
            "send application/json (with kubectl: write the object to a file and use "
            "`kubectl apply -f` or `kubectl create -f`)",
            "UnsupportedMediaType",
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400, f"the protobuf request body cannot be decoded: {exc}", "BadRequest"
        ) from exc
