"""kai controller's plan: the documents of a cluster against the objects that exist there."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from kai.gitops.cluster_plan import owner_documents, plan
from kai.gitops.compile import compile_documents
from kai.gitops.loader import load_paths
from kai.gitops.validate import validate

EXAMPLES = Path(__file__).parents[3] / "examples" / "gitops"


def _examples() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(documents as stored, the hand-made default-queue, kai render's output)."""
    report = validate(load_paths([str(EXAMPLES)]))
    assert report.ok
    docs, raw = [], []
    for i, doc in enumerate(report.documents):
        obj = copy.deepcopy(doc.data)
        obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{i:02d}Z"
        (docs if obj["apiVersion"].startswith("gitops.") else raw).append(obj)
    return docs, raw, compile_documents(report.documents)


def _stored(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Objects as the API server returns them after an apply."""
    out = []
    for i, obj in enumerate(copy.deepcopy(objects)):
        obj["metadata"].update(uid=f"uid-{i}", resourceVersion=str(100 + i))
        out.append(obj)
    return out


def _split(objects: list[dict[str, Any]]) -> tuple[list[Any], list[Any], Any]:
    queues = [o for o in objects if o["kind"] == "Queue"]
    topologies = [o for o in objects if o["kind"] == "Topology"]
    configmap = next((o for o in objects if o["kind"] == "ConfigMap"), None)
    return queues, topologies, configmap


def _converged() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The examples applied: every document's status says generation 1 is applied."""
    docs, raw, _ = _examples()
    first = plan(docs, raw, [], None)
    for doc in docs:
        doc["metadata"]["generation"] = 1
        doc["status"] = {
            "observedGeneration": 1,
            "conditions": [{"type": "Applied", "status": "True"}],
        }
    return docs, raw, _stored(first.apply)


def _tree(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A document about to be edited: its generation moves on."""
    doc = next(d for d in docs if d["metadata"]["name"] == name)
    doc["metadata"]["generation"] = doc["metadata"].get("generation", 0) + 1
    return doc


def test_empty_cluster_gets_exactly_what_kai_render_writes() -> None:
    docs, raw, rendered = _examples()
    result = plan(docs, raw, [], None)
    hand_made = [o for o in rendered if owner_documents(o) is None]
    assert [o["metadata"]["name"] for o in hand_made] == ["default-queue"]
    assert result.apply == [o for o in rendered if o not in hand_made]
    assert result.prune == []
    assert {o.state for o in result.outcomes.values()} == {"applied"}
    assert len(result.outcomes["QueueTree/research-teams"].objects) == 7


def test_converged_cluster_plans_the_same_and_prunes_nothing() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    again = plan(docs, raw + queues, topologies, configmap)
    assert again.prune == []
    assert [o["metadata"]["name"] for o in again.apply] == [o["metadata"]["name"] for o in existing]


def test_invalid_document_keeps_what_it_produced() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    research = _tree(docs, "research-teams")
    research["spec"]["queues"][0]["quota"]["gpu"] = 10_000  # over the parent's quota
    research["spec"]["queues"].pop()  # and a queue removed: must not be pruned either
    result = plan(docs, raw + queues, topologies, configmap)
    outcome = result.outcomes["QueueTree/research-teams"]
    assert outcome.state == "invalid"
    assert {p.rule for p in outcome.errors} == {"children-quota-sum"}
    assert result.prune == []
    applied = {o["metadata"]["name"] for o in result.apply}
    assert "nlp" not in applied and "foundation-models" not in applied
    assert len(outcome.objects) == 7  # the kept objects are still listed
    assert result.outcomes["QueueTree/product-teams"].state == "applied"
    # the namespaces of the kept queues stay in the ConfigMap
    cm = next(o for o in result.apply if o["kind"] == "ConfigMap")
    assert cm["data"] == configmap["data"]


def test_removed_queue_and_deleted_tree_are_pruned() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    _tree(docs, "platform-teams")["spec"]["queues"].pop()  # notebooks
    docs = [d for d in docs if d["kind"] != "TopologyPolicy"]
    result = plan(docs, raw + queues, topologies, configmap)
    assert sorted(o["metadata"]["name"] for o in result.prune) == ["datacenter", "notebooks"]
    assert (
        "notebooks:"
        not in next(o for o in result.apply if o["kind"] == "ConfigMap")["data"][
            "namespace-queues.yaml"
        ]
    )


def test_hand_made_queue_is_never_claimed_or_pruned() -> None:
    docs, raw, _ = _examples()
    hand = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "nlp", "uid": "u", "resourceVersion": "1"},
        "spec": {"parentQueue": "research", "resources": {}},
    }
    result = plan(docs, [*raw, hand], [], None)
    outcome = result.outcomes["QueueTree/research-teams"]
    assert outcome.state == "refused"
    assert "'nlp' exists and was not made by kai controller" in outcome.refusal
    assert all(o["metadata"]["name"] != "nlp" for o in result.apply + result.prune)
    assert result.outcomes["QueueTree/departments"].state == "applied"


def _rival(created: str) -> dict[str, Any]:
    return {
        "apiVersion": "gitops.kai.scheduler/v1alpha1",
        "kind": "QueueTree",
        "metadata": {"name": "rival", "creationTimestamp": created},
        "spec": {"parent": "research", "queues": [{"name": "nlp", "quota": {"gpu": 1}}]},
    }


@pytest.mark.parametrize("created", ["2025-01-01T00:00:00Z", "2027-01-01T00:00:00Z"])
def test_two_trees_one_queue_the_owner_or_the_older_wins_in_any_order(created: str) -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    rival = _rival(created)
    for order in itertools.permutations([rival, _tree(docs, "research-teams")]):
        others = [d for d in docs if d["metadata"]["name"] != "research-teams"]
        # the Queue exists, owned by research-teams: it keeps it, even against an older rival
        result = plan([*others, *order], raw + queues, topologies, configmap)
        assert result.outcomes["QueueTree/rival"].state == "refused"
        assert "already claimed by QueueTree/research-teams" in (
            result.outcomes["QueueTree/rival"].refusal
        )
        assert result.outcomes["QueueTree/research-teams"].state == "applied"
    # on an empty cluster, the older document wins
    fresh = plan([*docs, rival], raw, [], None)
    loser = "QueueTree/research-teams" if created < "2026" else "QueueTree/rival"
    assert fresh.outcomes[loser].state == "refused"


def test_invalid_sharing_policy_keeps_its_configmap_key() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    sharing = _tree(docs, "inference-pool")
    sharing["spec"]["modes"] = ["teleport"]
    result = plan(docs, raw + queues, topologies, configmap)
    assert result.outcomes["SharingPolicy/inference-pool"].state == "invalid"
    assert result.outcomes["SharingPolicy/inference-pool"].errors[0].rule == "schema"
    cm = next(o for o in result.apply if o["kind"] == "ConfigMap")
    assert cm["data"] == configmap["data"]
    assert result.prune == []


def test_child_of_a_kept_tree_is_checked_against_the_kept_queues() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    _tree(docs, "departments")["spec"]["queues"][0]["limit"] = {"gpu": 1}  # below its quota
    research = _tree(docs, "research-teams")
    research["spec"]["queues"][1]["quota"]["gpu"] = 47  # nlp: a valid change under 'research'
    result = plan(docs, raw + queues, topologies, configmap)
    assert result.outcomes["QueueTree/departments"].state == "invalid"
    assert result.outcomes["QueueTree/research-teams"].state == "applied"
    nlp = next(o for o in result.apply if o["metadata"]["name"] == "nlp")
    assert nlp["spec"]["resources"]["gpu"]["quota"] == 47
    assert all(o["metadata"]["name"] != "research" for o in result.apply)  # kept as it was


def test_error_at_a_parent_is_blamed_on_the_changed_child_tree() -> None:
    docs, raw, existing = _converged()
    queues, topologies, configmap = _split(existing)
    research = _tree(docs, "research-teams")
    research["spec"]["queues"][0]["quota"]["gpu"] = 1280  # reported at 'research' (departments)
    result = plan(docs, raw + queues, topologies, configmap)
    assert result.outcomes["QueueTree/departments"].state == "applied"  # no rounding echo
    outcome = result.outcomes["QueueTree/research-teams"]
    assert outcome.state == "invalid"
    assert [(p.rule, p.object) for p in outcome.errors] == [
        ("children-quota-sum", "QueueTree/departments")
    ]
