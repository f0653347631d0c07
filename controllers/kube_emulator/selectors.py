"""Label and field selectors, parsed once per request and matched against plain dicts.

Label selector syntax (as kubectl and client-go write it): comma-separated requirements, each
``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)`` or
``key notin (a,b)``. Field selectors allow ``=``, ``==`` and ``!=`` on the fields each resource
type declares; a missing field reads as the empty string (so ``spec.nodeName=`` selects pods that
are not bound yet).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from kube_emulator.errors import bad_request

Requirement = tuple[str, str, frozenset[str]]  # (key, operator, values)

_KEY_RE = re.compile(
    r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_SET_RE = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*?)\)\s*$")


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split_top(text):
        m = _SET_RE.match(part)
        if m:
            key, op, vals = m.group(1), m.group(2), m.group(3)
            values = frozenset(v.strip() for v in vals.split(",") if v.strip())
            reqs.append((_check_key(key, text), op, values))
            continue
        for op in ("!=", "==", "="):
            if op in part:
                key, _, value = part.partition(op)
                reqs.append(
                    (
                        _check_key(key.strip(), text),
                        "!=" if op == "!=" else "=",
                        frozenset({value.strip()}),
                    )
                )
                break
        else:
            if part.startswith("!"):
                reqs.append((_check_key(part[1:].strip(), text), "!", frozenset()))
            else:
                reqs.append((_check_key(part, text), "exists", frozenset()))
    return reqs


def _check_key(key: str, whole: str) -> str:
    if not _KEY_RE.match(key):
        raise bad_request(
            f'unable to parse requirement: invalid label key "{key}" in selector "{whole}"'
        )
    return key


def labels_match(reqs: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        if op in ("=", "in"):
            if not present or labels[key] not in values:
                return False
        elif op in ("!=", "notin"):
            if present and labels[key] in values:
                return False
        elif op == "exists":
            if not present:
                return False
        elif op == "!" and present:
            return False
    return True


def match_label_selector_object(
    selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None
) -> bool:
    """Match a structured ``LabelSelector`` (matchLabels + matchExpressions)."""
    if selector is None:
        return True
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


FieldRequirement = tuple[str, bool, str]  # (field, equal?, value)


def parse_field_selector(
    text: str | None, supports: Callable[[str], bool], kind: str
) -> list[FieldRequirement]:
    if not text:
        return []
    reqs: list[FieldRequirement] = []
    for part in _split_top(text):
        for op in ("!=", "==", "="):
            if op in part:
                fld, _, value = part.partition(op)
                fld = fld.strip()
                if not supports(fld):
                    raise bad_request(f"field label not supported: {fld}")
                reqs.append((fld, op != "!=", value.strip().replace("\\,", ",")))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    return reqs


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares; events.k8s.io ``regarding.*`` reads as the core
    ``involvedObject.*`` spelling and vice versa."""
    cur: Any = obj
    parts = path.split(".")
    if parts[0] == "involvedObject" and "involvedObject" not in obj and "regarding" in obj:
        parts[0] = "regarding"
    if parts == ["source"] and "source" in obj:
        return str((obj.get("source") or {}).get("component", ""))
    for p in parts:
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(p)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    return all((field_value(obj, fld) == value) == equal for fld, equal, value in reqs)
