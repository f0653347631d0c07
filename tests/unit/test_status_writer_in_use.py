"""The scheduler's status writer and kai controller share a Queue's ``status.conditions``: the
writer replaces the conditions it owns and keeps the controller's ``InUse`` (a Terminating
queue still held), so the two never overwrite each other in turn."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kai.api.protection import IN_USE
from kai.reconcilers.status import StatusWriter

IN_USE_CONDITION = {
    "type": IN_USE,
    "status": "True",
    "reason": "Workloads",
    "message": "being deleted; waits until nothing uses it: held by pod ns/p",
    "lastTransitionTime": "2026-12-08T00:00:00Z",
}


def _written(queues: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    informer = SimpleNamespace(items=lambda: queues)
    writer = StatusWriter(None, informer)
    patches: dict[str, dict[str, Any]] = {}
    writer._patch = lambda res, obj, patch: patches.__setitem__(obj["metadata"]["name"], patch)  # type: ignore[method-assign]
    snapshot = SimpleNamespace(
        queues=[SimpleNamespace(name=q["metadata"]["name"], parent=None) for q in queues],
        nodes=[],
        jobs=[],
    )
    try:
        writer.write(SimpleNamespace(snapshot=snapshot, podgroups={}), SimpleNamespace(queues={}))
    finally:
        writer.pool.shutdown()
    return patches


def test_the_controllers_in_use_condition_is_kept() -> None:
    held = {"metadata": {"name": "held"}, "status": {"conditions": [IN_USE_CONDITION]}}
    patches = _written([held])
    assert patches["held"]["status"]["conditions"] == [IN_USE_CONDITION]


def test_an_orphan_keeps_both_conditions() -> None:
    orphan = {
        "metadata": {"name": "lost"},
        "spec": {"parentQueue": "gone"},
        "status": {"conditions": [IN_USE_CONDITION]},
    }
    conditions = _written([orphan])["lost"]["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Orphan", IN_USE]


def test_a_queue_without_conditions_gets_none() -> None:
    patches = _written([{"metadata": {"name": "plain"}}])
    assert patches["plain"]["status"]["conditions"] is None
