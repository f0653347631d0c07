"""AdmissionReview parsing and answers; the JSON patch of a mutation."""

from __future__ import annotations

import base64
import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.webhooks.review import ReviewError, Verdict, answer, json_patch, parse
from kube_emulator.patch import json_patch as apply_patch


def _review(**request: object) -> bytes:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return orjson.dumps(body)


def test_parse_reads_the_request() -> None:
    req = parse(
        _review(
            uid="u1",
            kind={"group": "", "version": "v1", "kind": "Pod"},
            operation="CREATE",
            namespace="ns",
            object={"metadata": {"generateName": "job-"}},
            dryRun=True,
        )
    )
    assert (req.uid, req.kind, req.operation, req.dry_run) == ("u1", "Pod", "CREATE", True)
    assert req.label == "Pod/ns/job-"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{", "not JSON"),
        (orjson.dumps({"kind": "Pod"}), "not an AdmissionReview"),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "admissionReviewVersions: [v1]",
        ),
        (_review(operation="CREATE"), "request.uid"),
    ],
)
def test_parse_refuses_what_is_not_a_v1_review(body: bytes, fragment: str) -> None:
    with pytest.raises(ReviewError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse(body)


def test_answer_denial_warnings_and_patch() -> None:
    denied = orjson.loads(answer("u", Verdict.deny("no", warnings=["w"] * 20)))["response"]
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    assert denied["status"]["message"] == "no"
    assert len(denied["warnings"]) == 17 and denied["warnings"][-1].startswith("... and 4")
    ops = [{"op": "add", "path": "/x", "value": 1}]
    patched = orjson.loads(answer("u", Verdict(patch=ops)))["response"]
    assert patched["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(patched["patch"])) == ops


_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b/c", "d~e", "f"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["a", "b", "x/y"]), _values),
    st.dictionaries(st.sampled_from(["a", "b", "x/y"]), _values),
)
def test_json_patch_turns_before_into_after(before: dict, after: dict) -> None:
    assert apply_patch(copy.deepcopy(before), json_patch(before, after)) == after


def test_json_patch_appends_to_a_list_that_only_grew() -> None:
    big = {"name": "kube-api-access", "projected": {"sources": [{"x": "y" * 100}]}}
    before = {"spec": {"volumes": [big]}}
    after = {"spec": {"volumes": [big, {"name": "v"}]}}
    ops = json_patch(before, after)
    assert ops == [{"op": "add", "path": "/spec/volumes/-", "value": {"name": "v"}}]
    assert apply_patch(copy.deepcopy(before), ops) == after
    # anything else than growth at the end: the list is replaced whole
    assert json_patch({"l": [1, 2]}, {"l": [0, 1, 2]}) == [
        {"op": "replace", "path": "/l", "value": [0, 1, 2]}
    ]


def test_json_patch_changes_a_container_in_place_not_the_whole_list() -> None:
    main = {"name": "main", "image": "busybox", "volumeMounts": [{"name": "token"}]}
    side = {"name": "side", "image": "envoy"}
    before = {"spec": {"containers": [main, side]}}
    after = {"spec": {"containers": [{**main, "env": [{"name": "E"}]}, side]}}
    ops = json_patch(before, after)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "E"}]}]
    assert apply_patch(copy.deepcopy(before), ops) == after
    # a changed item that is not a mapping: the list is replaced whole
    assert json_patch({"l": [1, {"a": 1}]}, {"l": [2, {"a": 2}]}) == [
        {"op": "replace", "path": "/l", "value": [2, {"a": 2}]}
    ]


@pytest.mark.parametrize("uid", ["705ab4f5-6393-11e8-b7cc-42010a800002", 'odd "uid" \\ é'])
@pytest.mark.parametrize(
    "patch", [None, [{"op": "add", "path": "/metadata/labels/a", "value": "é"}]]
)
def test_allowed_answers_from_templates_are_the_same_bytes(uid: str, patch: list | None) -> None:
    response: dict = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    expected = orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )
    assert answer(uid, Verdict(patch=patch)) == expected
