"""Kinds served in two API groups over one storage: ``events.k8s.io/v1`` Events are stored as
``core/v1`` Events (as in Kubernetes), and converted field by field on the way in and out."""

from __future__ import annotations

from typing import Any

# events.k8s.io/v1 field -> core/v1 field; all other fields have the same name in both
_EVENT_FIELDS = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)


def event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    for new, old in _EVENT_FIELDS:
        out.pop(old, None)
        if new in obj:
            out[old] = out.pop(new)
    out["apiVersion"] = "v1"
    return out


def event_from_core(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    out = dict(obj)
    for new, old in _EVENT_FIELDS:
        out.pop(new, None)
        if old in obj:
            out[new] = out.pop(old)
    out["apiVersion"] = api_version
    return out
