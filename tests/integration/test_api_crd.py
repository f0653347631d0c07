"""CustomResourceDefinitions: serving, versions, scope, status subresource, schema validation."""

from __future__ import annotations

import uuid

import pytest
from k8s_helpers import eventually, status_of
from kubernetes import client, dynamic


def _crd(group: str, scope: str = "Namespaced") -> dict:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.color) || self.color != 'blue' || self.size > 2",
                        "message": "blue widgets need a size above 2",
                    }
                ],
                "properties": {
                    "size": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 10,
                        "x-kubernetes-validations": [
                            {"rule": "self >= oldSelf", "message": "size may not shrink"}
                        ],
                    },
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}},
                    "limits": {
                        "type": "object",
                        "additionalProperties": {"x-kubernetes-int-or-string": True},
                    },
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    }
    versions = [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": schema},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
            ],
        },
        {
            "name": "v1beta1",
            "served": True,
            "storage": False,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": schema},
        },
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "versions": versions,
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wdg"],
            },
        },
    }


@pytest.fixture
def widget_group(cluster):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"g{uuid.uuid4().hex[:8]}.kai.test"
    ext.create_custom_resource_definition(_crd(group))

    def established():
        crd = ext.read_custom_resource_definition(f"widgets.{group}")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    eventually(established, timeout=30)
    # a real server needs a moment after Established before discovery serves the group
    eventually(lambda: _served(cluster, group), timeout=30)
    yield group
    ext.delete_custom_resource_definition(f"widgets.{group}")


def _served(cluster, group):
    try:
        client.CustomObjectsApi(cluster.api).list_cluster_custom_object(group, "v1", "widgets")
    except client.ApiException:
        return False
    return True


