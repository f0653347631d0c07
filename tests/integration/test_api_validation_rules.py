"""What the real API server refuses, the embedded one refuses with the same code and message:
resource quantities (``"lots"``, ``"-3"`` or ``"500m"`` of ``nvidia.com/gpu``), integers beyond
int64, finalizer names, CRD patterns that Go's regexp does not compile; container statuses get
the fields a client needs to read a pod back; a pattern with catastrophic backtracking answers
at once (RE2). Every test runs against both servers."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from k8s_helpers import pod
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import DynamicApiError


@pytest.fixture
def dyn(cluster):
    return dynamic.DynamicClient(cluster.api)


def _create_fails(dyn, ns, body, kind="Pod", api_version="v1"):
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    with pytest.raises(DynamicApiError) as err:
        resource.create(body=body, namespace=ns)
    return err.value.status, json.loads(err.value.body)


def _with_resources(name: str, resources: dict) -> dict:
    body = pod(name)
    body["spec"]["containers"][0]["resources"] = resources
    return body


FORMAT = "quantities must match the regular expression"
SUFFIX = "unable to parse quantity's suffix"


@pytest.mark.parametrize(
    ("amount", "error"),
    [
        ("lots", FORMAT),
        ("1.2.3", FORMAT),
        ("5 Gi", FORMAT),
        ("0x10", FORMAT),
        ("--1", SUFFIX),
        ("1e", SUFFIX),
        ("1ki", SUFFIX),
    ],
)
def test_a_string_that_is_no_quantity_is_400(dyn, core, ns, amount, error):
    body = _with_resources("q", {"requests": {"cpu": amount}})
    code, status = _create_fails(dyn, ns, body)
    assert code == 400 and status["reason"] == "BadRequest", status
    assert status["message"].startswith('Pod in version "v1" cannot be handled as a Pod: ')
    assert error in status["message"]
    assert core.list_namespaced_pod(ns).items == []


@pytest.mark.parametrize("amount", ["Gi", "1.", ".5", "+1", " 1 ", "1E", "1e+3", 2])
def test_odd_but_valid_quantities_are_accepted(dyn, ns, amount):
    """What apimachinery's parser accepts (``"Gi"`` is zero; spaces are trimmed)."""
    body = _with_resources("odd", {"requests": {"cpu": amount}})
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    pods.create(body=body, namespace=ns, query_params=[("dryRun", "All")])


@pytest.mark.parametrize(
    ("limits", "field", "message"),
    [
        (
            {"nvidia.com/gpu": "-3"},
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            'Invalid value: "-3": must be greater than or equal to 0',
        ),
        (
            {"nvidia.com/gpu": "500m"},
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            'Invalid value: "500m": must be an integer',
        ),
        (
            {"cpu": "-1"},
            "spec.containers[0].resources.limits[cpu]",
            'Invalid value: "-1": must be greater than or equal to 0',
        ),
    ],
)
def test_negative_or_fractional_amounts_are_422(dyn, ns, limits, field, message):
    code, status = _create_fails(dyn, ns, _with_resources("q", {"limits": limits}))
    assert code == 422 and status["reason"] == "Invalid", status
    causes = {(c["field"], c["message"]) for c in status["details"]["causes"]}
    assert (field, message) in causes, causes


def test_an_extended_resource_needs_a_limit_equal_to_its_request(dyn, ns):
    code, status = _create_fails(
        dyn, ns, _with_resources("q", {"requests": {"nvidia.com/gpu": "1"}})
    )
    assert code == 422
    assert {
        "reason": "FieldValueRequired",
        "field": "spec.containers[0].resources.limits",
        "message": "Required value: Limit must be set for non overcommitable resources",
    } in status["details"]["causes"]
    code, status = _create_fails(
        dyn,
        ns,
        _with_resources(
            "q", {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}
        ),
    )
    assert code == 422
    assert [(c["field"], c["message"]) for c in status["details"]["causes"]] == [
        (
            "spec.containers[0].resources.requests",
            'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2',
        )
    ]


def test_valid_quantities_are_kept(core, ns):
    body = _with_resources(
        "ok", {"requests": {"cpu": "250m", "memory": "2Gi"}, "limits": {"nvidia.com/gpu": "2"}}
    )
    created = core.create_namespaced_pod(ns, body)
    resources = created.spec.containers[0].resources
    assert resources.limits == {"nvidia.com/gpu": "2"}
    assert resources.requests["cpu"] == "250m" and resources.requests["memory"] == "2Gi"


@pytest.mark.parametrize("number", [2**63, 10**20, 2**64 - 1, -(2**63) - 1])
def test_integers_beyond_int64_are_400(dyn, core, ns, number):
    body = pod("big")
    body["spec"]["terminationGracePeriodSeconds"] = number
    code, status = _create_fails(dyn, ns, body)
    assert code == 400 and status["reason"] == "BadRequest", status
    assert "cannot unmarshal number" in status["message"], status["message"]
    assert "spec.terminationGracePeriodSeconds of type int64" in status["message"]
    assert core.list_namespaced_pod(ns).items == []


