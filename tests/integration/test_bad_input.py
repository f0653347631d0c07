"""Malformed objects get one clear 400/422 naming the field, never a 500 or a half-applied
write.

The typed APIs of the client validate bodies before sending; the dynamic client sends them as
they are, which is what a buggy controller or a hand-written manifest does."""

from __future__ import annotations

import json
import re

import pytest
from k8s_helpers import pod
from kubernetes import dynamic
from kubernetes.dynamic.exceptions import DynamicApiError


@pytest.fixture
def dyn(cluster):
    return dynamic.DynamicClient(cluster.api)


def _fails(call):
    with pytest.raises(DynamicApiError) as err:
        call()
    return err.value.status, json.loads(err.value.body)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["spec"].__setitem__("containers", "nginx"), "spec.containers"),
        (
            lambda b: b["spec"]["containers"][0].__setitem__("resources", ["cpu"]),
            "spec.containers[0].resources",
        ),
        (lambda b: b["spec"].__setitem__("tolerations", [5]), "spec.tolerations[0]"),
        (lambda b: b["metadata"].__setitem__("labels", ["a"]), "metadata.labels"),
        (lambda b: b["metadata"].__setitem__("finalizers", "x"), "metadata.finalizers"),
        (
            lambda b: b["metadata"].__setitem__("ownerReferences", [{"uid": 5}]),
            "metadata.ownerReferences[0].uid",
        ),
    ],
)
def test_wrong_types_are_400_naming_the_field(core, dyn, ns, mutate, field):
    body = pod("p")
    mutate(body)
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    code, status = _fails(lambda: pods.create(body=body, namespace=ns))
    assert code == 400 and status["reason"] == "BadRequest"
    # the real server's decoder names the field's path without list indices
    assert re.sub(r"\[\d+\]", "", field) in status["message"], status["message"]
    assert core.list_namespaced_pod(ns).items == []


def test_owner_reference_without_uid_is_422(dyn, ns):
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "c",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": ""}],
        },
    }
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    code, status = _fails(lambda: cms.create(body=body, namespace=ns))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "metadata.ownerReferences.uid"


def test_body_kind_mismatch_is_400(dyn, ns):
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    code, _ = _fails(
        lambda: cms.create(
            body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}, namespace=ns
        )
    )
    assert code == 400


def test_bad_crd_schema_is_refused(dyn):
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "bads.kai.test"},
        "spec": {
            "group": "kai.test",
            "scope": "Namespaced",
            "names": {"plural": "bads", "kind": "Bad"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "required": "size"}},
                        }
                    },
                }
            ],
        },
    }
    code, status = _fails(lambda: crds.create(body=crd))
    assert code in (400, 422)
    assert "required" in status["message"]


def test_update_of_wrong_name_is_400(core, dyn, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    code, _ = _fails(
        lambda: cms.replace(
            body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
            name="a",
            namespace=ns,
        )
    )
    assert code == 400


def test_oversized_body_is_413(dyn, ns):
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"blob": "x" * (3 * 1024 * 1024 + 10)},
    }
    code, status = _fails(lambda: cms.create(body=body, namespace=ns))
    assert code == 413 and status["reason"] == "RequestEntityTooLarge"


def test_label_key_and_annotation_size_are_checked(core, ns):
    from kubernetes import client

    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "l", "labels": {"bad key!": "x"}}}
        )
    assert err.value.status == 422
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "a", "annotations": {"big": "x" * (256 * 1024 + 1)}}}
        )
    assert err.value.status == 422
    assert "Too long" in json.loads(err.value.body)["message"]


MALFORMED_PATCHES = [
    ("application/json-patch+json", [{"op": "add", "path": 5, "value": 1}]),
    ("application/json-patch+json", [{"op": "move", "path": "/data/y"}]),
    # (not here: a copy from a missing member, which a real server accepts and copies null)
    ("application/json-patch+json", [{"op": "jump", "path": "/data"}]),
    ("application/json-patch+json", [{"op": "remove", "path": "/metadata"}]),
    # the client turns a non-list JSON patch into a strategic merge patch: an unknown field
    ("application/json-patch+json", {"op": "add"}),
    ("application/merge-patch+json", {"metadata": {"labels": 5}}),
    ("application/merge-patch+json", {"metadata": {"name": "other"}}),
    ("application/merge-patch+json", {"data": {"k": 5}}),
    # (not here: $deleteFromPrimitiveList on a map field, which a real server ignores)
    ("application/strategic-merge-patch+json", {"metadata": {"finalizers": [5]}}),
]


@pytest.mark.parametrize(("content_type", "body"), MALFORMED_PATCHES)
def test_malformed_patches_are_client_errors(core, ns, content_type, body):
    from kubernetes import client

    core.create_namespaced_config_map(ns, {"metadata": {"name": "t"}, "data": {"k": "v"}})
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map(
            "t", ns, body, _content_type=content_type, field_validation="Strict"
        )
    assert 400 <= err.value.status < 500, err.value.body
    assert core.read_namespaced_config_map("t", ns).data == {"k": "v"}


def test_unknown_top_level_field_of_a_builtin_kind(core, ns):
    from kubernetes import client

    core.create_namespaced_config_map(ns, {"metadata": {"name": "u"}, "data": {"k": "v"}})
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("u", ns, {"datum": {"a": "b"}}, field_validation="Strict")
    # a patch: the real server reports the strict decoding error as an invalid patch
    assert err.value.status == 422
    status = json.loads(err.value.body)
    assert 'unknown field "datum"' in status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == ["patch"]
    kept = core.patch_namespaced_config_map(
        "u", ns, {"datum": {"a": "b"}, "data": {"x": "y"}}, field_validation="Ignore"
    )
    assert kept.data == {"k": "v", "x": "y"}


def test_protobuf_with_fields_the_server_does_not_know_is_415(cluster, ns):
    import urllib.error
    import urllib.request

    server = cluster.need_embedded("a real server reads every protobuf field")

    def field(number, payload):
        return bytes([number << 3 | 2, len(payload)]) + payload

    type_meta = field(1, b"v1") + field(2, b"ConfigMap")
    config_map = field(1, field(1, b"pb")) + field(9, b"surprise")
    body = b"k8s\x00" + field(1, type_meta) + field(2, config_map)
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/{ns}/configmaps",
        data=body,
        method="POST",
        headers={"Content-Type": "application/vnd.kubernetes.protobuf", **server.auth_headers()},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10, context=server.ssl_context())
    assert err.value.code == 415
    assert "ConfigMap field 9" in json.loads(err.value.read())["message"]
