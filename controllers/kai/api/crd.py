"""Turn a kind's JSON Schema into a structural CustomResourceDefinition (apiextensions/v1).

Kubernetes wants an OpenAPI v3 subset ("structural schema"): no ``$ref``, a ``type`` on every node,
no ``type`` lists, no ``const``, numeric ``exclusiveMinimum`` spelled as a boolean, and no
``additionalProperties`` beside ``properties``. This module rewrites the committed JSON Schema into
that form, so the CRD and the schema come from the same model and cannot drift:

- ``$ref`` is inlined (a field's own description wins over the referenced model's);
- an optional field (``[T, "null"]`` or ``anyOf`` with ``null``) becomes ``T`` with
  ``nullable: true``: an explicit ``null`` means "omitted" to our models, and a non-nullable field
  would make server-side apply refuse it (a plain create prunes it);
- a quantity (a YAML number of any form, or a quantity string) becomes an untyped scalar node
  (``x-kubernetes-preserve-unknown-fields``) whose strings must match the quantity grammar.
  Kubernetes' int-or-string form would refuse ``1.5`` or ``0.75``, which are valid quantities;
  the API server applies ``pattern`` to strings only, so numbers of every form pass and a bad
  quantity string is still refused. What the schema cannot express there (a boolean or a
  mapping where a quantity belongs) is refused by the admission webhook, as by ``kai validate``;
- ``additionalProperties: false`` is dropped (unknown fields are pruned, or rejected by strict
  field validation) and ``additionalProperties: true`` becomes
  ``x-kubernetes-preserve-unknown-fields``;
- ``uniqueItems`` on scalar items becomes ``x-kubernetes-list-type: set``;
- a recursive model is inlined ``RECURSION_DEPTH`` times, then kept as an unchecked object;
- titles, examples and defaults are dropped (the API server would otherwise write defaults into
  stored objects); descriptions and CEL ``x-kubernetes-validations`` are kept.

Anything else is refused with an error naming the schema path, so a new model construct cannot
silently produce a CRD the API server would reject.
"""

from __future__ import annotations

from typing import Any

from kai.api.base import TopLevelObject
from kai.api.structural import structural_problems
from kai.api.types import QUANTITY_PATTERN

__all__ = ["RECURSION_DEPTH", "CRDError", "crd_manifest", "structural_schema"]

# How many times a recursive model is inlined (levels of a queue tree checked by the CRD).
RECURSION_DEPTH = 6

# A quantity: any JSON number, or a string in the quantity grammar. No ``type`` (a structural
# schema has no number-or-string type; int-or-string refuses 1.5), so it is a preserved scalar
# whose strings the API server checks against ``pattern``.
_QUANTITY_NODE = {
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-preserve-unknown-fields": True,
}
# Keywords copied unchanged into the structural schema.
_KEEP = {
    "description",
    "enum",
    "format",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "pattern",
    "required",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
}
_DROP = {"title", "examples", "default", "$schema", "$id", "$defs", "$comment"}
# The formats the API server understands; others would only draw a warning, so refuse them.
_FORMATS = {"date-time", "date", "int32", "int64", "float", "double", "byte", "uri", "email"}


class CRDError(ValueError):
    """A JSON Schema construct that has no structural CRD equivalent."""


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node == {"type": "null"}


def _is_quantity(node: dict[str, Any]) -> bool:
    branches = node.get("anyOf")
    return (
        isinstance(branches, list)
        and len(branches) == 2
        and {"type": "number"} in branches
        and {"type": "string", "pattern": QUANTITY_PATTERN} in branches
    )