def test_the_largest_int64_is_kept_exactly(core, ns):
    body = pod("fine")
    body["spec"]["terminationGracePeriodSeconds"] = 2**63 - 1
    created = core.create_namespaced_pod(ns, body)
    assert created.spec.termination_grace_period_seconds == 2**63 - 1


def test_finalizer_names_are_checked(dyn, core, ns):
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "f",
            "finalizers": ["bad name!", "a/b/c", "noslash", "example.com/ok"],
        },
    }
    code, status = _create_fails(dyn, ns, body, kind="ConfigMap")
    assert code == 422, status
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    assert (
        "metadata.finalizers",
        'Invalid value: "bad name!": name part must consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
        "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    ) in causes
    assert any(f == "metadata.finalizers" and '"a/b/c"' in m for f, m in causes)
    assert (
        "metadata.finalizers[2]",
        'Invalid value: "noslash": name is neither a standard finalizer name nor is it fully '
        "qualified",
    ) in causes
    assert not any("example.com/ok" in m for _, m in causes)
    ok = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "g", "finalizers": ["example.com/ok", "orphan"]}}
    )
    assert ok.metadata.finalizers == ["example.com/ok", "orphan"]
    core.patch_namespaced_config_map("g", ns, {"metadata": {"finalizers": None}})


def test_a_container_status_without_image_id_still_reads_back(cluster, dyn, core, ns):
    core.create_namespaced_pod(ns, pod("s"))
    current = cluster.api.sanitize_for_serialization(core.read_namespaced_pod("s", ns))
    current["status"] = {"phase": "Pending", "containerStatuses": [{"name": "main"}]}
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    pods.status.replace(body=current, namespace=ns, name="s")
    # the official client refuses a status without imageID: the list must deserialise
    (status,) = core.list_namespaced_pod(ns).items[0].status.container_statuses
    assert (status.name, status.image, status.image_id, status.ready, status.restart_count) == (
        "main",
        "",
        "",
        False,
        0,
    )


def _crd(group: str, pattern: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"patterns.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "patterns", "kind": "Pattern", "singular": "pattern"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"s": {"type": "string", "pattern": pattern}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("^(?=a)b$", "invalid or unsupported Perl syntax: `(?=`"),
        ("(?<!a)b", "invalid named capture: `(?<!a)b`"),
        ("(x)\\1", "invalid escape sequence: `\\1`"),
        ("a\\Z", "invalid escape sequence: `\\Z`"),
        ("a{1001}", "invalid repeat count: `{1001}`"),
    ],
)
def test_a_crd_pattern_go_cannot_compile_is_refused(cluster, pattern, error):
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"p{uuid.uuid4().hex[:8]}.kai.test"
    with pytest.raises(client.ApiException) as err:
        ext.create_custom_resource_definition(_crd(group, pattern))
    assert err.value.status == 422
    (cause,) = json.loads(err.value.body)["details"]["causes"]
    assert cause["field"] == (
        "spec.validation.openAPIV3Schema.properties[spec].properties[s].pattern"
    )
    assert cause["message"] == (
        f"Invalid value: {json.dumps(pattern)}: must be a valid regular expression, but isn't: "
        f"error parsing regexp: {error}"
    )


def test_a_backtracking_pattern_answers_at_once(cluster, ns):
    """``^(a+)+$`` against 100,000 a's and a b: seconds of backtracking in Python's re (minutes
    at this length), linear time in RE2 and Go."""
    ext = client.ApiextensionsV1Api(cluster.api)
    group = f"p{uuid.uuid4().hex[:8]}.kai.test"
    ext.create_custom_resource_definition(_crd(group, "^(a+)+$"))
    try:
        custom = client.CustomObjectsApi(cluster.api)
        body = {"apiVersion": f"{group}/v1", "kind": "Pattern", "metadata": {"name": "x"}}
        deadline = time.monotonic() + 30
        while True:  # the new type is served once the CRD is established
            try:
                custom.create_namespaced_custom_object(
                    group, "v1", ns, "patterns", {**body, "spec": {"s": "aaa"}}
                )
                break
            except client.ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        started = time.monotonic()
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object(
                group,
                "v1",
                ns,
                "patterns",
                {**body, "metadata": {"name": "y"}, "spec": {"s": "a" * 100_000 + "b"}},
            )
        assert time.monotonic() - started < 5
        assert err.value.status == 422 and "should match '^(a+)+$'" in err.value.body
    finally:
        ext.delete_custom_resource_definition(f"patterns.{group}")
