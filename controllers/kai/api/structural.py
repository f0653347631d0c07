"""Checks that a CRD's ``openAPIV3Schema`` is *structural*, as the Kubernetes API server demands.

The rules (apiextensions-apiserver, "Specifying a structural schema"):

1. every node (the root, each property, additionalProperties and items schema) has a ``type``,
   unless it is ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``;
2. inside ``allOf``/``anyOf``/``oneOf``/``not`` no ``type``, ``description``, ``default``,
   ``additionalProperties`` or ``nullable`` (except the int-or-string ``anyOf`` form), and every
   field named there is also specified outside;
3. ``metadata`` may only restrict ``name`` and ``generateName``;
4. no ``$ref``, ``definitions``, ``$schema``, ``id``; ``additionalProperties`` is never ``false``
   and never beside ``properties``; no ``uniqueItems: true``; ``items`` is one schema; ``type``
   is one of the OpenAPI types; a ``set`` list has scalar items, a ``map`` list names its keys.

:func:`structural_problems` returns every violation with its schema path; the generator refuses
to write a CRD that has one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["structural_problems"]

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
_FORBIDDEN_IN_JUNCTOR = ("type", "description", "default", "additionalProperties", "nullable")
_FORBIDDEN = ("$ref", "definitions", "$defs", "$schema", "id", "$id", "const", "prefixItems")
_INT_OR_STRING_ANYOF = [{"type": "integer"}, {"type": "string"}]


def _junctor_fields(node: dict[str, Any]) -> tuple[set[str], bool, bool]:
    """Property names, and whether items / additionalProperties are named, inside junctors."""
    props: set[str] = set()
    has_items = has_additional = False
    for key in _JUNCTORS:
        value = node.get(key)
        branches = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
        for branch in branches:
            if not isinstance(branch, dict):
                continue
            props |= set(branch.get("properties", {}))
            has_items = has_items or "items" in branch
            has_additional = has_additional or "additionalProperties" in branch
            nested_props, nested_items, nested_additional = _junctor_fields(branch)
            props |= nested_props
            has_items = has_items or nested_items
            has_additional = has_additional or nested_additional
    return props, has_items, has_additional


def _check_junctor_branch(branch: Any, path: str, problems: list[str], int_or_string: bool) -> None:
    if not isinstance(branch, dict):
        problems.append(f"{path}: a junctor branch must be a schema")
        return
    if int_or_string and branch in _INT_OR_STRING_ANYOF:
        return
    for key in _FORBIDDEN_IN_JUNCTOR:
        if key in branch:
            problems.append(f"{path}: {key!r} is not allowed inside allOf/anyOf/oneOf/not")
    for key in _JUNCTORS:
        value = branch.get(key)
        for i, sub in enumerate(value if isinstance(value, list) else [value] if value else []):
            _check_junctor_branch(sub, f"{path}.{key}[{i}]", problems, False)
    for name, sub in branch.get("properties", {}).items():
        _check_junctor_branch(sub, f"{path}.properties.{name}", problems, False)
    if isinstance(branch.get("items"), dict):
        _check_junctor_branch(branch["items"], f"{path}.items", problems, False)


def _check_node(node: Any, path: str, problems: list[str]) -> None:
    if not isinstance(node, dict):
        problems.append(f"{path}: a schema must be a mapping")
        return
    for key in _FORBIDDEN:
        if key in node:
            problems.append(f"{path}: {key!r} is not allowed in a structural schema")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    _check_type(node, path, problems, int_or_string)
    _check_shape(node, path, problems)
    _check_list_type(node, path, problems)
    _check_rules(node, path, problems)
    _check_junctors(node, path, problems, int_or_string)
    additional = node.get("additionalProperties")
    for name, sub in node.get("properties", {}).items():
        _check_node(sub, f"{path}.properties.{name}", problems)
    if isinstance(additional, dict):
        _check_node(additional, f"{path}.additionalProperties", problems)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], f"{path}.items", problems)


def _check_type(node: dict[str, Any], path: str, problems: list[str], int_or_string: bool) -> None:
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    kind = node.get("type")
    if kind is None:
        if not (int_or_string or preserve):
            problems.append(f"{path}: missing type")
    elif not isinstance(kind, str) or kind not in _TYPES:
        problems.append(f"{path}: type must be one of {sorted(_TYPES)}, got {kind!r}")
    if int_or_string:
        if kind is not None:
            problems.append(f"{path}: x-kubernetes-int-or-string must not have a type")
        if "anyOf" in node and node["anyOf"] != _INT_OR_STRING_ANYOF:
            problems.append(f"{path}: int-or-string anyOf must be [integer, string]")
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        problems.append(f"{path}: x-kubernetes-preserve-unknown-fields must be true or absent")


def _check_shape(node: dict[str, Any], path: str, problems: list[str]) -> None:
    """properties, additionalProperties and items: allowed where the type says so."""
    kind = node.get("type")
    if node.get("uniqueItems") is True:
        problems.append(f"{path}: uniqueItems is forbidden; use x-kubernetes-list-type: set")
    additional = node.get("additionalProperties")
    if additional is False:
        problems.append(f"{path}: additionalProperties: false is forbidden (fields are pruned)")
    if additional is not None and "properties" in node:
        problems.append(f"{path}: additionalProperties and properties are mutually exclusive")
    if "items" in node and not isinstance(node["items"], dict):
        problems.append(f"{path}: items must be a single schema")
    if ("properties" in node or isinstance(additional, dict)) and kind not in (None, "object"):
        problems.append(f"{path}: properties on a node of type {kind!r}")
    if "items" in node and kind not in (None, "array"):
        problems.append(f"{path}: items on a node of type {kind!r}")
    if kind == "array" and "items" not in node:
        problems.append(f"{path}: an array needs items")


def _check_list_type(node: dict[str, Any], path: str, problems: list[str]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    if list_type is None:
        return
    items = node.get("items", {})
    if list_type not in ("atomic", "set", "map"):
        problems.append(f"{path}: unknown x-kubernetes-list-type {list_type!r}")
    elif list_type == "set" and items.get("type") in ("object", "array"):
        problems.append(f"{path}: a set list needs scalar items")
    elif list_type == "map" and not node.get("x-kubernetes-list-map-keys"):
        problems.append(f"{path}: a map list needs x-kubernetes-list-map-keys")


def _check_rules(node: dict[str, Any], path: str, problems: list[str]) -> None:
    key = "x-kubernetes-validations"
    for i, rule in enumerate(node.get(key, [])):
        if not isinstance(rule, dict) or not rule.get("rule"):
            problems.append(f"{path}.{key}[{i}]: a validation needs a rule")
        elif not rule.get("message") and not rule.get("messageExpression"):
            problems.append(f"{path}.{key}[{i}]: a validation needs a message")


def _check_junctors(
    node: dict[str, Any], path: str, problems: list[str], int_or_string: bool
) -> None:
    """allOf/anyOf/oneOf/not may only restate what the node itself declares."""
    props, junctor_items, junctor_additional = _junctor_fields(node)
    missing = props - set(node.get("properties", {}))
    if missing:
        problems.append(f"{path}: fields {sorted(missing)} named only inside allOf/anyOf/oneOf/not")
    if junctor_items and "items" not in node:
        problems.append(f"{path}: items named only inside a junctor")
    if junctor_additional and "additionalProperties" not in node:
        problems.append(f"{path}: additionalProperties named only inside a junctor")
    for key in _JUNCTORS:
        value = node.get(key)
        for i, sub in enumerate(value if isinstance(value, list) else [value] if value else []):
            _check_junctor_branch(sub, f"{path}.{key}[{i}]", problems, int_or_string)


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """Every structural-schema violation of an ``openAPIV3Schema``, as ``path: message``."""
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("openAPIV3Schema: the root must have type object")
    _check_node(schema, "openAPIV3Schema", problems)
    metadata = schema.get("properties", {}).get("metadata")
    if isinstance(metadata, dict):
        extra = set(metadata.get("properties", {})) - {"name", "generateName"}
        if extra:
            problems.append(
                "openAPIV3Schema.properties.metadata: metadata may only restrict name and"
                f" generateName, not {sorted(extra)}"
            )
    return problems
