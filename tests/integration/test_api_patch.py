"""PATCH flavours: JSON merge patch, JSON patch, strategic merge patch, server-side apply."""

from __future__ import annotations

import pytest
from k8s_helpers import pod, status_of
from kubernetes import client


def _patch(core, ns, name, body, content_type, **kw):
    return core.patch_namespaced_config_map(name, ns, body, _content_type=content_type, **kw)


def test_merge_patch(cluster, core, ns):
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "m", "labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}}
    )
    out = _patch(
        core,
        ns,
        "m",
        {"metadata": {"labels": {"b": "2"}}, "data": {"x": None, "z": "3"}},
        "application/merge-patch+json",
    )
    assert out.data == {"y": "2", "z": "3"}
    assert out.metadata.labels == {"a": "1", "b": "2"}


def test_json_patch(cluster, core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "j"}, "data": {"x": "1"}})
    out = _patch(
        core,
        ns,
        "j",
        [
            {"op": "test", "path": "/data/x", "value": "1"},
            {"op": "add", "path": "/data/y", "value": "2"},
            {"op": "remove", "path": "/data/x"},
        ],
        "application/json-patch+json",
    )
    assert out.data == {"y": "2"}
    with pytest.raises(client.ApiException) as err:
        _patch(
            core,
            ns,
            "j",
            [{"op": "test", "path": "/data/y", "value": "nope"}],
            "application/json-patch+json",
        )
    assert err.value.status == 422


def test_strategic_merge_containers_by_name(core, ns):
    body = pod("p")
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1.35"})
    core.create_namespaced_pod(ns, body)
    # the default content type of the client's patch_* for a dict body is strategic merge
    out = core.patch_namespaced_pod(
        "p", ns, {"spec": {"containers": [{"name": "side", "image": "busybox:1.36"}]}}
    )
    images = {c.name: c.image for c in out.spec.containers}
    assert images == {"main": "busybox:1.36", "side": "busybox:1.36"}


def test_strategic_merge_conditions_by_type(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    core.patch_namespaced_pod_status(
        "p",
        ns,
        {
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            }
        },
    )
    out = core.patch_namespaced_pod_status(
        "p", ns, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    conds = {c.type: c.status for c in out.status.conditions}
    assert conds == {"PodScheduled": "False", "Ready": "False"}


def test_strategic_merge_tolerations_are_replaced(core, ns):
    core.create_namespaced_pod(
        ns, pod("p", tolerations=[{"key": "a", "operator": "Exists", "effect": "NoSchedule"}])
    )
    out = core.patch_namespaced_pod(
        "p",
        ns,
        {
            "spec": {
                "tolerations": [
                    {"key": "a", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "b", "operator": "Exists", "effect": "NoSchedule"},
                ]
            }
        },
    )
    # a real server's DefaultTolerationSeconds admission adds its not-ready/unreachable ones
    keys = [t.key for t in out.spec.tolerations if not t.key.startswith("node.kubernetes.io/")]
    assert keys == ["a", "b"]


def test_strategic_merge_delete_directive(cluster, core, ns):
    body = pod("p")
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1.35"})
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": body["spec"]},
            },
        },
    )
    out = apps.patch_namespaced_deployment(
        "d",
        ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}},
    )
    assert [c.name for c in out.spec.template.spec.containers] == ["main"]


def test_patch_with_stale_resource_version_conflicts(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "r"}})
    core.patch_namespaced_config_map("r", ns, {"data": {"a": "1"}})
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map(
            "r",
            ns,
            {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"a": "2"}},
        )
    assert err.value.status == 409


def test_patch_missing_object_is_404(core, ns):
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("nothing", ns, {"data": {"a": "1"}})
    assert err.value.status == 404
    assert status_of(err.value)["reason"] == "NotFound"


def test_server_side_apply_creates_and_updates(core, ns):
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}}
    first = _patch(core, ns, "ssa", doc, "application/apply-patch+yaml", field_manager="kai-test")
    assert first.data == {"a": "1"}
    doc["data"]["b"] = "2"
    second = _patch(
        core, ns, "ssa", doc, "application/apply-patch+yaml", field_manager="kai-test", force=True
    )
    assert second.data == {"a": "1", "b": "2"}
    assert second.metadata.uid == first.metadata.uid


def test_apply_without_field_manager_is_422(core, ns):
    with pytest.raises(client.ApiException) as err:
        _patch(
            core,
            ns,
            "x",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            "application/apply-patch+yaml",
        )
    assert err.value.status == 422
    causes = status_of(err.value)["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [("fieldManager", "FieldValueRequired")]


def _apply(core, ns, body, manager, **kw):
    return core.patch_namespaced_config_map(
        body["metadata"]["name"],
        ns,
        body,
        _content_type="application/apply-patch+yaml",
        field_manager=manager,
        **kw,
    )


def _cm(name, labels=None, **data):
    md = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def test_apply_removes_what_the_manager_no_longer_applies(core, ns):
    _apply(core, ns, _cm("a", {"x": "1", "y": "2"}, k="v", k2="v2"), "gitops")
    core.patch_namespaced_config_map("a", ns, {"data": {"manual": "kept"}})
    after = _apply(core, ns, _cm("a", {"x": "1"}, k="v"), "gitops")
    assert after.data == {"k": "v", "manual": "kept"}
    assert after.metadata.labels == {"x": "1"}
    entry = next(m for m in after.metadata.managed_fields if m.manager == "gitops")
    assert entry.operation == "Apply" and entry.fields_type == "FieldsV1"


def test_apply_conflicts_between_managers_and_force(core, ns):
    _apply(core, ns, _cm("b", k="one"), "first")
    with pytest.raises(client.ApiException) as err:
        _apply(core, ns, _cm("b", k="two"), "second")
    assert err.value.status == 409
    moved = _apply(core, ns, _cm("b", k="two"), "second", force=True)
    assert moved.data == {"k": "two"}
    owners = {m.manager for m in moved.metadata.managed_fields if m.operation == "Apply"}
    assert owners == {"second"}
    same = _apply(core, ns, _cm("b", k="two"), "third")  # same value: shared, no conflict
    assert same.data == {"k": "two"}


def test_apply_drops_list_items_by_key(cluster, ns):
    apps = client.AppsV1Api(cluster.api)

    def deployment(*containers):
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {
                        "containers": [{"name": c, "image": "busybox:1.36"} for c in containers]
                    },
                },
            },
        }

    apps.patch_namespaced_deployment(
        "d",
        ns,
        deployment("main", "side"),
        _content_type="application/apply-patch+yaml",
        field_manager="gitops",
    )
    out = apps.patch_namespaced_deployment(
        "d",
        ns,
        deployment("main"),
        _content_type="application/apply-patch+yaml",
        field_manager="gitops",
    )
    assert [c.name for c in out.spec.template.spec.containers] == ["main"]
