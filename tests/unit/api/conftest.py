"""Helpers for the kai.api tests: validate an object the way the API server would, given a CRD.

The API server prunes ``null`` values of non-nullable fields, rejects unknown fields under strict
field validation, checks the OpenAPI schema, then runs the CEL rules with ``number`` fields typed
as doubles. ``crd_validate`` emulates that with jsonschema (draft 4, which has OpenAPI's boolean
``exclusiveMinimum``) and cel-python.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kai.api.crd import crd_manifest
from kai.api.registry import KindInfo, json_schema

REPO = Path(__file__).resolve().parents[3]
KAI_REFERENCE = REPO.parent / "shared" / "kai-reference"


def _strict_openapi(node: Any) -> Any:
    """An OpenAPI structural schema as a draft-4 JSON Schema that refuses unknown fields."""
    if isinstance(node, list):
        return [_strict_openapi(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict_openapi(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if "properties" in node:
        out["properties"] = {k: _strict_openapi(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


def prune_nulls(value: Any) -> Any:
    """Drop null-valued keys, as the API server does for non-nullable fields."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


def _typed(value: Any, schema: dict[str, Any]) -> Any:
    """Numbers of `type: number` fields as floats, as Kubernetes' CEL types them (double)."""
    kind = schema.get("type")
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            k: _typed(v, props[k] if k in props else extra if isinstance(extra, dict) else {})
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_typed(v, schema.get("items", {})) for v in value]
    return value


def cel_problems(value: Any, schema: dict[str, Any], old: Any = None, path: str = "") -> list[str]:
    """Evaluate every CEL rule of the schema on the value (transition rules only with old)."""
    celpy = pytest.importorskip("celpy")
    problems: list[str] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        uses_old = "oldSelf" in rule["rule"]
        if uses_old and old is None:
            continue
        activation = {"self": celpy.json_to_cel(_typed(value, schema))}
        if uses_old:
            activation["oldSelf"] = celpy.json_to_cel(_typed(old, schema))
        result = env.program(env.compile(rule["rule"])).evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType):
            raise AssertionError(f"{path or '<root>'}: rule {rule['rule']!r} gave {result!r}")
        if not result:
            problems.append(f"{path or '<root>'}: {rule['message']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub_schema is None:
                continue
            sub_old = old.get(key) if isinstance(old, dict) else None
            problems += cel_problems(sub, sub_schema, sub_old, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, sub in enumerate(value):
            # Items of atomic lists cannot be correlated with old items; no transition rules.
            problems += cel_problems(sub, schema["items"], None, f"{path}[{i}]")
    return problems


@functools.cache
def _openapi_schema(info: KindInfo) -> dict[str, Any]:
    crd = crd_manifest(info.model, json_schema(info))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    return copy.deepcopy(_openapi_schema(info))


def crd_problems(
    info: KindInfo, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> list[str]:
    """What the API server would say about ``obj`` (schema errors, then CEL rule messages)."""
    schema = openapi_schema(info)
    pruned = prune_nulls(obj)
    validator = jsonschema.Draft4Validator(_strict_openapi(schema))
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(pruned)
    ]
    if errors:
        return errors
    return cel_problems(pruned, schema, prune_nulls(old) if old is not None else None)


@pytest.fixture(scope="session")
def crd_check() -> Callable[..., list[str]]:
    celpy = pytest.importorskip("celpy")
    # The CEL parser raises the recursion limit on first use; do it outside any hypothesis run.
    env = celpy.Environment()
    env.program(env.compile("[1].all(x, x > 0)")).evaluate({})
    return crd_problems
