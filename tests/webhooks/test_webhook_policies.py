"""The policy webhook: kai validate's rules with the cluster's documents, deletions."""

from __future__ import annotations

import copy

import pytest
from fakes import FakeCluster, example_objects, request

from kai.api.protection import FINALIZER
from kai.webhooks.policies import PolicyValidator


def _named(objects: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


@pytest.fixture
def objects() -> list[dict]:
    return example_objects()


def test_every_valid_example_is_accepted_in_any_order(objects: list[dict]) -> None:
    for order in (objects, list(reversed(objects))):
        cluster = FakeCluster()
        validator = PolicyValidator(cluster)
        for obj in order:
            verdict = validator(request(obj))
            assert verdict.allowed, verdict.message
            cluster.objects.append(obj)
    # with every parent present there is nothing left to warn about
    assert all(not PolicyValidator(FakeCluster(objects))(request(o)).warnings for o in objects)


def test_a_missing_parent_is_a_warning_at_admission(objects: list[dict]) -> None:
    research = _named(objects, "QueueTree", "research-teams")
    verdict = PolicyValidator(FakeCluster())(request(research))
    assert verdict.allowed
    assert any("[parent-exists]" in w and "orphans" in w for w in verdict.warnings)


def test_a_change_that_breaks_a_rule_with_other_documents_is_refused(objects: list[dict]) -> None:
    cluster = FakeCluster(objects)
    product = copy.deepcopy(_named(objects, "QueueTree", "product-teams"))
    product["spec"]["queues"][0]["quota"]["gpu"] = 100  # 100 + 48 + 32 + 32 > product's 160
    verdict = PolicyValidator(cluster)(request(product, "UPDATE", old=cluster.objects[2]))
    assert not verdict.allowed
    assert "[children-quota-sum] QueueTree/departments queues[1] (product) quota.gpu" in (
        verdict.message
    )
    # dry run: the same verdict
    dry = PolicyValidator(cluster)(request(product, "UPDATE", dry_run=True))
    assert (dry.allowed, dry.message) == (verdict.allowed, verdict.message)


def test_the_rule_ids_of_the_broken_repository() -> None:
    broken = example_objects("examples/gitops-broken")
    product = _named(broken, "QueueTree", "product-teams")
    verdict = PolicyValidator(FakeCluster(example_objects()))(request(product, "UPDATE"))
    for rule in ("[name]", "[namespaces-on-leaf]", "[children-quota-sum]"):
        assert rule in verdict.message
    cycle = PolicyValidator(FakeCluster([_named(broken, "Queue", "legacy-a")]))(
        request(_named(broken, "Queue", "legacy-b"))
    )
    assert not cycle.allowed and "[cycle]" in cycle.message
    assert any("[values]" in w for w in cycle.warnings)
    topology = PolicyValidator(FakeCluster())(
        request(_named(broken, "TopologyPolicy", "datacenter"))
    )
    assert "[topology]" in topology.message


def test_old_problems_are_not_blamed_on_an_unrelated_change(objects: list[dict]) -> None:
    broken_tree = copy.deepcopy(_named(objects, "QueueTree", "platform-teams"))
    broken_tree["spec"]["queues"][0]["quota"]["gpu"] = 500  # stored while the webhook was down
    others = [o for o in objects if o["metadata"]["name"] != "platform-teams"]
    cluster = FakeCluster([*others, broken_tree])
    topology = _named(objects, "TopologyPolicy", "datacenter")
    assert PolicyValidator(cluster)(request(topology, "UPDATE")).allowed


def _raw_queue(name: str, parent: str | None = None, **gpu: float) -> dict:
    spec: dict = {"resources": {"gpu": {"quota": 0, "overQuotaWeight": 1, "limit": -1, **gpu}}}
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


RAW_QUEUE_CASES = {  # rule -> (Queues already in the cluster, the Queue requested)
    "limit-below-quota": ([], _raw_queue("low", quota=8, limit=4)),
    "children-quota-sum": (
        [_raw_queue("top", quota=4), _raw_queue("a", "top", quota=3)],
        _raw_queue("b", "top", quota=2),
    ),
    "child-quota-over-parent-limit": (
        [_raw_queue("capped", quota=2, limit=2)],
        _raw_queue("greedy", "capped", quota=3),
    ),
}


@pytest.mark.parametrize("rule", sorted(RAW_QUEUE_CASES))
def test_raw_kai_queues_breaking_a_quota_rule_are_refused_by_default(rule: str) -> None:
    existing, queue = RAW_QUEUE_CASES[rule]
    verdict = PolicyValidator(FakeCluster(copy.deepcopy(existing)))(request(queue))
    assert not verdict.allowed
    assert f"[{rule}]" in verdict.message
    explicit = PolicyValidator(FakeCluster(copy.deepcopy(existing)), kai_queue_rules="enforce")
    assert not explicit(request(queue)).allowed


@pytest.mark.parametrize("rule", sorted(RAW_QUEUE_CASES))
def test_kai_queue_rules_warn_admits_them_with_a_warning(rule: str) -> None:
    existing, queue = RAW_QUEUE_CASES[rule]
    validator = PolicyValidator(FakeCluster(copy.deepcopy(existing)), kai_queue_rules="warn")
    verdict = validator(request(queue))
    assert verdict.allowed, verdict.message
    assert any(f"[{rule}]" in w and "--kai-queue-rules=warn" in w for w in verdict.warnings)


def test_kai_queue_rules_warn_leaves_documents_and_other_rules_refused(
    objects: list[dict],
) -> None:
    validator = PolicyValidator(FakeCluster(objects), kai_queue_rules="warn")
    product = copy.deepcopy(_named(objects, "QueueTree", "product-teams"))
    product["spec"]["queues"][0]["quota"]["gpu"] = 100  # a document: still refused
    assert not validator(request(product, "UPDATE")).allowed
    cycle_a, cycle_b = _raw_queue("cyc-a", "cyc-b"), _raw_queue("cyc-b", "cyc-a")
    cyclic = PolicyValidator(FakeCluster([cycle_a]), kai_queue_rules="warn")(request(cycle_b))
    assert not cyclic.allowed and "[cycle]" in cyclic.message


def test_kai_queue_rules_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="enforce, warn"):
        PolicyValidator(FakeCluster(), kai_queue_rules="off")