def _widget(name, **spec):
    return {"apiVersion": "", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def _create(co, group, ns, name, version="v1", **kw):
    body = _widget(name, **kw.pop("spec", {"size": 1}))
    body["apiVersion"] = f"{group}/{version}"
    return co.create_namespaced_custom_object(group, version, ns, "widgets", body, **kw)


def test_crd_is_served_and_discoverable(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    created = _create(co, widget_group, ns, "w1")
    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1
    got = co.get_namespaced_custom_object(widget_group, "v1", ns, "widgets", "w1")
    assert got["spec"] == {"size": 1}
    resources = {r.name: r for r in client.ApisApi(cluster.api).get_api_versions().groups}
    assert widget_group in resources
    listing = co.list_namespaced_custom_object(widget_group, "v1", ns, "widgets")
    assert [i["metadata"]["name"] for i in listing["items"]] == ["w1"]


def test_all_served_versions(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    _create(co, widget_group, ns, "w1")
    beta = co.get_namespaced_custom_object(widget_group, "v1beta1", ns, "widgets", "w1")
    assert beta["apiVersion"] == f"{widget_group}/v1beta1"
    _create(co, widget_group, ns, "w2", version="v1beta1")
    assert len(co.list_namespaced_custom_object(widget_group, "v1", ns, "widgets")["items"]) == 2


def test_unknown_field_is_rejected_with_strict_validation(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    with pytest.raises(client.ApiException) as err:
        _create(
            co, widget_group, ns, "w", spec={"size": 1, "bogus": True}, field_validation="Strict"
        )
    assert err.value.status == 400 and status_of(err.value)["reason"] == "BadRequest"
    assert 'unknown field "spec.bogus"' in status_of(err.value)["message"]


def test_unknown_field_is_pruned_with_ignore(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    made = _create(
        co,
        widget_group,
        ns,
        "w",
        spec={"size": 1, "bogus": True, "free": {"any": {"thing": 1}}},
        field_validation="Ignore",
    )
    assert made["spec"] == {"size": 1, "free": {"any": {"thing": 1}}}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"size": 0}, "spec.size", "greater than or equal to 1"),
        ({"size": 11}, "spec.size", "less than or equal to 10"),
        ({"size": "big"}, "spec.size", "must be of type integer"),
        ({"size": 1, "color": "green"}, "spec.color", "Unsupported value"),
        ({"size": 1, "tags": ["toolong"]}, "spec.tags[0]", "Too long"),
        ({"size": 1, "limits": {"gpu": [1]}}, "spec.limits.gpu", "Invalid value"),
        ({}, "spec.size", "Required value"),
    ],
)
def test_schema_violations_are_422_with_field_paths(cluster, widget_group, ns, spec, field, words):
    co = client.CustomObjectsApi(cluster.api)
    with pytest.raises(client.ApiException) as err:
        _create(co, widget_group, ns, "w", spec=spec)
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Widget" and status["details"]["group"] == widget_group
    causes = status["details"]["causes"]
    assert [c["field"] for c in causes if c["field"] != "<nil>"] == [field], causes
    assert words in causes[0]["message"]
    # after a type, enum, length or required error the real server runs no CEL rule, and says so
    blocking = causes[0]["reason"] != "FieldValueInvalid"
    skipped = [c for c in causes if c["field"] == "<nil>"]
    assert len(skipped) == (1 if blocking else 0), causes
    if skipped:
        assert "some validation rules were not checked" in skipped[0]["message"]


def test_status_subresource(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    made = _create(co, widget_group, ns, "w")
    made["status"] = {"ready": True}
    via_main = co.replace_namespaced_custom_object(widget_group, "v1", ns, "widgets", "w", made)
    assert "status" not in via_main
    via_status = co.patch_namespaced_custom_object_status(
        widget_group, "v1", ns, "widgets", "w", {"status": {"ready": True}, "spec": {"size": 9}}
    )
    assert via_status["status"] == {"ready": True} and via_status["spec"]["size"] == 1
    assert via_status["metadata"]["generation"] == 1
    bumped = co.patch_namespaced_custom_object(
        widget_group, "v1", ns, "widgets", "w", {"spec": {"size": 2}}
    )
    assert bumped["metadata"]["generation"] == 2 and bumped["status"] == {"ready": True}


def test_strategic_merge_is_refused_for_custom_resources(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    _create(co, widget_group, ns, "w")
    with pytest.raises(client.ApiException) as err:
        co.patch_namespaced_custom_object(
            widget_group,
            "v1",
            ns,
            "widgets",
            "w",
            {"spec": {"size": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415


def test_cluster_scoped_crd(cluster):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"c{uuid.uuid4().hex[:8]}.kai.test"
    ext.create_custom_resource_definition(_crd(group, scope="Cluster"))
    try:
        eventually(lambda: _served(cluster, group), timeout=30)
        co = client.CustomObjectsApi(cluster.api)
        body = _widget("top", size=3)
        body["apiVersion"] = f"{group}/v1"
        made = co.create_cluster_custom_object(group, "v1", "widgets", body)
        assert "namespace" not in made["metadata"]
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_deleting_the_crd_stops_serving(cluster, ns):
    import threading
    import time

    from kubernetes import watch

    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"d{uuid.uuid4().hex[:8]}.kai.test"
    ext.create_custom_resource_definition(_crd(group))
    eventually(lambda: _served(cluster, group), timeout=30)
    co = client.CustomObjectsApi(cluster.api)
    _create(co, group, ns, "w")
    seen: list[str] = []
    ended = threading.Event()

    def watcher():
        try:
            for ev in watch.Watch().stream(
                co.list_namespaced_custom_object, group, "v1", ns, "widgets", timeout_seconds=60
            ):
                seen.append(ev["type"])
        except Exception:  # a real server may also just drop the connection
            pass
        ended.set()

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    eventually(lambda: seen == ["ADDED"], timeout=30)
    began = time.monotonic()
    ext.delete_custom_resource_definition(f"widgets.{group}")
    eventually(lambda: not _served(cluster, group), timeout=60)
    assert ended.wait(timeout=60) and time.monotonic() - began < 55
    if cluster.embedded:
        assert seen == ["ADDED", "DELETED"]


def test_dynamic_client(cluster, widget_group, ns):
    dyn = dynamic.DynamicClient(cluster.api)
    widgets = dyn.resources.get(api_version=f"{widget_group}/v1", kind="Widget")
    widgets.create(
        body={
            "apiVersion": f"{widget_group}/v1",
            "kind": "Widget",
            "metadata": {"name": "dyn"},
            "spec": {"size": 4},
        },
        namespace=ns,
    )
    got = widgets.get(name="dyn", namespace=ns)
    assert got.spec.size == 4
    widgets.patch(
        name="dyn",
        namespace=ns,
        body={"spec": {"size": 5}},
        content_type="application/merge-patch+json",
    )
    assert widgets.get(name="dyn", namespace=ns).spec.size == 5
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert pods.namespaced


def test_cel_rules(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    with pytest.raises(client.ApiException) as err:
        _create(co, widget_group, ns, "w", spec={"size": 2, "color": "blue"})
    causes = status_of(err.value)["details"]["causes"]
    assert err.value.status == 422
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": "Invalid value: blue widgets need a size above 2",
        }
    ]
    _create(co, widget_group, ns, "w", spec={"size": 3, "color": "blue"})


def test_cel_transition_rule(cluster, widget_group, ns):
    co = client.CustomObjectsApi(cluster.api)
    _create(co, widget_group, ns, "w", spec={"size": 5})
    co.patch_namespaced_custom_object(widget_group, "v1", ns, "widgets", "w", {"spec": {"size": 6}})
    with pytest.raises(client.ApiException) as err:
        co.patch_namespaced_custom_object(
            widget_group, "v1", ns, "widgets", "w", {"spec": {"size": 4}}
        )
    assert err.value.status == 422
    assert "size may not shrink" in status_of(err.value)["message"]


def test_selectable_fields(cluster, ns):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"s{uuid.uuid4().hex[:8]}.kai.test"
    crd = _crd(group)
    crd["spec"]["versions"] = [crd["spec"]["versions"][0]]
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.color"}]
    ext.create_custom_resource_definition(crd)
    try:
        eventually(lambda: _served(cluster, group), timeout=30)
        co = client.CustomObjectsApi(cluster.api)
        _create(co, group, ns, "r", spec={"size": 1, "color": "red"})
        _create(co, group, ns, "b", spec={"size": 3, "color": "blue"})
        found = co.list_namespaced_custom_object(
            group, "v1", ns, "widgets", field_selector="spec.color=blue"
        )
        assert [i["metadata"]["name"] for i in found["items"]] == ["b"]
        with pytest.raises(client.ApiException) as err:
            co.list_namespaced_custom_object(
                group, "v1", ns, "widgets", field_selector="spec.size=1"
            )
        assert err.value.status == 400
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_without_status_subresource_status_is_part_of_the_object(cluster, ns):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"n{uuid.uuid4().hex[:8]}.kai.test"
    crd = _crd(group)
    for version in crd["spec"]["versions"]:
        version.pop("subresources")
    ext.create_custom_resource_definition(crd)
    try:
        eventually(lambda: _served(cluster, group), timeout=30)
        co = client.CustomObjectsApi(cluster.api)
        made = _create(co, group, ns, "w")
        assert made["metadata"]["generation"] == 1
        changed = co.patch_namespaced_custom_object(
            group, "v1", ns, "widgets", "w", {"status": {"ready": True}}
        )
        assert changed["status"] == {"ready": True}
        assert changed["metadata"]["generation"] == 2
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")
