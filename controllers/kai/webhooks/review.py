"""AdmissionReview ``admission.k8s.io/v1``: the request as plain data, the answer as bytes.

A handler gets a :class:`Request` and returns a :class:`Verdict`; :func:`answer` turns it into
the response body (``allowed``, a ``status`` with code and message when refused, ``warnings``,
and a base64 JSONPatch for a mutation). :func:`json_patch` computes that patch from the
object before and after a mutation.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Request", "ReviewError", "Verdict", "answer", "json_patch", "parse"]

MAX_WARNINGS = 16  # the API server shows each; keep a refusal readable
MAX_WARNING_LENGTH = 400


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


@dataclass(slots=True)
class Request:
    uid: str
    group: str
    version: str
    kind: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    name: str
    namespace: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    sub_resource: str = ""

    @property
    def subject(self) -> dict[str, Any]:
        """The object the request is about: the new one, or the old one for a DELETE."""
        return self.object if self.object is not None else (self.old_object or {})

    @property
    def label(self) -> str:
        """``Kind/name`` (``Kind/namespace/name`` in a namespace) for messages."""
        md = self.subject.get("metadata") or {}
        name = self.name or md.get("name") or md.get("generateName") or "<unnamed>"
        ns = self.namespace or md.get("namespace") or ""
        return f"{self.kind}/{ns}/{name}" if ns else f"{self.kind}/{name}"


@dataclass
class Verdict:
    allowed: bool = True
    message: str = ""
    code: int = 403
    reason: str = "Forbidden"
    warnings: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] | None = None

    @classmethod
    def deny(cls, message: str, *, code: int = 403, warnings: list[str] | None = None) -> Verdict:
        reason = "Forbidden" if code == 403 else "Invalid" if code == 422 else "BadRequest"
        return cls(False, message, code, reason, warnings or [])

    @property
    def outcome(self) -> str:
        """The metric label: ``allowed``, ``warned``, ``mutated`` or ``denied``."""
        if not self.allowed:
            return "denied"
        if self.patch:
            return "mutated"
        return "warned" if self.warnings else "allowed"


#: what a field of the request must be (the API server always sends these types)
_TYPE_NAMES = {
    str: "a string",
    dict: "a mapping",
    list: "a list",
    bool: "a boolean",
    int: "an integer",
}

#: ``request`` fields and their type (null is accepted as absent)
_REQUEST_FIELDS: dict[str, type] = {
    "uid": str,
    "kind": dict,
    "resource": dict,
    "requestKind": dict,
    "requestResource": dict,
    "subResource": str,
    "requestSubResource": str,
    "name": str,
    "namespace": str,
    "operation": str,
    "userInfo": dict,
    "object": dict,
    "oldObject": dict,
    "dryRun": bool,
    "options": dict,
}
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")

# The shapes the webhooks read inside an object, as the API server sends them once it has
# decoded the object with its schema: a mapping of field -> type, or a nested shape (a dict:
# a mapping of those fields; a one-item list: a list of items of that shape; _StrMap: a
# mapping of strings to strings). A field may be absent or null.
_StrMap = "string map"
_QUANTITIES = "quantities"
_META: dict[str, Any] = {
    "name": str,
    "generateName": str,
    "namespace": str,
    "uid": str,
    "resourceVersion": str,
    "labels": _StrMap,
    "annotations": _StrMap,
    "ownerReferences": [{"name": str, "kind": str, "apiVersion": str, "uid": str}],
    "finalizers": [str],
}
_CONTAINER: dict[str, Any] = {
    "name": str,
    "image": str,
    "restartPolicy": str,
    "resources": {"requests": _QUANTITIES, "limits": _QUANTITIES, "claims": [{"name": str}]},
    "env": [{"name": str, "value": str, "valueFrom": dict}],
    "envFrom": [{"prefix": str, "configMapRef": {"name": str}, "secretRef": {"name": str}}],
    "volumeMounts": [{"name": str, "mountPath": str}],
}
_POD: dict[str, Any] = {
    "metadata": _META,
    "spec": {
        "schedulerName": str,
        "runtimeClassName": str,
        "priorityClassName": str,
        "nodeName": str,
        "nodeSelector": _StrMap,
        "containers": [_CONTAINER],
        "initContainers": [_CONTAINER],
        "ephemeralContainers": [_CONTAINER],
        "volumes": [{"name": str}],
        "resourceClaims": [{"name": str}],
        "tolerations": [dict],
        "affinity": dict,
    },
    "status": dict,
}
_TOPOLOGY_CONSTRAINT: dict[str, Any] = {
    "topology": str,
    "requiredTopologyLevel": str,
    "preferredTopologyLevel": str,
}
_POD_GROUP: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "metadata": _META,
    "spec": {
        "minMember": int,
        "minSubGroup": int,
        "queue": str,
        "priorityClassName": str,
        "topologyConstraint": _TOPOLOGY_CONSTRAINT,
        "subGroups": [
            {
                "name": str,
                "parent": str,
                "minMember": int,
                "minSubGroup": int,
                "topologyConstraint": _TOPOLOGY_CONSTRAINT,
            }
        ],
    },
    "status": dict,
}
#: every other kind the webhooks see (kai's CRDs): a spec and a status are mappings
_OBJECT: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "metadata": _META,
    "spec": dict,
    "status": dict,
}
#: (group, kind) -> the shape of its objects
_SHAPES: dict[tuple[str, str], dict[str, Any]] = {
    ("", "Pod"): _POD,
    ("scheduling.run.ai", "PodGroup"): _POD_GROUP,
}


def _check(value: Any, shape: Any, where: str) -> None:
    """Raise ReviewError naming ``where`` when ``value`` does not have ``shape``."""
    if value is None:
        return
    if shape is _StrMap or shape is _QUANTITIES:
        if not isinstance(value, dict):
            raise ReviewError(f"{where} is not a mapping")
        allowed = (str,) if shape is _StrMap else (str, int, float)
        for key, item in value.items():
            if not isinstance(item, allowed) or isinstance(item, bool):
                kind = "a string" if shape is _StrMap else "a quantity"
                raise ReviewError(f"{where}.{key} is not {kind}")
        return
    if isinstance(shape, type):
        if not isinstance(value, shape) or (shape is not bool and isinstance(value, bool)):
            raise ReviewError(f"{where} is not {_TYPE_NAMES.get(shape, shape.__name__)}")
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise ReviewError(f"{where} is not a list")
        for i, item in enumerate(value):
            _check(item, shape[0], f"{where}[{i}]")
        return
    if not isinstance(value, dict):
        raise ReviewError(f"{where} is not a mapping")
    for key, sub in shape.items():
        _check(value.get(key), sub, f"{where}.{key}")


def parse(body: bytes) -> Request:
    """The request of an AdmissionReview v1; ReviewError (answered with HTTP 400) for a body
    the API server would never send: not JSON, not an AdmissionReview v1, a request without
    a uid, or a field of the request or of the object the webhooks read of the wrong type."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from exc
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise ReviewError("the body is not an AdmissionReview")
    if review.get("apiVersion") != "admission.k8s.io/v1":
        raise ReviewError(
            f"AdmissionReview version {_short(review.get('apiVersion'))} is not served; "
            "register the webhook with admissionReviewVersions: [v1]"
        )
    req = review.get("request")
    if not isinstance(req, dict):
        raise ReviewError("the AdmissionReview has no request")
    for key, expected in _REQUEST_FIELDS.items():
        _check(req.get(key), expected, f"request.{key}")
    if not req.get("uid"):
        raise ReviewError("the AdmissionReview has no request.uid")
    operation = req.get("operation") or ""
    if operation not in _OPERATIONS:
        raise ReviewError(
            f"request.operation {_short(operation)} is not one of {', '.join(_OPERATIONS)}"
        )
    kind: dict[str, Any] = req.get("kind") or {}
    _check(kind, {"group": str, "version": str, "kind": str}, "request.kind")
    shape = _SHAPES.get((kind.get("group") or "", kind.get("kind") or ""), _OBJECT)
    obj, old = req.get("object"), req.get("oldObject")
    _check(obj, shape, "request.object")
    _check(old, shape, "request.oldObject")
    return Request(
        uid=req["uid"],
        group=kind.get("group") or "",
        version=kind.get("version") or "",
        kind=kind.get("kind") or "",
        operation=operation,
        name=req.get("name") or "",
        namespace=req.get("namespace") or "",
        object=obj,
        old_object=old,
        dry_run=bool(req.get("dryRun")),
        sub_resource=req.get("subResource") or "",
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _clip(text: str) -> str:
    return text if len(text) <= MAX_WARNING_LENGTH else text[: MAX_WARNING_LENGTH - 3] + "..."


_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_ALLOWED = b',"allowed":true}}'
_PATCHED = b',"allowed":true,"patchType":"JSONPatch","patch":"'


def answer(uid: str, verdict: Verdict) -> bytes:
    if verdict.allowed and not verdict.warnings:
        # the answers to nearly every call (a pod allowed, or allowed with its patch): the
        # bytes orjson would write for the dict below, from templates
        if not verdict.patch:
            return _HEAD + orjson.dumps(uid) + _ALLOWED
        patch = base64.b64encode(orjson.dumps(verdict.patch))
        return _HEAD + orjson.dumps(uid) + _PATCHED + patch + b'"}}'
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "status": "Failure",
            "code": verdict.code,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    warnings = [_clip(w) for w in verdict.warnings[:MAX_WARNINGS]]
    if len(verdict.warnings) > MAX_WARNINGS:
        warnings.append(f"... and {len(verdict.warnings) - MAX_WARNINGS} more warnings")
    if warnings:
        response["warnings"] = warnings
    if verdict.allowed and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(verdict.patch)).decode()
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


