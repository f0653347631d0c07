"""The generated CRDs are valid, structural, and their CEL rules say what they should."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.api import generate
from kai.api.crd import CRDError, structural_schema
from kai.api.registry import KindInfo, all_kinds, lookup
from kai.api.structural import structural_problems
from kai.api.types import QUANTITY_PATTERN

KINDS = all_kinds()


@functools.cache
def _files() -> dict[str, str]:
    return generate.generated_files()


def _crd(info: KindInfo) -> dict[str, Any]:
    text = _files()[info.crd_path]
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert len(docs) == 1
    crd: dict[str, Any] = docs[0]
    return crd


def _kind(api_version: str, kind: str) -> KindInfo:
    info = lookup(api_version, kind)
    assert info is not None
    return info


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_crd_is_a_valid_kubernetes_object(info: KindInfo, version: str) -> None:
    kubernetes_validate.validate(_crd(info), version, strict=True)


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_crd_schema_is_structural(info: KindInfo) -> None:
    schema = _crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    assert "$ref" not in json.dumps(schema)


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_crd_identity(info: KindInfo) -> None:
    crd = _crd(info)
    assert crd["metadata"]["name"] == f"{info.plural}.{info.group}"
    spec = crd["spec"]
    assert spec["group"] == info.group
    assert spec["scope"] == info.scope
    assert spec["names"]["kind"] == info.kind
    assert spec["names"]["plural"] == info.plural
    (version,) = spec["versions"]
    assert version["name"] == info.version
    assert version["served"] and version["storage"]
    assert ("subresources" in version) == info.model.HAS_STATUS
    columns = [c["name"] for c in version.get("additionalPrinterColumns", [])]
    assert columns == [c.name for c in info.model.PRINTER_COLUMNS]


def test_kai_crds_match_kai_identity() -> None:
    queue = _crd(_kind("scheduling.run.ai/v2", "Queue"))
    assert [c["name"] for c in queue["spec"]["versions"][0]["additionalPrinterColumns"]] == [
        "Priority",
        "Parent",
        "Children",
        "DisplayName",
        "GPU-Quota",
        "GPU-Limit",
        "GPU-FairShare",
        "GPU-Allocated",
    ]
    wide = [
        c for c in queue["spec"]["versions"][0]["additionalPrinterColumns"] if c.get("priority")
    ]
    assert [c["jsonPath"] for c in wide] == [
        ".spec.resources.gpu.quota",
        ".spec.resources.gpu.limit",
        ".status.fairShare.nvidia\\.com/gpu",
        ".status.allocated.nvidia\\.com/gpu",
    ]
    podgroup = _crd(_kind("scheduling.run.ai/v2alpha2", "PodGroup"))
    assert podgroup["spec"]["names"]["shortNames"] == ["pg"]
    assert podgroup["spec"]["scope"] == "Namespaced"
    topology = _crd(_kind("kai.scheduler/v1alpha1", "Topology"))
    assert "subresources" not in topology["spec"]["versions"][0]


def test_quantities_are_untyped_scalars_whose_strings_follow_the_grammar() -> None:
    """int-or-string would refuse 1.5; a preserved untyped node with a pattern accepts every
    number and still refuses a bad quantity string (the server applies pattern to strings)."""
    shard = _crd(_kind("kai.scheduler/v1", "SchedulingShard"))
    spec = shard["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node = spec["properties"]["goMemLimit"]
    assert node["x-kubernetes-preserve-unknown-fields"] is True
    assert node["pattern"] == QUANTITY_PATTERN
    assert node["nullable"] is True
    assert "type" not in node and "anyOf" not in node
    assert "x-kubernetes-int-or-string" not in node


def test_optional_fields_are_nullable_and_required_ones_are_not() -> None:
    tree = _crd(_kind("gitops.kai.scheduler/v1alpha1", "QueueTree"))
    spec = tree["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["parent"]["nullable"] is True
    assert spec["properties"]["defaults"]["nullable"] is True
    assert "nullable" not in spec["properties"]["queues"]
    node = spec["properties"]["queues"]["items"]
    assert "nullable" not in node["properties"]["name"]
    assert node["properties"]["displayName"]["nullable"] is True


# --- the structural checker itself -------------------------------------------------------------

GOOD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "q": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True,
                },
                "any": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}


def _broken(
    path: list[str], change: dict[str, Any], remove: tuple[str, ...] = ()
) -> dict[str, Any]:
    schema = copy.deepcopy(GOOD)
    node = schema
    for key in path:
        node = node["properties"][key]
    node.update(change)
    for key in remove:
        del node[key]
    return schema


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (_broken(["spec", "tags"], {}, remove=("type",)), "missing type"),
        (_broken(["spec", "tags"], {"type": ["array", "null"]}), "type must be one of"),
        (_broken(["spec"], {"additionalProperties": False}), "additionalProperties: false"),
        (
            _broken(["spec"], {"additionalProperties": {"type": "string"}}),
            "mutually exclusive",
        ),
        (_broken(["spec", "tags"], {"uniqueItems": True}), "uniqueItems"),
        (_broken(["spec", "q"], {"type": "string"}), "must not have a type"),
        (_broken(["spec"], {"$ref": "#/definitions/x"}), "'$ref' is not allowed"),
        (
            _broken(["spec"], {"anyOf": [{"type": "object", "properties": {"x": {}}}]}),
            "inside allOf/anyOf/oneOf/not",
        ),
        (
            _broken(["metadata"], {"properties": {"labels": {"type": "object"}}}),
            "metadata may only restrict",
        ),
        (_broken(["spec", "tags"], {"x-kubernetes-list-type": "map"}), "list-map-keys"),
        (
            _broken(["spec"], {"x-kubernetes-validations": [{"rule": "true"}]}),
            "needs a message",
        ),
        (_broken(["spec", "tags"], {}, remove=("items",)), "an array needs items"),
    ],
)
def test_structural_checker_finds(schema: dict[str, Any], expected: str) -> None:
    assert structural_problems(GOOD) == []
    problems = structural_problems(schema)
    assert any(expected in p for p in problems), problems


def test_translation_refuses_what_has_no_structural_form() -> None:
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    with pytest.raises(CRDError, match=r"\.spec: 'oneOf'"):
        structural_schema(schema)


# --- CEL rules ---------------------------------------------------------------------------------


def _queue(**resources: dict[str, float]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"resources": resources},
    }


@pytest.mark.parametrize(
    "resource",
    [
        {"quota": 2, "limit": 4},
        {"quota": 2, "limit": 2},
        {"quota": 2, "limit": -1},
        {"quota": -1, "limit": 3},
        {"quota": 2},
        {"quota": 0.3, "limit": 0.3},
        # below the quota: KAI's CRD accepts it (kai validate and the webhook report it)
        {"quota": 2, "limit": 1.5},
        {"quota": 4, "limit": 0},
    ],
)
def test_queue_limit_and_quota_accepted_as_kais_crd_does(
    resource: dict[str, float], crd_check: Callable[..., list[str]]
) -> None:
    info = _kind("scheduling.run.ai/v2", "Queue")
    assert crd_check(info, _queue(gpu=resource, cpu={"quota": 1, "limit": -1})) == []


def _topology(*levels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": list(levels)},
    }


ZONE = {"nodeLabel": "topology.kubernetes.io/zone"}
RACK = {"nodeLabel": "example.com/rack", "alias": "rack"}
HOST = {"nodeLabel": "kubernetes.io/hostname"}


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ((ZONE, RACK, HOST), None),
        ((ZONE, ZONE), "each nodeLabel may appear only once"),
        ((HOST, ZONE), "kubernetes.io/hostname may only be the last (lowest) level"),
        ((RACK, {"nodeLabel": "example.com/block", "alias": "rack"}), "each alias may appear"),
        (
            (ZONE, {"nodeLabel": "example.com/rack", "alias": "topology.kubernetes.io/zone"}),
            "an alias must not be equal to any nodeLabel",
        ),
    ],
)
def test_topology_rules(
    levels: tuple[dict[str, str], ...], message: str | None, crd_check: Callable[..., list[str]]
) -> None:
    info = _kind("kai.scheduler/v1alpha1", "Topology")
    problems = crd_check(info, _topology(*levels))
    if message is None:
        assert problems == []
    else:
        assert len(problems) == 1 and message in problems[0], problems


def test_topology_node_labels_are_immutable_but_aliases_are_not(
    crd_check: Callable[..., list[str]],
) -> None:
    info = _kind("kai.scheduler/v1alpha1", "Topology")
    old = _topology(ZONE, RACK, HOST)
    renamed_alias = _topology(ZONE, {**RACK, "alias": "r"}, HOST)
    assert crd_check(info, renamed_alias, old) == []
    reordered = _topology(RACK, ZONE, HOST)
    assert any("immutable" in p for p in crd_check(info, reordered, old))
    shorter = _topology(ZONE, HOST)
    assert any("immutable" in p for p in crd_check(info, shorter, old))


@pytest.mark.parametrize(
    ("spec", "bad_path"),
    [
        ({"minMember": 2}, None),
        ({"minSubGroup": 1, "subGroups": [{"name": "a", "minMember": 1}]}, None),
        ({"minMember": 2, "minSubGroup": 1}, ".spec"),
        (
            {"subGroups": [{"name": "a", "minMember": 1, "minSubGroup": 1}]},
            ".spec.subGroups[0]",
        ),
    ],
)
def test_podgroup_min_member_and_min_subgroup_exclusive(
    spec: dict[str, Any], bad_path: str | None, crd_check: Callable[..., list[str]]
) -> None:
    info = _kind("scheduling.run.ai/v2alpha2", "PodGroup")
    obj = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": spec,
    }
    problems = crd_check(info, obj)
    if bad_path is None:
        assert problems == []
    else:
        assert problems == [f"{bad_path}: set at most one of minMember and minSubGroup"]


def test_crd_rejects_unknown_fields_and_bad_quantities(crd_check: Callable[..., list[str]]) -> None:
    info = _kind("kai.scheduler/v1", "SchedulingShard")
    base = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": "s"}}
    assert crd_check(info, {**base, "spec": {"goMemLimit": "6Gi"}}) == []
    assert crd_check(info, {**base, "spec": {"goMemLimit": "6 GB"}})
    assert crd_check(info, {**base, "spec": {"placementStrategy": {"gpu": "pack"}}})
    assert crd_check(info, {**base, "spec": {"kvalue": 1}})
    assert crd_check(info, {**base, "spec": {"goMemLimitRatio": 0}})
    assert crd_check(info, {**base, "spec": {"goMemLimitRatio": 1}}) == []


# --- the model's Topology rules and the CRD's CEL rules agree ---------------------------------

_LABELS = ["topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname", "rack"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_LABELS), st.none() | st.sampled_from(_LABELS)),
        min_size=1,
        max_size=5,
    )
)
def test_topology_model_and_cel_agree(
    crd_check: Callable[..., list[str]], levels: list[tuple[str, str | None]]
) -> None:
    obj = _topology(
        *[{"nodeLabel": label, **({"alias": alias} if alias else {})} for label, alias in levels]
    )
    info = _kind("kai.scheduler/v1alpha1", "Topology")
    model_ok = True
    try:
        info.model.model_validate(obj)
    except ValueError:
        model_ok = False
    assert model_ok == (crd_check(info, obj) == [])


def test_recursive_documents_are_checked_to_a_fixed_depth(
    crd_check: Callable[..., list[str]],
) -> None:
    """QueueTree nests queues without end; the CRD checks RECURSION_DEPTH levels, then keeps."""
    from kai.api.crd import RECURSION_DEPTH

    info = _kind("gitops.kai.scheduler/v1alpha1", "QueueTree")

    def tree(depth: int, bad_at: int | None) -> dict[str, Any]:
        node: dict[str, Any] = {"name": f"q{depth}"}
        if depth == bad_at:
            node["quotaa"] = 1
        if depth < 9:
            node["children"] = [tree(depth + 1, bad_at)]
        return node

    def obj(bad_at: int | None) -> dict[str, Any]:
        return {
            "apiVersion": "gitops.kai.scheduler/v1alpha1",
            "kind": "QueueTree",
            "metadata": {"name": "deep"},
            "spec": {"queues": [tree(0, bad_at)]},
        }

    assert crd_check(info, obj(None)) == []
    assert crd_check(info, obj(RECURSION_DEPTH - 1)) != []
    assert crd_check(info, obj(RECURSION_DEPTH + 1)) == []  # beyond the depth: admission's job


# --- quantities: the CRD node and kai validate agree on every number and string ----------------

_QUANTITY_TEXT = st.one_of(
    st.from_regex(
        r"\A[+-]?([0-9]{1,6}(\.[0-9]{0,3})?|\.[0-9]{1,3})(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?\Z"
    ),
    st.text(alphabet="0123456789.+-eEkKMGiu m_x", max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False, width=64),
        _QUANTITY_TEXT,
    )
)
def test_quantity_node_and_the_model_agree(value: object) -> None:
    """A number of any form, or a string: the CRD's quantity node (checked by the embedded
    API server's validator, which applies ``pattern`` to strings only, as the real one) admits
    exactly what ``kai validate``'s Quantity admits."""
    from pydantic import TypeAdapter, ValidationError

    from kai.api.types import Quantity
    from kube_emulator.schema_validation import Validator

    tree = _crd(_kind("gitops.kai.scheduler/v1alpha1", "QueueTree"))
    spec = tree["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node = spec["properties"]["queues"]["items"]["properties"]["quota"]["properties"]["cpu"]
    try:
        TypeAdapter(Quantity).validate_python(value)
        model_ok = True
    except ValidationError:
        model_ok = False
    checker = Validator()
    checker.check(value, node, "spec.queues[0].quota.cpu")
    assert (not checker.errors) == model_ok, (value, checker.errors)
