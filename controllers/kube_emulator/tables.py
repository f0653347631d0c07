"""Server-side printing: the ``Table`` answers kubectl asks for (``Accept: ...;as=Table``).

Columns follow kubectl's familiar output for pods, nodes, namespaces, events and jobs; custom
resources use their CRD's ``additionalPrinterColumns`` (simple ``.a.b[0].c`` JSON paths); every
other kind gets NAME and AGE."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kube_emulator.resources import ResourceType

Column = tuple[str, str, int]  # (name, type, priority)


def age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        then = datetime.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    s = max(0, int((datetime.now(UTC) - then).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    d = h // 24
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


def _jsonpath(obj: Any, path: str) -> Any:
    """A printer column's simple JSONPath: ``.a.b[0].c``; ``\\.`` is a dot inside a key
    (``.status.allocated.nvidia\\.com/gpu``), as in Kubernetes' JSONPath."""
    cur = obj
    escaped = path.strip().lstrip(".").replace("]", "").replace("\\.", "\0")
    for raw in escaped.split("."):
        part = raw.replace("\0", ".")
        if not part:
            continue
        name, _, idx = part.partition("[")
        if name:
            cur = cur.get(name) if isinstance(cur, dict) else None
        if idx:
            cur = (
                cur[int(idx)]
                if isinstance(cur, list) and idx.isdigit() and int(idx) < len(cur)
                else None
            )
        if cur is None:
            return None
    return cur


def _cell(value: Any) -> Any:
    """A printer-column cell: scalars as they are, lists and maps as compact JSON (as the real
    API server renders them, e.g. ``["a","b"]``), a missing value as ``<none>``."""
    if value is None:
        return "<none>"
    if isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _pod_row(o: dict[str, Any]) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    phase = status.get("reason") or status.get("phase") or "Pending"
    if o["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        phase,
        restarts,
        age(o["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _event_row(o: dict[str, Any]) -> list[Any]:
    seen = (
        o.get("lastTimestamp")
        or ((o.get("series") or {}).get("lastObservedTime"))
        or o.get("eventTime")
        or o["metadata"].get("creationTimestamp")
    )
    involved = o.get("involvedObject") or {}
    return [
        age(seen),
        o.get("type", ""),
        o.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        o.get("message", ""),
        o["metadata"]["name"],
    ]


def _node_row(o: dict[str, Any]) -> list[Any]:
    conds = {
        c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or []
    }
    state = "Ready" if conds.get("Ready") == "True" else "NotReady"
    if (o.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = o["metadata"].get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")
    ) or ["<none>"]
    info = (o.get("status") or {}).get("nodeInfo") or {}
    addrs = {
        a.get("type"): a.get("address") for a in (o.get("status") or {}).get("addresses") or []
    }
    return [
        state,
        ",".join(roles),
        age(o["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addrs.get("InternalIP", "<none>"),
    ]


def _job_status(job: dict[str, Any]) -> str:
    """kubectl's Job status: the first true one of its finished/suspended conditions."""
    true = {
        c.get("type")
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    for ctype in ("Complete", "Failed", "Suspended"):
        if ctype in true:
            return ctype
    return "Running"


_EXTRA: dict[tuple[str, str], tuple[list[Column], Any]] = {
    ("", "pods"): (
        [
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        _pod_row,
    ),
    ("", "nodes"): (
        [
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
        ],
        _node_row,
    ),
    ("", "namespaces"): (
        [("Status", "string", 0)],
        lambda o: [(o.get("status") or {}).get("phase", "")],
    ),
    ("", "configmaps"): (
        [("Data", "integer", 0)],
        lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {})],
    ),
    ("batch", "jobs"): (
        [("Status", "string", 0), ("Completions", "string", 0)],
        lambda o: [
            _job_status(o),
            f"{(o.get('status') or {}).get('succeeded', 0)}/"
            f"{(o.get('spec') or {}).get('completions', 1)}",
        ],
    ),
    ("", "events"): (
        [
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
            ("Name", "string", 1),
        ],
        _event_row,
    ),
}


def _columns(rt: ResourceType, version: str) -> tuple[list[Column], Any]:
    if rt.key in _EXTRA:
        return _EXTRA[rt.key]
    cols = rt.printer_columns.get(version) or []
    if not cols:
        return [], lambda o: []
    defs: list[Column] = [
        (c["name"], c.get("type", "string"), int(c.get("priority", 0))) for c in cols
    ]

    def row(o: dict[str, Any]) -> list[Any]:
        out = []
        for c in cols:
            v = _jsonpath(o, c.get("jsonPath", ""))
            if c.get("type") == "date":
                v = age(v) if isinstance(v, str) else "<unknown>"
            out.append(_cell(v))
        return out

    return defs, row


def to_table(
    rt: ResourceType,
    version: str,
    items: list[dict[str, Any]],
    list_meta: dict[str, Any],
    include: str,
    table_version: str,
) -> dict[str, Any]:
    extra, row_fn = _columns(rt, version)
    has_age = any(name in ("Age", "Last Seen") for name, _, _ in extra)
    own_name = any(name == "Name" for name, _, _ in extra)  # the row places the name itself
    defs = []
    if not own_name:
        defs.append(
            {
                "name": "Name",
                "type": "string",
                "format": "name",
                "priority": 0,
                "description": "Name must be unique within a namespace.",
            }
        )
    defs += [
        {
            "name": n,
            "type": t,
            "format": "name" if n == "Name" else "",
            "priority": p,
            "description": n,
        }
        for n, t, p in extra
    ]
    if not has_age:
        defs.append(
            {
                "name": "Age",
                "type": "string",
                "format": "",
                "priority": 0,
                "description": "CreationTimestamp",
            }
        )
    rows = []
    for o in items:
        cells = [*row_fn(o)] if own_name else [o["metadata"]["name"], *row_fn(o)]
        if not has_age:
            cells.append(age(o["metadata"].get("creationTimestamp")))
        row: dict[str, Any] = {"cells": cells}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{table_version}",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": rows,
    }
