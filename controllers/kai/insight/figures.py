"""Queue figures shared by ``kai explain``, ``kai queues`` and ``kai plan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kai.scheduler.result import QueueShare
from kai.scheduler.snapshot import MANAGED_RESOURCES, UNLIMITED, QueueSpec

RESOURCES = tuple(MANAGED_RESOURCES)  # gpu, cpu (millicores), memory (bytes)


def amount(resource: str, value: float | None) -> str:
    """A figure for people: GPUs with up to 2 decimals, cpu in cores, memory in GiB; '-' for
    unlimited, '' for none."""
    if value is None:
        return ""
    if value == UNLIMITED:
        return "-"
    if resource == "cpu":
        value = value / 1000.0
    elif resource == "memory":
        value = value / 2**30
        return f"{value:.4g}Gi"
    return f"{value:.4g}" if value != int(value) else str(int(value))


def with_unit(resource: str, value: float) -> str:
    """``amount`` followed by its unit: ``4 GPUs``, ``2 cores``, ``12Gi`` memory."""
    text = amount(resource, value)
    if resource == "gpu":
        return f"{text} GPU{'' if text == '1' else 's'}"
    if resource == "cpu":
        return f"{text} core{'' if text == '1' else 's'}"
    return f"{text} memory"


@dataclass
class QueueRow:
    """One queue with its policy (quota, limit, weight) and the session's figures."""

    name: str
    parent: str | None
    depth: int
    priority: int
    quota: dict[str, float]
    limit: dict[str, float]
    weight: dict[str, float]
    fair_share: dict[str, float]
    allocated: dict[str, float]
    requested: dict[str, float]
    pending: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        def per(field: dict[str, float]) -> dict[str, float]:
            return {r: round(field.get(r, 0.0), 6) for r in RESOURCES}

        return {
            "name": self.name,
            "parent": self.parent,
            "priority": self.priority,
            "quota": per(self.quota),
            "limit": per(self.limit),
            "overQuotaWeight": per(self.weight),
            "fairShare": per(self.fair_share),
            "allocated": per(self.allocated),
            "requested": per(self.requested),
            "pending": per(self.pending),
        }


def queue_rows(queues: list[QueueSpec], shares: dict[str, QueueShare]) -> list[QueueRow]:
    """The queue tree depth-first (children by name), with figures from ``shares``."""
    by_parent: dict[str | None, list[QueueSpec]] = {}
    names = {q.name for q in queues}
    for q in queues:
        parent = q.parent if q.parent in names else None
        by_parent.setdefault(parent, []).append(q)
    rows: list[QueueRow] = []

    def walk(parent: str | None, depth: int) -> None:
        for q in sorted(by_parent.get(parent, []), key=lambda x: x.name):
            share = shares.get(q.name)
            alloc = dict(share.allocated) if share else {}
            req = dict(share.requested) if share else {}
            rows.append(
                QueueRow(
                    name=q.name,
                    parent=q.parent,
                    depth=depth,
                    priority=q.priority,
                    quota={r: q.resources[r].quota for r in RESOURCES if r in q.resources},
                    limit={r: q.resources[r].limit for r in RESOURCES if r in q.resources},
                    weight={
                        r: q.resources[r].over_quota_weight for r in RESOURCES if r in q.resources
                    },
                    fair_share=dict(share.fair_share) if share else {},
                    allocated=alloc,
                    requested=req,
                    pending={r: max(0.0, req.get(r, 0.0) - alloc.get(r, 0.0)) for r in RESOURCES},
                )
            )
            walk(q.name, depth + 1)

    walk(None, 0)
    return rows


def queue_path(queues: list[QueueSpec], leaf: str) -> list[str]:
    """``leaf`` and its ancestors, root first (stops at a missing parent or a cycle)."""
    by_name = {q.name: q for q in queues}
    path: list[str] = []
    name: str | None = leaf
    while name is not None and name in by_name and name not in path:
        path.append(name)
        name = by_name[name].parent
    return list(reversed(path))
