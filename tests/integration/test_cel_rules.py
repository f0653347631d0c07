"""CEL validation rules of a CRD, across the language features CRD authors use."""

from __future__ import annotations

import uuid

import pytest
from k8s_helpers import eventually, status_of
from kubernetes import client

RULES = [
    ("self.replicas <= self.maxReplicas", "replicas above maxReplicas"),
    ("self.name.startsWith('app-') && self.name.size() <= 12", "bad name"),
    ("!has(self.mode) || self.mode in ['fast', 'slow']", "bad mode"),
    ("self.ports.all(p, p > 1024)", "privileged port"),
    ("self.ports.exists_one(p, p == 8080)", "exactly one 8080"),
    ("size(self.tags.filter(t, t.matches('^[a-z]+$'))) == size(self.tags)", "lowercase tags"),
    ("self.limits.all(k, self.limits[k] >= 0)", "negative limit"),
    ("has(self.ratio) ? self.ratio > 0.0 && self.ratio < 1.0 : true", "ratio out of range"),
    ("self.ports.map(p, p * 2).exists(q, q > 2050)", "map/exists"),
]


@pytest.fixture(scope="module")
def rules_group(cluster):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"cel{uuid.uuid4().hex[:8]}.kai.test"
    spec_schema = {
        "type": "object",
        "x-kubernetes-validations": [{"rule": r, "message": m} for r, m in RULES],
        "properties": {
            "replicas": {"type": "integer"},
            "maxReplicas": {"type": "integer"},
            # the bounds keep the rules' estimated cost within a real server's budget
            "name": {"type": "string", "maxLength": 63},
            "mode": {"type": "string", "maxLength": 16},
            "ports": {"type": "array", "maxItems": 16, "items": {"type": "integer"}},
            "tags": {
                "type": "array",
                "maxItems": 16,
                "items": {"type": "string", "maxLength": 63},
            },
            "limits": {
                "type": "object",
                "maxProperties": 16,
                "additionalProperties": {"type": "integer"},
            },
            "ratio": {"type": "number"},
        },
        "required": ["replicas", "maxReplicas", "name", "ports", "tags", "limits"],
    }
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": f"ruled.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "ruled", "singular": "ruled", "kind": "Ruled"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {"spec": spec_schema},
                            }
                        },
                    }
                ],
            },
        }
    )

    def served():
        try:
            client.CustomObjectsApi(cluster.api).list_cluster_custom_object(group, "v1", "ruled")
        except client.ApiException:
            return False
        return True

    eventually(served, timeout=30)
    yield group
    ext.delete_custom_resource_definition(f"ruled.{group}")


GOOD = {
    "replicas": 2,
    "maxReplicas": 3,
    "name": "app-web",
    "ports": [8080, 9090],
    "tags": ["a", "b"],
    "limits": {"cpu": 1},
    "ratio": 0.5,
    "mode": "fast",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({}, None),
        ({"replicas": 4}, "replicas above maxReplicas"),
        ({"name": "web"}, "bad name"),
        ({"name": "app-much-too-long"}, "bad name"),
        ({"mode": "medium"}, "bad mode"),
        ({"ports": [80, 8080]}, "privileged port"),
        ({"ports": [8080, 8080]}, "exactly one 8080"),
        ({"tags": ["ok", "NotOk"]}, "lowercase tags"),
        ({"limits": {"cpu": -1}}, "negative limit"),
        ({"ratio": 1.5}, "ratio out of range"),
    ],
)
def test_rules(cluster, rules_group, ns, change, message):
    co = client.CustomObjectsApi(cluster.api)
    body = {
        "apiVersion": f"{rules_group}/v1",
        "kind": "Ruled",
        "metadata": {"name": f"r{uuid.uuid4().hex[:6]}"},
        "spec": {**GOOD, **change},
    }
    if message is None:
        co.create_namespaced_custom_object(rules_group, "v1", ns, "ruled", body)
        return
    with pytest.raises(client.ApiException) as err:
        co.create_namespaced_custom_object(rules_group, "v1", ns, "ruled", body)
    status = status_of(err.value)
    assert err.value.status == 422
    assert [c["message"] for c in status["details"]["causes"]] == [f"Invalid value: {message}"]
    assert status["details"]["causes"][0]["field"] == "spec"
