"""Validate custom resources against a CRD version's ``openAPIV3Schema``.

Covers the structural-schema keywords CRDs use: ``type``, ``properties``,
``additionalProperties``, ``items``, ``required``, ``enum``, ``minimum``/``maximum`` (and the
exclusive forms), ``minLength``/``maxLength``, ``pattern``, ``minItems``/``maxItems``,
``minProperties``/``maxProperties``, ``nullable``, ``allOf``/``anyOf``/``oneOf``/``not`` (as value
checks), ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-int-or-string`` and
``x-kubernetes-embedded-resource``, and CEL ``x-kubernetes-validations`` rules (the subset
:mod:`kube_emulator.cel` interprets; transition rules with ``oldSelf`` on updates; rules
beyond the subset are skipped). Defaults are not applied.

Unknown fields are reported separately from value errors so the caller can reject them
(fieldValidation=Strict) or prune them (Warn/Ignore). Field paths use the real server's
spelling: ``spec.queues[0].name``.
"""

from __future__ import annotations

from typing import Any

from kube_emulator.cel import CelError, UnsupportedRule, evaluate, uses_old_self
from kube_emulator.regex import RegexError, search

Cause = dict[str, str]

_JSON_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def _matches(pattern: str, value: str) -> bool:
    """Go regexp (RE2) semantics, linear time; a pattern Go refuses (a CRD created before the
    check, or never checked) matches nothing."""
    try:
        return search(pattern, value)
    except RegexError:
        return False


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "object" if isinstance(value, dict) else "array"
    return str(value)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "null" if value is None else "object"


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _JSON_TYPES.get(typ)
    return expected is None or isinstance(value, expected)


