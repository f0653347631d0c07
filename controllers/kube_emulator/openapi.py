"""A minimal OpenAPI v3 discovery: one document per group-version listing each resource's
paths, with the ``x-kubernetes-group-version-kind`` of its operations and the query parameters
they accept.

It carries no component schemas. That is enough for kubectl: it learns that the server does
field validation itself (so ``kubectl apply`` needs no ``--validate=false``), and for patches of
built-in kinds it falls back to its compiled-in types, for custom resources to a JSON merge
patch — exactly what it does against a real server for kinds it has no schema for."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore

_WRITE_PARAMS = ["dryRun", "fieldManager", "fieldValidation", "pretty"]


def _param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def group_version_doc(core: ApiCore, group: str, version: str) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    for rt in sorted(list(core.types.values()), key=lambda r: r.plural):
        if rt.group != group or version not in rt.versions:
            continue
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        base = (
            f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
            if rt.namespaced
            else f"{prefix}/{rt.plural}"
        )
        gvk = {"group": group, "version": version, "kind": rt.kind}

        def op(action: str, params: list[str], gvk: dict[str, str] = gvk) -> dict[str, Any]:
            return {
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [_param(p) for p in params],
                "responses": {"200": {"description": "OK"}},
            }

        paths[base] = {
            "get": op(
                "list",
                ["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"],
            ),
            "post": op("post", _WRITE_PARAMS),
            "delete": op("deletecollection", ["labelSelector", "fieldSelector"]),
        }
        paths[base + "/{name}"] = {
            "get": op("get", ["pretty"]),
            "put": op("put", _WRITE_PARAMS),
            "patch": op("patch", [*_WRITE_PARAMS, "force"]),
            "delete": op("delete", ["gracePeriodSeconds", "propagationPolicy", "dryRun"]),
        }
        for sub in sorted(rt.subresources):
            if sub == "status":
                paths[f"{base}/{{name}}/status"] = {
                    "get": op("get", ["pretty"]),
                    "put": op("put", _WRITE_PARAMS),
                    "patch": op("patch", [*_WRITE_PARAMS, "force"]),
                }
    if not paths:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kai.sim)", "version": version},
        "paths": paths,
        "components": {"schemas": {}},
    }


def index(core: ApiCore) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for rt in list(core.types.values()):
        for v in rt.versions:
            if (rt.group, v) in seen:
                continue
            seen.add((rt.group, v))
            rel = f"apis/{rt.group}/{v}" if rt.group else f"api/{v}"
            doc = group_version_doc(core, rt.group, v)
            digest = hashlib.sha256(orjson.dumps(doc)).hexdigest()[:32].upper()
            entries[rel] = {"serverRelativeURL": f"/openapi/v3/{rel}?hash={digest}"}
    return {"paths": entries}


# The OpenAPI v2 document: kubectl reads it (in protobuf, the gnostic ``openapi_v2.Document``)
# only where v3 has nothing for a kind -- a ``kind: List`` file it validates item by item.
# Without schemas, kubectl validates none of the items itself and sends each with
# ``fieldValidation=Strict``, so the server checks them, as it does for every other write.
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_V2_TITLE = "Kubernetes (kai.sim)"
_V2_VERSION = "v1"


def _pb_string(field: int, text: str) -> bytes:
    data = text.encode()
    # strings here are short: one-byte lengths
    return bytes([(field << 3) | 2, len(data)]) + data


def v2_document(accept: str) -> tuple[bytes, str]:
    """The body and content type of ``/openapi/v2``: ``swagger``, ``info`` and no paths or
    definitions; protobuf unless the client asks for JSON only."""
    if "protobuf" not in accept and "json" in accept:
        body = {"swagger": "2.0", "info": {"title": _V2_TITLE, "version": _V2_VERSION}}
        return orjson.dumps({**body, "paths": {}}), "application/json"
    info = _pb_string(1, _V2_TITLE) + _pb_string(2, _V2_VERSION)
    return _pb_string(1, "2.0") + bytes([(2 << 3) | 2, len(info)]) + info, V2_PROTOBUF