class _Translator:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def resolve(self, ref: str, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in self.defs:
            raise CRDError(f"{path}: unresolvable $ref {ref!r}")
        target: dict[str, Any] = self.defs[ref[len(prefix) :]]
        return target

    def node(
        self, schema: dict[str, Any], path: str, stack: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        schema = dict(schema)
        if "$ref" in schema:
            return self._reference(schema, path, stack)
        if "anyOf" in schema:
            return self._any_of(schema, path, stack)
        for key in ("oneOf", "allOf", "not", "prefixItems", "patternProperties", "if"):
            if key in schema:
                raise CRDError(f"{path}: {key!r} has no structural form here")
        kind = _structural_type(schema, path)
        out: dict[str, Any] = {"enum": [schema["const"]]} if "const" in schema else {}
        out["type"] = kind
        if _allows_null(schema):
            out["nullable"] = True
        for key, value in schema.items():
            if key in _DROP or key in ("type", "const", "anyOf"):
                continue
            if key in ("properties", "items", "additionalProperties"):
                self._nested(out, schema, key, value, path, stack)
            else:
                _keyword(out, schema, key, value, path)
        if (
            out["type"] == "object"
            and "properties" not in out
            and "additionalProperties" not in out
        ):
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    def _reference(
        self, schema: dict[str, Any], path: str, stack: tuple[str, ...]
    ) -> dict[str, Any]:
        """A ``$ref`` inlined, its CEL rules and the referring field's keywords merged in."""
        ref = schema.pop("$ref")
        if stack.count(ref) >= RECURSION_DEPTH:
            # A recursive model (a queue's children) cannot be inlined forever: below this
            # depth the CRD keeps the objects as they are and admission checks them.
            return {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "description": f"Nested deeper than {RECURSION_DEPTH} levels: not checked by "
                "the CRD schema (kai validate and the admission webhook check it).",
            }
        base = dict(self.resolve(ref, path, stack))
        rules = base.get("x-kubernetes-validations", []) + schema.pop(
            "x-kubernetes-validations", []
        )
        base.update(schema)
        if rules:
            base["x-kubernetes-validations"] = rules
        return self.node(base, path, (*stack, ref))

    def _any_of(self, schema: dict[str, Any], path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        """``X | None`` becomes nullable X; a number-or-string quantity an untyped scalar."""
        branches = [b for b in schema["anyOf"] if not _is_null(b)]
        nullable = len(branches) < len(schema["anyOf"])
        if len(branches) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            merged = dict(branches[0])
            merged.update(rest)  # the field's description wins
            out = self.node(merged, path, stack)
        else:
            schema["anyOf"] = branches
            if not _is_quantity(schema):
                raise CRDError(f"{path}: anyOf {branches} has no structural form")
            out = {k: v for k, v in schema.items() if k == "description"}
            out.update(_QUANTITY_NODE)
        if nullable:
            out["nullable"] = True
        return out

    def _nested(
        self,
        out: dict[str, Any],
        schema: dict[str, Any],
        key: str,
        value: Any,
        path: str,
        stack: tuple[str, ...],
    ) -> None:
        """properties, items and additionalProperties: the schemas inside, translated."""
        if key == "properties":
            out["properties"] = {
                name: self.node(sub, f"{path}.{name}", stack) for name, sub in value.items()
            }
        elif key == "items":
            out["items"] = self.node(value, f"{path}[]", stack)
        elif value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(value, dict):
            if "properties" in schema:
                raise CRDError(f"{path}: additionalProperties beside properties")
            out["additionalProperties"] = self.node(value, f"{path}{{}}", stack)
        # additionalProperties False: unknown fields are pruned by the API server


def _allows_null(schema: dict[str, Any]) -> bool:
    """``type: [T, "null"]`` or ``null`` among the enum values: an explicit null is valid."""
    kind = schema.get("type")
    enum = schema.get("enum")
    return (isinstance(kind, list) and "null" in kind) or (isinstance(enum, list) and None in enum)


def _structural_type(schema: dict[str, Any], path: str) -> str:
    """The one type of a node: ``[T, "null"]`` is T; a constant's type when none is given."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise CRDError(f"{path}: type {kind} has no structural form")
        kind = kinds[0]
    if "const" in schema:
        kind = kind or type_of(schema["const"], path)
    if kind is None:
        raise CRDError(f"{path}: no type")
    return str(kind)


def _keyword(out: dict[str, Any], schema: dict[str, Any], key: str, value: Any, path: str) -> None:
    """One keyword of a node that holds no nested schema."""
    if key == "enum":
        out["enum"] = [v for v in value if v is not None]
    elif key == "format":
        if value not in _FORMATS:
            raise CRDError(f"{path}: format {value!r} is not understood by Kubernetes")
        out["format"] = value
    elif key == "uniqueItems":
        if value:
            items = schema.get("items", {})
            if "$ref" in items or items.get("type") in ("object", "array"):
                raise CRDError(f"{path}: uniqueItems needs scalar items")
            out["x-kubernetes-list-type"] = "set"
    elif key in ("exclusiveMinimum", "exclusiveMaximum"):
        bound = "minimum" if key == "exclusiveMinimum" else "maximum"
        out[bound] = value
        out[key] = True
    elif key in _KEEP:
        out[key] = value
    else:
        raise CRDError(f"{path}: keyword {key!r} has no structural form")


def type_of(value: object, path: str) -> str:
    """The OpenAPI type of a constant."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise CRDError(f"{path}: constant {value!r} has no OpenAPI type")


def _sorted(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_sorted(item) for item in node]
    return node


def structural_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` for a kind's JSON Schema document (keys sorted)."""
    translator = _Translator(schema.get("$defs", {}))
    root = translator.node(schema, "")
    props = root["properties"]
    # The API server owns these; a CRD may not constrain metadata beyond name/generateName.
    props["apiVersion"] = {"type": "string", "description": props["apiVersion"].get("description")}
    props["kind"] = {"type": "string", "description": props["kind"].get("description")}
    props["metadata"] = {"type": "object"}
    required = [r for r in root.get("required", []) if r not in ("apiVersion", "kind", "metadata")]
    if required:
        root["required"] = required
    else:
        root.pop("required", None)
    for key in ("apiVersion", "kind"):
        if not props[key]["description"]:
            del props[key]["description"]
    root.pop("x-kubernetes-preserve-unknown-fields", None)
    result: dict[str, Any] = _sorted(root)
    problems = structural_problems(result)
    if problems:
        raise CRDError("the CRD schema is not structural: " + "; ".join(problems))
    return result


def crd_manifest(model: type[TopLevelObject], schema: dict[str, Any]) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind (one served and stored version)."""
    version: dict[str, Any] = {
        "name": model.API_VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": structural_schema(schema)},
    }
    if model.HAS_STATUS:
        version["subresources"] = {"status": {}}
    if model.PRINTER_COLUMNS:
        version["additionalPrinterColumns"] = [
            column.model_dump(exclude_none=True) for column in model.PRINTER_COLUMNS
        ]
    names: dict[str, Any] = {
        "kind": model.KIND,
        "listKind": f"{model.KIND}List",
        "plural": model.PLURAL,
        "singular": model.KIND.lower(),
    }
    if model.SHORT_NAMES:
        names["shortNames"] = list(model.SHORT_NAMES)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{model.PLURAL}.{model.API_GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kai"},
        },
        "spec": {
            "group": model.API_GROUP,
            "names": names,
            "scope": model.SCOPE,
            "versions": [version],
        },
    }
