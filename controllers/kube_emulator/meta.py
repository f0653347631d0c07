"""Object metadata rules: names, timestamps, what counts as a spec change."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from kube_emulator.errors import field_cause
from kube_emulator.validation import label_value_problems, qualified_name_problems

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PATH_SEGMENT_BAD = ("/", "%")

# kinds whose names must be DNS labels (RFC 1123) rather than subdomains
_LABEL_NAMED = {("", "namespaces"), ("", "services")}


_now_cache: list[Any] = [0, ""]


def now() -> str:
    """RFC 3339 time to the second (cached: formatting costs more than a pod create)."""
    second = int(time.time())
    if second != _now_cache[0]:
        _now_cache[1] = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        _now_cache[0] = second
    return str(_now_cache[1])


def name_causes(tkey: tuple[str, str], name: str, custom: bool) -> list[dict[str, str]]:
    if not name:
        return [
            field_cause(
                "metadata.name",
                "Required value: name or generateName is required",
                "FieldValueRequired",
            )
        ]
    if tkey in _LABEL_NAMED:
        if len(name) > 63 or not _LABEL.match(name):
            return [
                field_cause(
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                    "case "
                    "alphanumeric characters or '-', and must start and end with an alphanumeric "
                    "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            ]
        return []
    if tkey in (("", "events"), ("events.k8s.io", "events")) or (
        custom is False and tkey[0] == "" and tkey[1] in ("nodes",)
    ):
        # events and nodes take any path-segment name in practice
        if name in (".", "..") or any(c in name for c in _PATH_SEGMENT_BAD):
            return [
                field_cause(
                    "metadata.name", f"Invalid value: \"{name}\": may not contain '/' or '%'"
                )
            ]
        return []
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        return [
            field_cause(
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        ]
    return []


def label_causes(meta: dict[str, Any]) -> list[dict[str, str]]:
    """The real server's rules for ``metadata.labels`` and ``metadata.annotations``: keys are
    qualified names (an optional DNS-subdomain prefix of at most 253 bytes, ``/``, a name of at
    most 63 bytes; annotation keys are checked lower-cased, as the real server does), label
    values at most 63 bytes of the label alphabet, annotations at most 256 KiB in all."""
    causes = []
    for where in ("labels", "annotations"):
        value = meta.get(where)
        if value is None:
            continue
        if not isinstance(value, dict):
            causes.append(
                field_cause(
                    f"metadata.{where}", "Invalid value: must be a map", "FieldValueTypeInvalid"
                )
            )
            continue
        for k, v in value.items():
            if not isinstance(v, str):
                causes.append(
                    field_cause(
                        f"metadata.{where}",
                        f"Invalid value: {k}: values must be strings",
                        "FieldValueTypeInvalid",
                    )
                )
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, v in labels.items():
            for problem in qualified_name_problems(key):
                causes.append(
                    field_cause("metadata.labels", f"Invalid value: {_quoted(key)}: {problem}")
                )
            if isinstance(v, str):
                for problem in label_value_problems(v):
                    causes.append(
                        field_cause("metadata.labels", f"Invalid value: {_quoted(v)}: {problem}")
                    )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            for problem in qualified_name_problems(key.lower()):
                causes.append(
                    field_cause("metadata.annotations", f"Invalid value: {_quoted(key)}: {problem}")
                )
        size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > MAX_ANNOTATIONS:
            causes.append(
                field_cause(
                    "metadata.annotations",
                    f"Too long: may not be more than {MAX_ANNOTATIONS} bytes",
                    "FieldValueTooLong",
                )
            )
    return causes


def _quoted(value: str) -> str:
    """A value quoted as Go's %q does for printable text (the real server's field errors)."""
    return json.dumps(value, ensure_ascii=False)


MAX_ANNOTATIONS = 256 * 1024


def spec_of(obj: dict[str, Any], with_status: bool = False) -> dict[str, Any]:
    """Everything the generation counter watches: the object minus metadata, and minus status
    when status is a subresource (without one, a status change is a change like any other)."""
    skipped = (
        ("metadata", "apiVersion", "kind")
        if with_status
        else ("metadata", "status", "apiVersion", "kind")
    )
    return {k: v for k, v in obj.items() if k not in skipped}


_STRING_FIELDS = ("name", "generateName", "namespace", "resourceVersion", "uid")


def shape_error(md: Any) -> str | None:
    """A type error in ``metadata`` (what a real server fails to decode, with 400)."""
    if not isinstance(md, dict):
        return "metadata must be an object"
    for key in _STRING_FIELDS:
        if key in md and md[key] is not None and not isinstance(md[key], str):
            return f"metadata.{key} must be a string, not {type(md[key]).__name__}"
    for key in ("labels", "annotations"):
        value = md.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"metadata.{key} must be a map of string to string"
        for k, v in value.items():
            if not isinstance(v, str):
                return f"metadata.{key}.{k} must be a string, not {type(v).__name__}"
    finalizers = md.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        return "metadata.finalizers must be a list of strings"
    refs = md.get("ownerReferences")
    return None if refs is None else _owner_references_error(refs)


def _owner_references_error(refs: Any) -> str | None:
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        return "metadata.ownerReferences must be a list of objects"
    for ref in refs:  # the real server names these fields without an index
        for key in ("apiVersion", "kind", "name", "uid"):
            if key in ref and not isinstance(ref[key], str):
                return f"metadata.ownerReferences.{key} must be a string"
        for key in ("controller", "blockOwnerDeletion"):
            if key in ref and ref[key] is not None and not isinstance(ref[key], bool):
                return f"metadata.ownerReferences.{key} must be a boolean"
    return None


def owner_causes(md: dict[str, Any]) -> list[dict[str, str]]:
    causes = []
    refs = md.get("ownerReferences") or []
    for ref in refs:  # the real server names these fields without an index
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                causes.append(
                    field_cause(
                        f"metadata.ownerReferences.{key}",
                        'Invalid value: "": must not be empty',
                    )
                )
    if sum(1 for r in refs if r.get("controller")) > 1:
        causes.append(
            field_cause(
                "metadata.ownerReferences",
                "Invalid value: only one reference can have Controller set to true",
            )
        )
    return causes
