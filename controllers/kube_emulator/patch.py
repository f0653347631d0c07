"""The three PATCH flavours: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a strategic
merge patch covering the list fields this project touches.

Strategic merge: lists listed in :data:`MERGE_KEYS` merge element-wise by their key (an element
``{"$patch": "delete", key: ...}`` removes one); ``metadata.finalizers`` merges as a set; every
other list is replaced whole, as in Kubernetes (tolerations and taints included: their Go types
carry no patch strategy). Directives ``$patch: replace|delete`` on maps, ``$retainKeys``,
``$setElementOrder/...`` and ``$deleteFromPrimitiveList/...`` are understood.
"""

from __future__ import annotations

import copy
from typing import Any

from kube_emulator.errors import ApiError

# list field name (as it appears under its parent) -> merge key
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "resourceClaims": "name",
    "readinessGates": "conditionType",
}
SET_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise _patch_error(f"a JSON pointer must be a string, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f'invalid JSON pointer "{path}"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patch_error(msg: str) -> ApiError:
    return ApiError(
        422, f"the server rejected our request due to an error in our request: {msg}", "Invalid"
    )


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise _patch_error(f"doc is missing path: {path}")
    return cur, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _patch_error(f"doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _patch_error(f"index out of range in path: {path}")
    else:
        raise _patch_error(f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _patch_error(f"unable to remove nonexistent key: {last}: missing value")


def _from(op: dict[str, Any]) -> str:
    source = op.get("from")
    if not isinstance(source, str):
        raise _patch_error(f"{op['op']} operation needs a 'from' pointer")
    return source


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise ApiError(400, "the JSON patch must be a list of operations", "BadRequest")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _patch_error(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                parent, last = _parent(doc, parts, path)
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = _remove(doc, _from(op))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, _from(op))))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _patch_error(f"testing value {path} failed")
        else:
            raise _patch_error(f"unknown JSON patch operation {kind!r}")
    return doc


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return {}
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise ApiError(400, f"{key} must be a list of values to delete", "BadRequest")
            drop = {x for x in value if not isinstance(x, (dict, list))}
            if isinstance(result.get(name), list):
                result[name] = [x for x in result[name] if x not in drop]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(name: str, current: Any, patch: list[Any]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if name in SET_LISTS:
        out = list(current)
        for item in patch:
            if item not in out:
                out.append(item)
        return out
    key = MERGE_KEYS.get(name)
    if key is None or not all(isinstance(x, dict) for x in patch):
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and "$patch" in x)]
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if x.get("$patch") != "replace"]
    out = [dict(x) if isinstance(x, dict) else x for x in current]
    index = {x.get(key): i for i, x in enumerate(out) if isinstance(x, dict)}
    removed: set[Any] = set()
    for item in patch:
        k = item.get(key)
        if item.get("$patch") == "delete":
            removed.add(k)
            continue
        if k in index:
            out[index[k]] = _smp_map(out[index[k]], item)
        else:
            index[k] = len(out)
            out.append(_smp_map({}, item))
    return [x for x in out if not (isinstance(x, dict) and x.get(key) in removed)]