def test_compiled_queues_are_left_to_their_document(objects: list[dict]) -> None:
    compiled = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {
            "name": "nlp",
            "labels": {"app.kubernetes.io/managed-by": "kai"},
            "annotations": {"gitops.kai.scheduler/source": "QueueTree/research-teams"},
        },
        "spec": {"parentQueue": "research", "resources": {}},
    }
    cluster = FakeCluster([*objects, compiled])
    assert PolicyValidator(cluster)(request(compiled)).allowed
    # and in the cluster they do not count as a second queue of that name
    tree = _named(objects, "QueueTree", "research-teams")
    assert PolicyValidator(cluster)(request(tree, "UPDATE")).allowed


def test_deleting_a_queue_in_use_is_accepted_with_warnings(objects: list[dict]) -> None:
    """Any order of deletes is accepted (kubectl delete -f DIR, an Argo CD prune): what still
    uses the queue is a warning; kai controller's finalizer holds the object meanwhile."""
    cluster = FakeCluster(objects)
    validator = PolicyValidator(cluster)
    departments = copy.deepcopy(_named(objects, "QueueTree", "departments"))
    departments["metadata"]["finalizers"] = [FINALIZER]
    held = validator(request(None, "DELETE", old=departments))
    assert held.allowed, held.message
    assert any(
        "queue 'research' still has child queues: foundation-models, nlp, rl, vision" in w
        and f"stays Terminating (finalizer {FINALIZER})" in w
        for w in held.warnings
    ), held.warnings
    default = _named(objects, "Queue", "default-queue")
    free = validator(request(None, "DELETE", old=default))
    assert free.allowed and not free.warnings
    cluster.workloads["default-queue"] = ["Pod/ns/running-0"]
    busy = validator(request(None, "DELETE", old=default))
    assert busy.allowed
    assert busy.warnings == [
        "Queue/default-queue: queue 'default-queue' still has 1 workloads: Pod/ns/running-0; "
        "they are left without their queue"
    ]
    # a parent Queue with a child Queue
    parent = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "top"},
        "spec": {"resources": {"gpu": {"quota": 0, "overQuotaWeight": 1, "limit": -1}}},
    }
    child = copy.deepcopy(parent)
    child["metadata"]["name"], child["spec"]["parentQueue"] = "leaf", "top"
    cluster.objects += [parent, child]
    verdict = validator(request(None, "DELETE", old=parent))
    assert verdict.allowed and any("child queues: leaf" in w for w in verdict.warnings)
