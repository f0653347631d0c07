"""Server-side apply with field ownership (``application/apply-patch+yaml``).

Each field manager that applies owns the fields of its last applied configuration, recorded in
``metadata.managedFields`` in the ``FieldsV1`` format (``f:name`` for a field, ``k:{...}`` for
an item of a list merged by key, ``v:...`` for a member of a set-like list, ``.`` for a list
item itself). An apply:

1. refuses (409 Conflict) to change a value that another applier owns, unless ``force=true``,
   which moves the field to the new owner;
2. removes the fields the manager applied last time and left out now, when nobody else owns
   them (a list item merged by key goes when its key is no longer applied);
3. merges the configuration into the object (strategic merge for built-in kinds, merge patch
   for custom resources).

Simplifications: only appliers are tracked (fields changed by PUT/PATCH/POST have no owner, so
they never conflict), ``status`` is never owned, and a list without a merge key is owned whole.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import orjson

from kube_emulator.errors import ApiError
from kube_emulator.patch import MERGE_KEYS, SET_LISTS, merge_patch, strategic_merge_patch

Path = tuple[str, ...]  # e.g. ("f:spec", "f:containers", 'k:{"name":"main"}', "f:image")
_SKIPPED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
}


def field_set(obj: dict[str, Any], custom: bool) -> set[Path]:
    """The fields a configuration sets (leaves and keyed list items)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            for mkey, mval in (value or {}).items():
                if mkey in _SKIPPED_META:
                    continue
                _walk(mval, (f"f:{key}", f"f:{mkey}"), mkey, custom, out)
            continue
        _walk(value, (f"f:{key}",), key, custom, out)
    return out


def _walk(value: Any, path: Path, name: str, custom: bool, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _walk(sub, (*path, f"f:{key}"), key, custom, out)
        return
    if isinstance(value, list) and not custom:
        merge_key = MERGE_KEYS.get(name)
        if merge_key and all(isinstance(x, dict) and merge_key in x for x in value):
            for item in value:
                item_path = (*path, "k:" + _json({merge_key: item[merge_key]}))
                out.add(item_path)
                for key, sub in item.items():
                    _walk(sub, (*item_path, f"f:{key}"), key, custom, out)
            return
        if name in SET_LISTS and all(isinstance(x, (str, int, float, bool)) for x in value):
            for item in value:
                out.add((*path, "v:" + _json(item)))
            return
    out.add(path)


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def encode(fields: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(fields):
        node = root
        for part in path:
            node = node.setdefault(part, {})
        if any(p.startswith("k:") for p in path[-1:]):
            node.setdefault(".", {})
    return root


def decode(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    if not tree and prefix:
        out.add(prefix)
    for key, sub in tree.items():
        if key == ".":
            out.add(prefix)
        else:
            out |= decode(sub, (*prefix, key))
    return out


def _step(node: Any, part: str) -> Any:
    if part.startswith("f:"):
        return node.get(part[2:]) if isinstance(node, dict) else None
    if part.startswith("k:") and isinstance(node, list):
        want = orjson.loads(part[2:])
        for item in node:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in want.items()):
                return item
        return None
    if part.startswith("v:") and isinstance(node, list):
        value = orjson.loads(part[2:])
        return value if value in node else None
    return None


def value_at(obj: Any, path: Path) -> Any:
    node = obj
    for part in path:
        node = _step(node, part)
        if node is None:
            return None
    return node


def remove(obj: dict[str, Any], path: Path) -> None:
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        item = _step(parent, last)
        if item is not None:
            parent.remove(item)
    elif last.startswith("v:") and isinstance(parent, list):
        value = orjson.loads(last[2:])
        if value in parent:
            parent.remove(value)


def _owners(entries: list[dict[str, Any]]) -> dict[str, set[Path]]:
    return {
        e["manager"]: decode(e.get("fieldsV1"))
        for e in entries
        if isinstance(e, dict) and e.get("operation") == "Apply" and e.get("manager")
    }


def apply(
    live: dict[str, Any],
    config: dict[str, Any],
    manager: str,
    force: bool,
    custom: bool,
    api_version: str,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` to ``live`` (both at one version)."""
    entries = [
        e for e in (live.get("metadata") or {}).get("managedFields") or [] if isinstance(e, dict)
    ]
    owners = _owners(entries)
    applied = field_set(config, custom)
    conflicts = []
    for other, fields in owners.items():
        if other == manager:
            continue
        for path in sorted(applied & fields):
            if value_at(live, path) != value_at(config, path):
                conflicts.append((other, path))
    if conflicts and not force:
        shown = "\n".join(f'- conflict with "{m}": {_readable(p)}' for m, p in conflicts)
        raise ApiError(
            409,
            f"Apply failed with {len(conflicts)} conflict"
            f"{'s' if len(conflicts) > 1 else ''}: conflicts with "
            f'"{conflicts[0][0]}":\n{shown}',
            "Conflict",
        )
    for other, path in conflicts:
        owners[other].discard(path)
    result = copy.deepcopy(live)
    previous = owners.get(manager, set())
    others = set().union(*(f for m, f in owners.items() if m != manager)) if owners else set()
    removed: list[Path] = []
    for path in sorted(previous - applied, key=len):  # parents before their fields
        if any(path[: len(r)] == r for r in removed):
            continue
        if path not in others and not any(o[: len(path)] == path for o in others):
            remove(result, path)
            removed.append(path)
    body = {k: v for k, v in config.items() if k != "status"}
    merged: dict[str, Any] = (
        merge_patch(result, body) if custom else strategic_merge_patch(result, body)
    )
    result = merged
    owners[manager] = applied
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kept = [e for e in entries if e.get("operation") != "Apply"]
    for m, fields in sorted(owners.items()):
        if not fields:
            continue
        old = next(
            (e for e in entries if e.get("manager") == m and e.get("operation") == "Apply"), None
        )
        kept.append(
            {
                "manager": m,
                "operation": "Apply",
                "apiVersion": api_version,
                "time": now if m == manager or old is None else old.get("time", now),
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(fields),
            }
        )
    result.setdefault("metadata", {})["managedFields"] = kept
    return result


def _readable(path: Path) -> str:
    return "." + ".".join(p[2:] if p.startswith("f:") else f"[{p[2:]}]" for p in path)


def created_fields(
    config: dict[str, Any], manager: str, custom: bool, api_version: str
) -> list[dict[str, Any]]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(field_set(config, custom)),
        }
    ]
