"""Lists: selectors, sorting, and paging through snapshots with continue tokens."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import orjson

from kube_emulator.errors import ApiError, bad_request, expired, int_param
from kube_emulator.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore
    from kube_emulator.resources import ResourceType


def list_objects(
    core: ApiCore, rt: ResourceType, version: str, ns: str | None, q: dict[str, str]
) -> dict[str, Any]:
    labels = parse_label_selector(q.get("labelSelector"))
    fields = parse_field_selector(q.get("fieldSelector"), rt.supports_field, rt.kind)
    limit = int_param(q, "limit", 0)
    token = q.get("continue")
    if token:
        snap_id, offset = _decode_continue(token)
        snap = core.store.load_snapshot(snap_id)
        if snap is None:
            raise expired(
                "The provided continue parameter is too old to display a "
                "consistent list result. You can start a new list without the "
                "continue parameter."
            )
        items, list_rv = snap.items, snap.rv
    else:
        rv_param = q.get("resourceVersion")
        if rv_param not in (None, "", "0"):
            try:
                wanted = int(str(rv_param))
            except ValueError as exc:
                raise bad_request(f"invalid resource version {rv_param!r}") from exc
            if wanted > core.store.rv:
                raise ApiError(
                    504,
                    f"Too large resource version: {wanted}, current: {core.store.rv}",
                    "Timeout",
                )
            if q.get("resourceVersionMatch") == "Exact" and wanted != core.store.rv:
                raise expired(f"too old resource version: {wanted} ({core.store.rv})")
        with core.store.lock:
            items = core.store.sorted_items(rt.store_key, ns)
            list_rv = core.store.rv
        offset = 0
    out: list[dict[str, Any]] = []
    i = offset
    n = len(items)
    while i < n:
        obj = items[i]
        i += 1
        if labels and not labels_match(labels, obj["metadata"].get("labels")):
            continue
        if fields and not fields_match(fields, obj):
            continue
        out.append(core.at_version(rt, obj, version))
        if limit and len(out) >= limit:
            break
    list_meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
    if limit and i < n:
        snap_id = snap_id if token else core.store.save_snapshot(list_rv, items)
        list_meta["continue"] = _encode_continue(snap_id, i)
        if not labels and not fields:
            list_meta["remainingItemCount"] = n - i
    return {
        "kind": rt.kind + "List",
        "apiVersion": rt.api_version(version),
        "metadata": list_meta,
        "items": out,
    }


def _encode_continue(snap_id: str, offset: int) -> str:
    raw = orjson.dumps({"s": snap_id, "o": offset})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return str(data["s"]), int(data["o"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {token!r}") from exc
