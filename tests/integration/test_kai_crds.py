"""The project's generated CRDs (manifests/crds/) served by the API: a Queue and a PodGroup
are accepted, unknown fields and schema violations are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_helpers import eventually, status_of
from kubernetes import client

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"


def _crds() -> list[dict]:
    docs = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def kai_crds(cluster):
    crds = _crds()
    if not crds:
        pytest.skip("manifests/crds/ holds no CRDs yet")
    ext = client.ApiextensionsV1Api(cluster.api)
    for crd in crds:
        _create_or_replace(ext, crd)
    co = client.CustomObjectsApi(cluster.api)

    def served():
        try:
            co.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
            co.list_cluster_custom_object("scheduling.run.ai", "v2alpha2", "podgroups")
        except client.ApiException:
            return False
        return True

    eventually(served, timeout=30)
    return {c["metadata"]["name"] for c in crds}


def _create_or_replace(ext, crd, attempts=20):
    """Install ``crd`` whatever is there: other workers (``-n 2``) and other tests install the
    same cluster-wide CRDs at the same time, so a create may meet an existing one and a
    replace a newer resourceVersion; both are retried."""
    name = crd["metadata"]["name"]
    for _ in range(attempts):
        try:
            ext.create_custom_resource_definition(crd)
            return
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        try:
            current = ext.read_custom_resource_definition(name)
            body = {**crd, "metadata": {**crd["metadata"]}}
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
            return
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # deleted or changed meanwhile: again
                raise
    raise AssertionError(f"could not install CRD {name} in {attempts} attempts")


def _queue(name, **resources):
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {
            "resources": resources or {"gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 1}}
        },
    }


def test_all_crds_are_accepted(kai_crds):
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai"} <= kai_crds


def test_queue_and_podgroup(cluster, kai_crds, ns):
    co = client.CustomObjectsApi(cluster.api)
    name = f"{ns}-q"
    co.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", _queue(name))
    try:
        pg = co.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": 2, "queue": name},
            },
        )
        assert pg["spec"]["queue"] == name
    finally:
        co.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)


def test_queue_unknown_field_is_refused(cluster, kai_crds, ns):
    co = client.CustomObjectsApi(cluster.api)
    body = _queue(f"{ns}-bad")
    body["spec"]["wrongField"] = 1
    with pytest.raises(client.ApiException) as err:
        co.create_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", body, field_validation="Strict"
        )
    assert err.value.status == 400
    assert 'unknown field "spec.wrongField"' in status_of(err.value)["message"]


def test_podgroup_bad_type_is_422(cluster, kai_crds, ns):
    co = client.CustomObjectsApi(cluster.api)
    with pytest.raises(client.ApiException) as err:
        co.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": "two", "queue": "q"},
            },
        )
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.minMember"


def test_queue_limit_below_quota_accepted_as_kai_does(cluster, kai_crds, ns):
    # KAI's Queue CRD has no limit >= quota rule; kai validate and the webhook report it instead
    co = client.CustomObjectsApi(cluster.api)
    body = _queue(f"{ns}-low-limit", gpu={"quota": 4, "limit": 2, "overQuotaWeight": 1})
    created = co.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", body)
    try:
        assert created["spec"]["resources"]["gpu"]["limit"] == 2
    finally:
        co.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", f"{ns}-low-limit")


def test_podgroup_cel_rule_min_member_or_subgroup(cluster, kai_crds, ns):
    co = client.CustomObjectsApi(cluster.api)
    with pytest.raises(client.ApiException) as err:
        co.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": 2, "minSubGroup": 1, "queue": "q"},
            },
        )
    assert err.value.status == 422
    assert "set at most one of minMember and minSubGroup" in status_of(err.value)["message"]