class Validator:
    """One pass over an object; collects value errors and unknown-field paths."""

    def __init__(self) -> None:
        self.errors: list[Cause] = []
        self.rule_errors: list[Cause] = []  # failed CEL rules, reported only if all else passes
        self.unknown: list[str] = []
        self.skipped_rules: list[str] = []

    def check(
        self, value: Any, schema: dict[str, Any], path: str, prune: bool = False, old: Any = None
    ) -> None:
        if value is None:
            if not schema.get("nullable"):
                self.errors.append(
                    {
                        "reason": "FieldValueTypeInvalid",
                        "field": path,
                        "message": f'Invalid value: "null": {path} in body must be of type '
                        f'{schema.get("type", "object")}: "null"',
                    }
                )
            return
        if schema.get("x-kubernetes-int-or-string"):
            if not (isinstance(value, str) or _type_ok(value, "integer")):
                self.errors.append(self._type_err(value, path, "integer-or-string"))
            else:
                self._values(value, {k: v for k, v in schema.items() if k != "anyOf"}, path)
            return
        typ = schema.get("type")
        if typ and not _type_ok(value, typ):
            self.errors.append(self._type_err(value, path, typ))
            return
        self._values(value, schema, path)
        for sub in schema.get("allOf") or []:
            self._values(value, sub, path)
        if isinstance(value, dict):
            self._object(value, schema, path, prune, old)
        elif isinstance(value, list):
            self._array(value, schema, path, prune)
        rules = schema.get("x-kubernetes-validations")
        if rules:
            self._rules(value, old, rules, path, typ or "object")

    def _rules(
        self, value: Any, old: Any, rules: list[dict[str, Any]], path: str, typ: str
    ) -> None:
        for rule in rules:
            text = rule.get("rule") or ""
            if uses_old_self(text) and old is None:
                continue  # a transition rule: only checked when there is an old value
            where = path + (rule.get("fieldPath") or "")
            try:
                ok = evaluate(text, value, old)
                why = rule.get("message") or f"failed rule: {text}"
            except UnsupportedRule:
                self.skipped_rules.append(text)
                continue
            except CelError as exc:
                ok, why = False, f"{exc} evaluating rule: {text}"
            if not ok:
                # the real server shows a scalar's value, not an object's or a list's
                shown = "" if isinstance(value, (dict, list)) else f"{_show(value)}: "
                self.rule_errors.append(
                    {
                        "reason": rule.get("reason") or "FieldValueInvalid",
                        "field": where,
                        "message": f"Invalid value: {shown}{why}",
                    }
                )

    def _type_err(self, value: Any, path: str, typ: str) -> Cause:
        got = f'"{_json_type(value)}"'
        return {
            "reason": "FieldValueTypeInvalid",
            "field": path,
            "message": f"Invalid value: {got}: {path} in body must be of type {typ}: {got}",
        }

    def _err(self, path: str, msg: str, reason: str = "FieldValueInvalid") -> None:
        self.errors.append({"reason": reason, "field": path, "message": msg})

    def _values(self, value: Any, schema: dict[str, Any], path: str) -> None:
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            allowed = ", ".join(_show(e) for e in enum)
            self._err(
                path,
                f"Unsupported value: {_show(value)}: supported values: {allowed}",
                "FieldValueNotSupported",
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._number_range(value, schema, path)
        if isinstance(value, str):
            self._string(value, schema, path)
        if isinstance(value, (list, dict)):
            self._size(value, schema, path)
        self._combinators(value, schema, path)

    def _number_range(self, value: float, schema: dict[str, Any], path: str) -> None:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and (value < lo or (schema.get("exclusiveMinimum") and value == lo)):
            op = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            self._err(path, f"Invalid value: {_show(value)}: {path} in body should be {op} {lo}")
        if hi is not None and (value > hi or (schema.get("exclusiveMaximum") and value == hi)):
            op = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            self._err(path, f"Invalid value: {_show(value)}: {path} in body should be {op} {hi}")

    def _string(self, value: str, schema: dict[str, Any], path: str) -> None:
        if "minLength" in schema and len(value) < schema["minLength"]:
            self._err(
                path,
                f"Invalid value: {_show(value)}: {path} in body should be at "
                f"least {schema['minLength']} chars long",
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self._err(
                path,
                f"Too long: may not be more than {schema['maxLength']} bytes",
                "FieldValueTooLong",
            )
        pattern = schema.get("pattern")
        if pattern and not _matches(pattern, value):
            self._err(
                path, f"Invalid value: {_show(value)}: {path} in body should match '{pattern}'"
            )

    def _size(self, value: list[Any] | dict[str, Any], schema: dict[str, Any], path: str) -> None:
        """minItems/maxItems of an array, minProperties/maxProperties of an object."""
        low, high, unit = (
            ("minItems", "maxItems", "items")
            if isinstance(value, list)
            else ("minProperties", "maxProperties", "properties")
        )
        if low in schema and len(value) < schema[low]:
            self._err(
                path,
                f"Invalid value: {len(value)}: {path} in body should have at "
                f"least {schema[low]} {unit}",
            )
        if high in schema and len(value) > schema[high]:
            # kube-apiserver says "items" for objects too
            self._err(
                path,
                f"Too many: {len(value)}: must have at most {schema[high]} items",
                "FieldValueTooMany",
            )

    def _passes(self, value: Any, schema: dict[str, Any], path: str) -> bool:
        probe = Validator()
        probe._values(value, schema, path)
        probe._required_only(value, schema, path)
        return not probe.errors

    def _combinators(self, value: Any, schema: dict[str, Any], path: str) -> None:
        """anyOf, oneOf and not."""
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if not options:
                continue
            passing = sum(self._passes(value, option, path) for option in options)
            if passing < 1 or (key == "oneOf" and passing > 1):
                self._err(
                    path,
                    f"Invalid value: {_show(value)}: {path} in body must validate "
                    f"{'one and only one' if key == 'oneOf' else 'at least one'} "
                    f"schema ({key})",
                )
        negated = schema.get("not")
        if negated and self._passes(value, negated, path):
            self._err(
                path,
                f"Invalid value: {_show(value)}: {path} in body should not "
                f"validate the schema (not)",
            )

    def _required_only(self, value: Any, schema: dict[str, Any], path: str) -> None:
        if isinstance(value, dict):
            for name in schema.get("required") or []:
                if name not in value:
                    self._err(
                        f"{path}.{name}" if path else name, "Required value", "FieldValueRequired"
                    )
        typ = schema.get("type")
        if typ and not _type_ok(value, typ):
            self.errors.append(self._type_err(value, path, typ))

    def _object(
        self, value: dict[str, Any], schema: dict[str, Any], path: str, prune: bool, old: Any
    ) -> None:
        props: dict[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for name in schema.get("required") or []:
            if name not in value:
                self._err(
                    f"{path}.{name}" if path else name, "Required value", "FieldValueRequired"
                )
        for key in list(value):
            child = f"{path}.{key}" if path else key
            old_child = old.get(key) if isinstance(old, dict) else None
            if key in props:
                self.check(value[key], props[key], child, prune, old_child)
            elif isinstance(additional, dict):
                where = f"{path}.{key}" if path else key
                self.check(value[key], additional, where, prune, old_child)
            elif (
                additional is True
                or preserve
                or (embedded and key in ("apiVersion", "kind", "metadata"))
            ):
                continue
            else:
                self.unknown.append(child)
                if prune:
                    del value[key]

    def _array(self, value: list[Any], schema: dict[str, Any], path: str, prune: bool) -> None:
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                self.check(item, items, f"{path}[{i}]", prune)
        if schema.get("x-kubernetes-list-type") == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    self._err(
                        f"{path}[{i}]", f"Duplicate value: {_show(item)}", "FieldValueDuplicate"
                    )
                seen.append(item)


def validate_custom_resource(
    obj: dict[str, Any],
    schema: dict[str, Any] | None,
    prune: bool,
    old: dict[str, Any] | None = None,
    skip: frozenset[str] = frozenset(),
) -> tuple[list[Cause], list[str]]:
    """(value errors, unknown field paths) for a custom resource body (metadata excluded).
    Top-level fields named in ``skip`` count as present but are not checked again (the caller
    knows them to be unchanged stored values of a kind whose schema cannot change)."""
    v = Validator()
    if schema is None:
        return [], []
    props = dict(schema.get("properties") or {})
    # apiVersion, kind and metadata are always part of the object; metadata is checked elsewhere.
    props.pop("metadata", None)
    top = dict(schema)
    top["properties"] = props
    for key in list(obj):
        if key in ("apiVersion", "kind", "metadata") or key in skip:
            continue
        if key in props:
            v.check(obj[key], props[key], key, prune, (old or {}).get(key))
        elif top.get("x-kubernetes-preserve-unknown-fields"):
            continue
        else:
            v.unknown.append(key)
            if prune:
                del obj[key]
    for name in top.get("required") or []:
        if name not in obj and name not in ("apiVersion", "kind", "metadata"):
            v.errors.append(
                {"reason": "FieldValueRequired", "field": name, "message": "Required value"}
            )
    # as the real server (hasBlockingErr): after an error of these kinds no CEL rule runs
    if not any(e["reason"] in _BLOCKING for e in v.errors):
        return v.errors + v.rule_errors, v.unknown
    if _has_rules(schema):
        v.errors.append(RULES_NOT_CHECKED)
    return v.errors, v.unknown


_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)


RULES_NOT_CHECKED: Cause = {
    "reason": "FieldValueInvalid",
    "field": "<nil>",
    "message": "Invalid value: null: some validation rules were not checked because the object "
    "was invalid; correct the existing errors to complete validation",
}


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "x-kubernetes-validations" in schema or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False
