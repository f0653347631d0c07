"""JSON Schema (draft 2020-12) of a top-level kind, as committed under ``schemas/``.

The schema comes from the pydantic model, then is tidied so that it reads well and is stable:
titles are dropped (descriptions carry the meaning), ``apiVersion`` and ``kind`` become constants,
``null`` defaults disappear, and keys are sorted when serialised. Every object node a model
defines keeps ``additionalProperties: false``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from kai.api.base import TopLevelObject

__all__ = ["SCHEMA_DIALECT", "dumps_schema", "model_json_schema", "schema_id"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_ID_BASE = "https://kai.scheduler/schemas"

# Keys whose value is a map of name -> schema (the names are data, not keywords).
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties", "dependentSchemas")
# Keys whose value is a schema or a list of schemas.
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def schema_id(model: type[TopLevelObject]) -> str:
    """The ``$id`` of a kind's schema, which is also its path under ``schemas/``."""
    return f"{_ID_BASE}/{model.API_GROUP}/{model.KIND}.{model.API_VERSION}.json"


def _fold_null(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [{type: T, ...}, {type: null}]`` -> ``{type: [T, null], ...}``.

    Pydantic spells an optional field as an ``anyOf`` with ``null``; a plain type list validates
    the same values and gives validators a clearer message ("is not of type 'number', 'null'").
    Branches holding a ``$ref`` or several types stay as they are.
    """
    branches = node.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or {"type": "null"} not in branches:
        return node
    other = branches[0] if branches[1] == {"type": "null"} else branches[1]
    if not isinstance(other.get("type"), str) or "$ref" in other or "anyOf" in other:
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    merged.update(other)
    merged["type"] = [other["type"], "null"]
    if "enum" in merged:
        merged["enum"] = [*merged["enum"], None]
    return merged


def _tidy(node: Any) -> Any:
    """Drop titles and null defaults, fold optional types, recursively; property names stay."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = _fold_null(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "default" and value is None:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _tidy(sub) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES or key in _SCHEMA_LISTS:
            out[key] = _tidy(value)
        else:
            out[key] = value
    return out


def model_json_schema(model: type[TopLevelObject]) -> dict[str, Any]:
    """The JSON Schema document of a top-level kind (a fresh copy the caller may change)."""
    raw = model.model_json_schema(mode="validation", schema_generator=GenerateJsonSchema)
    schema: dict[str, Any] = _tidy(raw)
    description = model.DESCRIPTION or schema.get("description", "")
    props = schema["properties"]
    props["apiVersion"] = {
        "const": model.api_version_string(),
        "description": props["apiVersion"].get("description", ""),
        "type": "string",
    }
    props["kind"] = {
        "const": model.KIND,
        "description": props["kind"].get("description", ""),
        "type": "string",
    }
    document: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": schema_id(model),
        **schema,
    }
    if description:
        document["description"] = description
    return copy.deepcopy(document)


def dumps_schema(schema: dict[str, Any]) -> str:
    """Serialise a schema deterministically: sorted keys, two-space indent, final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
