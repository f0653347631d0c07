"""``kai queues``: the queue tree with quota, fair share, allocated, pending demand and weight.

The figures are the core's fair-share division at the start of a cycle on the snapshot (a
session opened, no action run): what the live scheduler divides before it places anything.
"""

from __future__ import annotations

from typing import Any

from kai.insight.figures import QueueRow, queue_rows
from kai.reconcilers.snapshot_builder import BuiltSnapshot


def rows(built: BuiltSnapshot) -> list[QueueRow]:
    from kai.scheduler.session import Session

    session = Session(built.snapshot)
    return queue_rows(built.snapshot.queues, session.proportion.queue_shares())


def document(found: list[QueueRow], captured: str) -> dict[str, Any]:
    return {"capturedAt": captured, "queues": [r.as_dict() for r in found]}
