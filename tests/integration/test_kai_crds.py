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


# --- one contract: what kai validate accepts, the CRDs accept with the same meaning -----------

_TREE_HEAD = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: {name}
spec:
"""


def _kubectl(kubectl, cluster, tmp_path, text, *args):
    import subprocess

    path = tmp_path / "doc.yaml"
    path.write_text(text)
    return subprocess.run(
        [kubectl, "--kubeconfig", str(cluster.kubeconfig), *args, "-f", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("1.5", 1.5),
        ("0.75", 0.75),
        ("1e3", 1000),  # kubectl's YAML reader makes it the number 1000
        ("1e-3", 0.001),
        ("-1", -1),
        ('"1e3"', "1e3"),
        ('"500m"', "500m"),
    ],
)
@pytest.mark.parametrize("mode", ["create", "server-side"])
def test_quantities_as_yaml_numbers_of_any_form_are_accepted(
    cluster, kai_crds, kubectl, tmp_path, written, stored, mode
):
    import json

    name = f"q-{mode}-{abs(hash(written)) % 10**8}"
    text = _TREE_HEAD.format(name=name) + (
        f"  queues:\n  - name: a\n    quota: {{cpu: {written}, memory: {written}}}\n"
    )
    args = ["apply", "--server-side"] if mode == "server-side" else ["create"]
    proc = _kubectl(kubectl, cluster, tmp_path, text, *args, "--dry-run=server")
    assert proc.returncode == 0, proc.stderr
    quota = json.loads(proc.stdout)["spec"]["queues"][0]["quota"]
    assert quota == {"cpu": stored, "memory": stored}


@pytest.mark.parametrize("mode", ["create", "server-side"])
def test_bad_quantity_string_is_still_refused(cluster, kai_crds, kubectl, tmp_path, mode):
    text = _TREE_HEAD.format(name="bad-q") + "  queues:\n  - name: a\n    quota: {cpu: 2 cores}\n"
    args = ["apply", "--server-side"] if mode == "server-side" else ["create"]
    proc = _kubectl(kubectl, cluster, tmp_path, text, *args, "--dry-run=server")
    assert proc.returncode != 0
    assert "spec.queues[0].quota.cpu" in proc.stderr and "should match" in proc.stderr


@pytest.mark.parametrize("mode", ["create", "server-side"])
def test_explicit_nulls_on_optional_fields_are_accepted(cluster, kai_crds, kubectl, tmp_path, mode):
    """An explicit null means "not set" to kai validate; server-side apply (Argo CD, Flux)
    refuses a null in a non-nullable field, so optional fields are nullable."""
    import json

    text = _TREE_HEAD.format(name=f"nulls-{mode}") + (
        "  parent: null\n  defaults: null\n  queues:\n  - name: a\n    displayName: null\n"
        "    quota: {cpu: null, gpu: null, memory: 1Gi}\n    limit: null\n    children: null\n"
    )
    args = ["apply", "--server-side"] if mode == "server-side" else ["create"]
    proc = _kubectl(kubectl, cluster, tmp_path, text, *args, "--dry-run=server")
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)["spec"]
    assert spec.get("parent") is None and spec["queues"][0]["quota"]["memory"] == "1Gi"


def test_null_in_a_required_field_is_refused(cluster, kai_crds, kubectl, tmp_path):
    text = _TREE_HEAD.format(name="null-name") + "  queues:\n  - name: null\n"
    proc = _kubectl(kubectl, cluster, tmp_path, text, "apply", "--server-side", "--dry-run=server")
    assert proc.returncode != 0
    assert "spec.queues[0].name" in proc.stderr


@pytest.mark.parametrize("mode", ["create", "server-side"])
def test_a_null_field_is_not_set_for_the_cel_rules(cluster, kai_crds, kubectl, tmp_path, mode):
    """minMember: null with minSubGroup: kai validate accepts it (null is "not set"), and so
    does the CEL rule "at most one of minMember and minSubGroup" on both servers."""
    text = (
        "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\n"
        "metadata: {name: pg-null, namespace: default}\n"
        "spec: {queue: q, minMember: null, minSubGroup: 2}\n"
    )
    args = ["apply", "--server-side"] if mode == "server-side" else ["create"]
    proc = _kubectl(kubectl, cluster, tmp_path, text, *args, "--dry-run=server")
    assert proc.returncode == 0, proc.stderr
