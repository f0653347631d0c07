"""The namespace -> queue resolver shared by the pod-grouper and the mutating webhook."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kai.api.namespace_queues import (
    NAMESPACES_ANNOTATION,
    NamespaceQueues,
    from_queue_trees,
    from_queues,
    resolve_queue,
)


def tree(name: str, queues: list[dict[str, Any]], created: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if created:
        md["creationTimestamp"] = created
    return {"kind": "QueueTree", "metadata": md, "spec": {"queues": queues}}


def queue(name: str, namespaces: str | None, created: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "annotations": {}}
    if namespaces is not None:
        md["annotations"][NAMESPACES_ANNOTATION] = namespaces
    if created:
        md["creationTimestamp"] = created
    return {"kind": "Queue", "metadata": md, "spec": {}}


RESEARCH = tree(
    "research",
    [
        {
            "name": "research",
            "children": [
                {"name": "nlp", "namespaces": ["team-nlp", "nlp-dev"]},
                {"name": "vision", "children": [{"name": "cv", "namespaces": ["team-cv"]}]},
            ],
        }
    ],
    "2026-01-01T00:00:00Z",
)


def test_trees_bind_leaves_at_any_depth() -> None:
    mapping = from_queue_trees([RESEARCH])
    assert mapping.as_dict() == {"nlp-dev": "nlp", "team-cv": "cv", "team-nlp": "nlp"}
    assert mapping.queue_for("team-cv") == "cv"
    assert mapping.queue_for("elsewhere") is None
    assert mapping.conflicts == ()
    assert mapping.bindings["team-nlp"].source == "QueueTree/research"


def test_queues_annotation_gives_the_same_mapping() -> None:
    queues = [queue("nlp", "team-nlp,nlp-dev"), queue("cv", "team-cv"), queue("other", None)]
    assert from_queues(queues).as_dict() == from_queue_trees([RESEARCH]).as_dict()


def test_conflict_older_wins_whatever_the_order() -> None:
    newer = tree("late", [{"name": "speech", "namespaces": ["team-nlp"]}], "2026-02-01T00:00:00Z")
    results = {
        tuple(from_queue_trees(list(order)).as_dict().items())
        for order in itertools.permutations([RESEARCH, newer])
    }
    assert results == {(("nlp-dev", "nlp"), ("team-cv", "cv"), ("team-nlp", "nlp"))}
    conflicts = from_queue_trees([newer, RESEARCH]).conflicts
    assert len(conflicts) == 1
    assert "QueueTree/late" in conflicts[0] and "QueueTree/research" in conflicts[0]


def test_unstored_object_counts_as_newest() -> None:
    stored = queue("a", "ns", "2026-01-01T00:00:00Z")
    fresh = queue("b", "ns")
    assert from_queues([fresh, stored]).queue_for("ns") == "a"


def test_malformed_input_is_skipped_not_fatal() -> None:
    broken = {"metadata": {"name": "x"}, "spec": {"queues": ["not-a-mapping", {"name": 3}]}}
    assert from_queue_trees([broken]).as_dict() == {}
    assert from_queues([queue("q", " , ")]).as_dict() == {}


@pytest.mark.parametrize(
    ("pod", "owner", "expected"),
    [
        ({}, None, "nlp"),  # namespace binding
        ({"kai.scheduler/queue": "mine"}, None, "mine"),
        ({"kai.scheduler/queue": "pod"}, {"kai.scheduler/queue": "owner"}, "owner"),
        ({"project": "legacy"}, None, "legacy"),
        ({"project": "legacy"}, {"kai.scheduler/queue": "owner"}, "owner"),
        ({"kai.scheduler/queue": ""}, {}, "nlp"),  # an empty label is no label
    ],
)
def test_resolve_precedence(
    pod: dict[str, str], owner: dict[str, str] | None, expected: str
) -> None:
    mapping = from_queue_trees([RESEARCH])
    assert resolve_queue("team-nlp", pod, owner, mapping) == expected


def test_resolve_default_and_custom_label() -> None:
    assert resolve_queue("unbound", {}, None, NamespaceQueues()) == "default-queue"
    assert resolve_queue("unbound", {}, None, None, default_queue="fallback") == "fallback"
    assert resolve_queue("x", {"acme/queue": "q"}, None, None, queue_label="acme/queue") == "q"
    assert resolve_queue("x", {"kai.scheduler/queue": "q"}, None, None, queue_label="a/b") == (
        "default-queue"
    )
