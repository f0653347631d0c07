"""Reading the Kubernetes protobuf encoding for the objects kubectl's typed commands send that
way (``kubectl create namespace|configmap|secret|serviceaccount|priorityclass|job|deployment``,
the Eviction of ``kubectl drain``, the DeleteOptions of typed deletes such as Helm's).
Responses are always JSON, which such clients accept.

The envelope is the 4 bytes ``k8s\\0`` and a ``runtime.Unknown`` message: field 1 TypeMeta
(1 apiVersion, 2 kind), field 2 the object's own encoding. Each message below lists the fields
this server understands, by their numbers in the Kubernetes API's protobuf definitions. Go
writes every non-pointer field even when empty, so empty strings, zero numbers and false are
read as "unset", except for the optional (pointer) fields named in ``keep_zero``. A field that
is not listed but carries a value makes the whole request a 415 — nothing is dropped silently.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from kube_emulator.errors import ApiError

MAGIC = b"k8s\x00"

Fields = list[tuple[int, int, Any]]  # (field number, wire type, value)


@dataclass(frozen=True)
class Msg:
    name: str
    # number -> (json name, kind, nested message for "msg"/"list"/"map" kinds)
    fields: dict[int, tuple[str, str, Msg | None]]
    keep_zero: frozenset[str] = field(default_factory=frozenset)


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


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _empty(wire: int, value: Any) -> bool:
    if wire == 0:
        return bool(value == 0)
    if wire == 2:
        if not value:
            return True
        try:  # an embedded message whose fields are all empty
            return all(_empty(w, v) for _, w, v in _fields(bytes(value)))
        except ValueError:
            return False
    return False


class _Unknown(Exception):
    pass


def decode_message(data: bytes, msg: Msg) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        spec = msg.fields.get(number)
        if spec is None:
            if not _empty(wire, value):
                raise _Unknown(f"{msg.name} field {number}")
            continue
        name, kind, sub = spec
        if kind == "list":
            assert sub is not None
            out.setdefault(name, []).append(decode_message(bytes(value), sub))
        elif kind == "strs":
            out.setdefault(name, []).append(bytes(value).decode("utf-8"))
        elif kind in ("map", "bytesmap", "qtymap"):
            key, val = _map_entry(kind, bytes(value))
            out.setdefault(name, {})[key] = val
        elif kind in _SINGLE_KINDS:
            present, decoded = _single(kind, value, sub)
            if present or name in msg.keep_zero:
                out[name] = decoded
    return out


_SINGLE_KINDS = frozenset({"str", "bytes", "int", "bool", "msg"})


def _single(kind: str, value: Any, sub: Msg | None) -> tuple[bool, Any]:
    """A singular field's value, and whether it is set (proto3: a zero value is not, except
    for bytes, which are always kept)."""
    if kind == "str":
        return bool(value), bytes(value).decode("utf-8")
    if kind == "bytes":
        return True, base64.b64encode(bytes(value)).decode()
    if kind == "int":
        return bool(value), _signed(value)
    if kind == "bool":
        return bool(value), bool(value)
    assert sub is not None
    decoded = decode_message(bytes(value), sub)
    return bool(decoded), decoded


def _map_entry(kind: str, entry: bytes) -> tuple[str, str]:
    """A map entry {1: key, 2: value}; the value is a string, bytes (base64) or a
    resource.Quantity {1: string}."""
    key, val = "", ""
    for n, _, v in _fields(entry):
        if n == 1:
            key = bytes(v).decode("utf-8")
        elif n == 2 and kind == "map":
            val = bytes(v).decode("utf-8")
        elif n == 2 and kind == "bytesmap":
            val = base64.b64encode(bytes(v)).decode()
        elif n == 2:  # resource.Quantity {1: string}
            val = next((bytes(s).decode() for m, _, s in _fields(bytes(v)) if m == 1), "")
    return key, val


def _m(
    name: str, keep_zero: tuple[str, ...] = (), **fields: tuple[str, str] | tuple[str, str, Msg]
) -> Msg:
    table: dict[int, tuple[str, str, Msg | None]] = {}
    for key, spec in fields.items():
        number = int(key.lstrip("_"))
        table[number] = (spec[0], spec[1], spec[2] if len(spec) > 2 else None)
    return Msg(name, table, frozenset(keep_zero))


OWNER_REF = _m(
    "OwnerReference",
    _1=("kind", "str"),
    _3=("name", "str"),
    _4=("uid", "str"),
    _5=("apiVersion", "str"),
    _6=("controller", "bool"),
    _7=("blockOwnerDeletion", "bool"),
)
TIME = _m("Time", _1=("seconds", "int"), _2=("nanos", "int"))
OBJECT_META = _m(
    "ObjectMeta",
    _1=("name", "str"),
    _2=("generateName", "str"),
    _3=("namespace", "str"),
    _5=("uid", "str"),
    _6=("resourceVersion", "str"),
    _7=("generation", "int"),
    _8=("creationTimestamp", "msg", TIME),
    _11=("labels", "map"),
    _12=("annotations", "map"),
    _13=("ownerReferences", "list", OWNER_REF),
    _14=("finalizers", "strs"),
)
SELECTOR_REQ = _m(
    "LabelSelectorRequirement", _1=("key", "str"), _2=("operator", "str"), _3=("values", "strs")
)
SELECTOR = _m(
    "LabelSelector", _1=("matchLabels", "map"), _2=("matchExpressions", "list", SELECTOR_REQ)
)
PORT = _m(
    "ContainerPort",
    _1=("name", "str"),
    _2=("hostPort", "int"),
    _3=("containerPort", "int"),
    _4=("protocol", "str"),
    _5=("hostIP", "str"),
)
ENV = _m("EnvVar", _1=("name", "str"), _2=("value", "str"))
RESOURCES = _m("ResourceRequirements", _1=("limits", "qtymap"), _2=("requests", "qtymap"))
MOUNT = _m(
    "VolumeMount",
    _1=("name", "str"),
    _2=("readOnly", "bool"),
    _3=("mountPath", "str"),
    _4=("subPath", "str"),
)
CONTAINER = _m(
    "Container",
    _1=("name", "str"),
    _2=("image", "str"),
    _3=("command", "strs"),
    _4=("args", "strs"),
    _5=("workingDir", "str"),
    _6=("ports", "list", PORT),
    _7=("env", "list", ENV),
    _8=("resources", "msg", RESOURCES),
    _9=("volumeMounts", "list", MOUNT),
    _13=("terminationMessagePath", "str"),
    _14=("imagePullPolicy", "str"),
    _16=("stdin", "bool"),
    _17=("stdinOnce", "bool"),
    _18=("tty", "bool"),
    _20=("terminationMessagePolicy", "str"),
)
TOLERATION = _m(
    "Toleration",
    _1=("key", "str"),
    _2=("operator", "str"),
    _3=("value", "str"),
    _4=("effect", "str"),
    _5=("tolerationSeconds", "int"),
)
POD_SPEC = _m(
    "PodSpec",
    ("terminationGracePeriodSeconds", "activeDeadlineSeconds", "priority"),
    _2=("containers", "list", CONTAINER),
    _3=("restartPolicy", "str"),
    _4=("terminationGracePeriodSeconds", "int"),
    _5=("activeDeadlineSeconds", "int"),
    _6=("dnsPolicy", "str"),
    _7=("nodeSelector", "map"),
    _8=("serviceAccountName", "str"),
    _9=("serviceAccount", "str"),
    _10=("nodeName", "str"),
    _11=("hostNetwork", "bool"),
    _12=("hostPID", "bool"),
    _13=("hostIPC", "bool"),
    _16=("hostname", "str"),
    _17=("subdomain", "str"),
    _19=("schedulerName", "str"),
    _20=("initContainers", "list", CONTAINER),
    _22=("tolerations", "list", TOLERATION),
    _24=("priorityClassName", "str"),
    _25=("priority", "int"),
)
POD_TEMPLATE = _m(
    "PodTemplateSpec", _1=("metadata", "msg", OBJECT_META), _2=("spec", "msg", POD_SPEC)
)
JOB_SPEC = _m(
    "JobSpec",
    (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "suspend",
        "manualSelector",
    ),
    _1=("parallelism", "int"),
    _2=("completions", "int"),
    _3=("activeDeadlineSeconds", "int"),
    _4=("selector", "msg", SELECTOR),
    _5=("manualSelector", "bool"),
    _6=("template", "msg", POD_TEMPLATE),
    _7=("backoffLimit", "int"),
    _8=("ttlSecondsAfterFinished", "int"),
    _9=("completionMode", "str"),
    _10=("suspend", "bool"),
)
STRATEGY = _m("DeploymentStrategy", _1=("type", "str"))
DEPLOYMENT_SPEC = _m(
    "DeploymentSpec",
    ("replicas", "revisionHistoryLimit", "progressDeadlineSeconds"),
    _1=("replicas", "int"),
    _2=("selector", "msg", SELECTOR),
    _3=("template", "msg", POD_TEMPLATE),
    _4=("strategy", "msg", STRATEGY),
    _5=("minReadySeconds", "int"),
    _6=("revisionHistoryLimit", "int"),
    _7=("paused", "bool"),
    _9=("progressDeadlineSeconds", "int"),
)
PRECONDITIONS = _m("Preconditions", _1=("uid", "str"), _2=("resourceVersion", "str"))
DELETE_OPTIONS = _m(
    "DeleteOptions",
    ("gracePeriodSeconds", "orphanDependents"),
    _1=("gracePeriodSeconds", "int"),
    _2=("preconditions", "msg", PRECONDITIONS),
    _3=("orphanDependents", "bool"),
    _4=("propagationPolicy", "str"),
    _5=("dryRun", "strs"),
)
OBJECT_REF = _m("ObjectReference", _1=("kind", "str"), _2=("namespace", "str"), _3=("name", "str"))
NAME_REF = _m("LocalObjectReference", _1=("name", "str"))

# Kind -> the message of the object. Status (field 3) is not listed: clients send it empty.
KINDS: dict[str, Msg] = {
    "Namespace": _m(
        "Namespace",
        _1=("metadata", "msg", OBJECT_META),
        _2=("spec", "msg", _m("NamespaceSpec", _1=("finalizers", "strs"))),
    ),
    "ConfigMap": _m(
        "ConfigMap",
        _1=("metadata", "msg", OBJECT_META),
        _2=("data", "map"),
        _3=("binaryData", "bytesmap"),
        _4=("immutable", "bool"),
    ),
    "Secret": _m(
        "Secret",
        _1=("metadata", "msg", OBJECT_META),
        _2=("data", "bytesmap"),
        _3=("type", "str"),
        _4=("stringData", "map"),
        _5=("immutable", "bool"),
    ),
    "ServiceAccount": _m(
        "ServiceAccount",
        ("automountServiceAccountToken",),
        _1=("metadata", "msg", OBJECT_META),
        _2=("secrets", "list", OBJECT_REF),
        _3=("imagePullSecrets", "list", NAME_REF),
        _4=("automountServiceAccountToken", "bool"),
    ),
    "PriorityClass": _m(
        "PriorityClass",
        ("value",),
        _1=("metadata", "msg", OBJECT_META),
        _2=("value", "int"),
        _3=("globalDefault", "bool"),
        _4=("description", "str"),
        _5=("preemptionPolicy", "str"),
    ),
    "Job": _m("Job", _1=("metadata", "msg", OBJECT_META), _2=("spec", "msg", JOB_SPEC)),
    "Deployment": _m(
        "Deployment", _1=("metadata", "msg", OBJECT_META), _2=("spec", "msg", DEPLOYMENT_SPEC)
    ),
    "DeleteOptions": DELETE_OPTIONS,
    "Eviction": _m(
        "Eviction", _1=("metadata", "msg", OBJECT_META), _2=("deleteOptions", "msg", DELETE_OPTIONS)
    ),
}


def _to_rfc3339(meta: dict[str, Any]) -> None:
    stamp = meta.pop("creationTimestamp", None)
    if isinstance(stamp, dict) and stamp.get("seconds"):
        from datetime import UTC, datetime

        meta["creationTimestamp"] = datetime.fromtimestamp(stamp["seconds"], UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )


def decode(raw: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object, or 415 naming what can be sent instead."""
    kind = ""
    try:
        if not raw.startswith(MAGIC):
            raise ValueError("missing the k8s protobuf envelope")
        api_version = ""
        body = b""
        for number, _, v in _fields(raw[len(MAGIC) :]):
            if number == 1:
                for n, _, t in _fields(bytes(v)):
                    if n == 1:
                        api_version = bytes(t).decode()
                    elif n == 2:
                        kind = bytes(t).decode()
            elif number == 2:
                body = bytes(v)
        msg = KINDS.get(kind)
        if msg is None:
            raise _Unknown(f"the kind {kind!r}")
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        obj.update(decode_message(body, msg))
        obj.setdefault("metadata", {})
        _to_rfc3339(obj["metadata"])
        for template in _templates(obj):
            _to_rfc3339(template.setdefault("metadata", {}))
        return obj
    except _Unknown as exc:
        raise ApiError(
            415,
            f"this server reads protobuf only for {', '.join(KINDS)} and only the fields "
            f"kubectl sets; {exc.args[0]} is not understood. Send application/json (with "
            "kubectl: write the object to a file and use `kubectl apply -f` or "
            "`kubectl create -f`)",
            "UnsupportedMediaType",
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400, f"the protobuf request body cannot be decoded: {exc}", "BadRequest"
        ) from exc


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    template = (obj.get("spec") or {}).get("template")
    return [template] if isinstance(template, dict) else []
