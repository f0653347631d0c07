"""Every shape of AdmissionReview gets an answer: HTTP 400 naming the field for what the API
server would never send, else a well-formed review (allowed or refused with a message), never
an exception's name and never no answer. The handlers are the real ones."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from fakes import FakeCluster, example_objects, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.webhooks.podgroups import PodGroupValidator
from kai.webhooks.pods import PodMutator, PodValidator
from kai.webhooks.policies import PolicyValidator
from kai.webhooks.server import Admission, Route

EXCEPTION_NAMES = ("Error:", "Exception", "Traceback", "KeyError", "TypeError", "AttributeError")


def _admission() -> Admission:
    cluster: Any = FakeCluster(example_objects())
    validator, mutator = PodValidator(cluster), PodMutator(cluster)
    routes: dict[str, Route] = {
        "/validate/policies": ("policies", PolicyValidator(cluster)),
        "/validate/podgroups": ("podgroups", PodGroupValidator(cluster)),
        "/validate/pods": ("pods.validate", validator, validator.from_cache),
        "/mutate/pods": ("pods.mutate", mutator, mutator),
    }
    return Admission(routes)


ADMISSION = _admission()
PATHS = tuple(ADMISSION.routes)


def _review(obj: Any, *, kind: str = "Pod", group: str = "", operation: str = "CREATE") -> Any:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": operation,
            "namespace": "team-nlp",
            "object": obj,
        },
    }


def _well_formed(code: int, body: bytes, ctype: str) -> dict[str, Any] | None:
    """The review's response (None for a 400), after checking the answer's form."""
    assert code in (200, 400), (code, body[:300])
    text = body.decode()
    assert not any(name in text for name in EXCEPTION_NAMES), text[:500]
    if code == 400:
        assert ctype == "text/plain" and text.strip()
        return None
    review = orjson.loads(body)
    assert review["kind"] == "AdmissionReview" and review["apiVersion"] == "admission.k8s.io/v1"
    response = review["response"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        status = response["status"]
        assert status["code"] != 500, status  # a shape error is the client's, not ours
        assert status["message"].strip()
    return response  # type: ignore[no-any-return]


def _answer(path: str, review: Any) -> tuple[int, bytes, str]:
    inline = ADMISSION.answer_inline(path, orjson.dumps(review))
    full = ADMISSION.answer(path, orjson.dumps(review))
    if inline is not None:
        _well_formed(*inline)
    return full


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["request"]["object"].update(metadata=[1, 2]), "request.object.metadata"),
        (
            lambda r: r["request"]["object"]["spec"].update(containers={"main": {}}),
            "request.object.spec.containers",
        ),
        (lambda r: r["request"].pop("uid"), "request.uid"),
        (lambda r: r["request"].update(uid=7), "request.uid"),
        (lambda r: r["request"].update(kind="Pod"), "request.kind"),
        (lambda r: r["request"].update(operation="PATCH"), "request.operation"),
        (lambda r: r["request"].update(object=[]), "request.object"),
        (lambda r: r["request"].update(dryRun="yes"), "request.dryRun"),
        (
            lambda r: r["request"]["object"]["metadata"].update(labels={"a": 1}),
            "request.object.metadata.labels.a",
        ),
        (
            lambda r: r["request"]["object"]["spec"]["containers"][0].update(env={"A": "1"}),
            "request.object.spec.containers[0].env",
        ),
        (
            lambda r: r["request"]["object"]["spec"]["containers"][0].update(
                resources={"limits": {"nvidia.com/gpu": [1]}}
            ),
            "request.object.spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
    ],
)
@pytest.mark.parametrize("path", PATHS)
def test_a_review_the_api_server_would_never_send_is_answered_400_naming_the_field(
    change: Any, field: str, path: str
) -> None:
    review = _review(pod(gpus=1))
    change(review)
    code, body, ctype = _answer(path, review)
    assert code == 400, body
    assert field in body.decode()
    _well_formed(code, body, ctype)


@pytest.mark.parametrize("path", ["/validate/pods", "/mutate/pods"])
def test_a_well_formed_review_of_a_strange_pod_gets_a_review(path: str) -> None:
    """The object's own fields outside what the webhooks read are the validators' business."""
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": [1]}}
    response = _well_formed(*_answer(path, _review(obj)))
    assert response is not None and response["uid"] == "u-1"


def test_a_kind_the_webhook_is_not_registered_for_is_answered_400() -> None:
    code, body, _ = _answer("/validate/podgroups", _review(pod()))
    assert code == 400
    assert "reviews scheduling.run.ai/PodGroup, not 'Pod'" in body.decode()


# -- fuzzing ---------------------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _bases() -> list[tuple[str, dict[str, Any]]]:
    """(route, review) of valid requests: pods, PodGroups, each policy kind of the example."""
    out = [("/validate/pods", _review(pod(gpus=1))), ("/mutate/pods", _review(pod(gpus=1)))]
    for obj in example_objects():
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        path = "/validate/podgroups" if obj.get("kind") == "PodGroup" else "/validate/policies"
        out.append((path, _review(obj, kind=str(obj["kind"]), group=group)))
    return out


BASES = _bases()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, Any]:
    route, base = draw(st.sampled_from(BASES))
    review = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(review)
        where = draw(st.sampled_from(paths))
        review = _replace(review, where, draw(JSON))
    return draw(st.sampled_from([route, *PATHS])), review


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_fuzzed_reviews_always_get_a_well_formed_answer(case: tuple[str, Any]) -> None:
    path, review = case
    _well_formed(*_answer(path, review))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(PATHS), JSON)
def test_random_json_always_gets_a_well_formed_answer(path: str, value: Any) -> None:
    _well_formed(*_answer(path, value))