def _pointer(path: list[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def json_patch(before: Any, after: Any, path: list[str] | None = None) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``before`` into ``after``.

    Mappings are compared key by key; a list that only grew at its end gets its new items
    appended (``/-``); a list of the same length whose changed items are all mappings (a
    container given its env) is patched inside those items, by index; any other changed list
    or scalar is replaced whole. Indexes are exact: the API server applies the patch to the
    very object it sent, whatever other webhooks did before. The patch stays small, so the API
    server decodes and applies little (replacing ``/spec/containers`` whole for one container's
    env would send the pod's containers back). Values are shared with ``after``, not copied:
    serialise the patch before changing ``after``.
    """
    path = path or []
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": _pointer([*path, key])})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": _pointer([*path, key]), "value": value})
            elif before[key] != value:
                ops.extend(json_patch(before[key], value, [*path, key]))
        return ops
    if before == after:
        return []
    if (
        isinstance(before, list)
        and isinstance(after, list)
        and len(after) > len(before)
        and after[: len(before)] == before
    ):
        # items appended (a volume, an envFrom): only those, not the whole list again
        end = _pointer([*path, "-"])
        return [{"op": "add", "path": end, "value": value} for value in after[len(before) :]]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
        if all(isinstance(before[i], dict) and isinstance(after[i], dict) for i in changed):
            out: list[dict[str, Any]] = []
            for i in changed:
                out.extend(json_patch(before[i], after[i], [*path, str(i)]))
            return out
    return [{"op": "replace", "path": _pointer(path), "value": after}]
