"""pods/binding, graceful pod deletion, finalizers, ownerReference garbage collection and
namespace termination."""

from __future__ import annotations

import pytest
from k8s_helpers import eventually, pod, status_of
from kubernetes import client


def _bind(core, ns, name, node):
    return core.create_namespaced_pod_binding(
        name,
        ns,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"kind": "Node", "name": node},
        },
        _preload_content=False,
    )


def _gone(read):
    try:
        read()
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_binding_sets_node_and_condition(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    resp = _bind(core, ns, "p", "node-a")
    assert resp.status == 201
    bound = core.read_namespaced_pod("p", ns)
    assert bound.spec.node_name == "node-a"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]


def test_second_binding_conflicts(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    _bind(core, ns, "p", "node-a")
    with pytest.raises(client.ApiException) as err:
        _bind(core, ns, "p", "node-b")
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    assert core.read_namespaced_pod("p", ns).spec.node_name == "node-a"


def test_binding_missing_pod_is_404(core, ns):
    with pytest.raises(client.ApiException) as err:
        _bind(core, ns, "nobody", "node-a")
    assert err.value.status == 404


def test_unbound_pod_is_deleted_at_once(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    core.delete_namespaced_pod("p", ns)
    assert _gone(lambda: core.read_namespaced_pod("p", ns))


def test_bound_pod_waits_for_its_kubelet(cluster, core, ns):
    cluster.need_embedded("the kubelet rule is the embedded server's (pod_deletion=kubelet)")
    core.create_namespaced_pod(ns, pod("p", terminationGracePeriodSeconds=20))
    _bind(core, ns, "p", "node-a")
    core.delete_namespaced_pod("p", ns)
    pending = core.read_namespaced_pod("p", ns)
    assert pending.metadata.deletion_timestamp is not None
    assert pending.metadata.deletion_grace_period_seconds == 20
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)  # what the kubelet does
    assert _gone(lambda: core.read_namespaced_pod("p", ns))


def test_finished_pod_is_deleted_at_once(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    _bind(core, ns, "p", "node-a")
    core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("p", ns)
    assert eventually(lambda: _gone(lambda: core.read_namespaced_pod("p", ns)))


def test_finalizer_holds_deletion_until_removed(core, ns):
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map("f", ns)
    held = core.read_namespaced_config_map("f", ns)
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map(
            "f", ns, {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
        )
    assert err.value.status == 422
    core.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": None}})
    assert _gone(lambda: core.read_namespaced_config_map("f", ns))


def _owned(ns, name, owner):
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": owner.metadata.name,
                    "uid": owner.metadata.uid,
                }
            ],
        }
    }


def test_background_cascading_deletion(core, ns):
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(ns, _owned(ns, "child", owner))
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Background")
    eventually(lambda: _gone(lambda: core.read_namespaced_config_map("child", ns)))


def test_orphan_keeps_dependents(core, ns):
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(ns, _owned(ns, "child", owner))
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Orphan")
    eventually(lambda: _gone(lambda: core.read_namespaced_config_map("owner", ns)))
    child = eventually(
        lambda: (
            (c := core.read_namespaced_config_map("child", ns)).metadata.owner_references is None
            and c
        )
    )
    assert child.metadata.name == "child"


def test_foreground_deletion_waits_for_dependents(core, ns):
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(ns, _owned(ns, "child", owner))
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")
    eventually(lambda: _gone(lambda: core.read_namespaced_config_map("child", ns)))
    eventually(lambda: _gone(lambda: core.read_namespaced_config_map("owner", ns)))


def test_dependent_with_a_live_second_owner_survives(core, ns):
    a = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    b = core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    body = _owned(ns, "shared", a)
    body["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": b.metadata.uid}
    )
    core.create_namespaced_config_map(ns, body)
    core.delete_namespaced_config_map("a", ns)
    shared = eventually(
        lambda: (
            (c := core.read_namespaced_config_map("shared", ns))
            and len(c.metadata.owner_references) == 1
            and c
        )
    )
    assert shared.metadata.owner_references[0].name == "b"


def test_delete_preconditions(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "p"}})
    with pytest.raises(client.ApiException) as err:
        core.delete_namespaced_config_map(
            "p",
            ns,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1")),
        )
    assert err.value.status == 409
    core.delete_namespaced_config_map(
        "p",
        ns,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid)),
    )


def test_namespace_deletion_removes_content(core):
    import uuid

    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "plain"}})
    core.create_namespaced_config_map(
        name, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespace(name)
    assert core.read_namespace(name).status.phase == "Terminating"
    eventually(lambda: _gone(lambda: core.read_namespaced_config_map("plain", name)), 60)
    held = eventually(
        lambda: core.read_namespaced_config_map("held", name).metadata.deletion_timestamp, 60
    )
    assert held
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(name, {"metadata": {"name": "late"}})
    assert err.value.status == 403
    core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    eventually(lambda: _gone(lambda: core.read_namespace(name)), timeout=60)


def test_eviction_respects_the_disruption_budget(cluster, core, ns):
    policy = client.PolicyV1Api(cluster.api)
    for name in ("e1", "e2"):
        core.create_namespaced_pod(ns, pod(name, labels={"app": "guarded"}))
        # Running: a Pending pod is evicted whatever the budgets say (as a real server does)
        core.patch_namespaced_pod_status(
            name,
            ns,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
        )
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    def evict(name):
        return core.create_namespaced_pod_eviction(
            name,
            ns,
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
            },
            _preload_content=False,
        )

    def evicted(name):
        try:
            return evict(name).status == 201
        except client.ApiException as exc:  # a real disruption controller needs a moment
            assert exc.status == 429
            return False

    eventually(lambda: evicted("e1"), timeout=30)
    eventually(lambda: _gone(lambda: core.read_namespaced_pod("e1", ns)))
    with pytest.raises(client.ApiException) as err:
        evict("e2")
    assert err.value.status == 429
    assert status_of(err.value)["details"]["causes"][0]["reason"] == "DisruptionBudget"
    resources = {r.name: r for r in core.get_api_resources().resources}
    assert resources["pods/eviction"].group == "policy"
