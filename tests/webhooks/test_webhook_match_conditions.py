"""The pod webhooks' match conditions (CEL, evaluated by the API server): a pod left out by a
condition is one the webhook would have answered with no change (mutating) or ``allowed``
(validating). Evaluated here with cel-python over pods of every kind the handlers tell apart;
tests/webhooks/test_webhook_real_cluster.py checks the same on a real API server."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeCluster, example_objects, pod, request

from kai.api import gpu_request
from kai.webhooks import registration
from kai.webhooks.pods import PodMutator, PodValidator

celpy = pytest.importorskip("celpy")


def _matches(expression: str, obj: dict[str, Any]) -> bool:
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate({"object": celpy.json_to_cel(obj)})
    assert isinstance(result, celpy.celtypes.BoolType), (expression, result)
    return bool(result)


def _with(p: dict[str, Any], **spec: Any) -> dict[str, Any]:
    p["spec"].update(spec)
    return p


def _resources(p: dict[str, Any], field: str, resources: dict[str, str]) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"] = {field: resources}
    return p


PODS: dict[str, dict[str, Any]] = {
    "plain, namespace bound": pod(),
    "plain, namespace unbound": pod(namespace="elsewhere"),
    "queue label": pod(labels={"kai.scheduler/queue": "nlp"}),
    "empty queue label": pod(labels={"kai.scheduler/queue": ""}),
    "project label": pod(labels={"project": "nlp"}),
    "missing queue": pod(labels={"kai.scheduler/queue": "no-such-queue"}),
    "parent queue": pod(labels={"kai.scheduler/queue": "research"}),
    "fraction": pod(annotations={"gpu-fraction": "0.5"}),
    "fraction, labelled": pod(
        annotations={"gpu-fraction": "0.5"}, labels={"kai.scheduler/queue": "nlp"}
    ),
    "memory, labelled": pod(annotations={"gpu-memory": "2000"}, labels={"project": "nlp"}),
    "bad fraction, no label": pod(annotations={"gpu-fraction": "2"}, namespace="elsewhere"),
    "num devices alone": pod(annotations={"gpu-fraction-num-devices": "2"}, namespace="elsewhere"),
    "mps alone": pod(annotations={"mps": "true"}, namespace="elsewhere"),
    "container name alone": pod(
        annotations={"gpu-fraction-container-name": "x"}, namespace="elsewhere"
    ),
    "legacy mig annotation": pod(annotations={"nvidia.com/mig-1g.5gb": "1"}, namespace="elsewhere"),
    "other annotations": pod(
        annotations={"team": "a"}, labels={"kai.scheduler/queue": "nlp", "app": "x"}
    ),
    "whole gpus, labelled": pod(gpus=2, labels={"kai.scheduler/queue": "nlp"}),
    "whole gpus, unbound": pod(gpus=2, namespace="elsewhere"),
    "gpu request differs from limit": _resources(
        pod(namespace="elsewhere"), "requests", {"nvidia.com/gpu": "0.5"}
    ),
    "mig resource": _resources(
        pod(namespace="elsewhere"), "limits", {"nvidia.com/mig-1g.5gb": "1"}
    ),
    "gpu in an init container": pod(
        namespace="elsewhere",
        init=[{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}],
    ),
    "runtime class set": _with(
        pod(gpus=1, labels={"kai.scheduler/queue": "nlp"}), runtimeClassName="nvidia"
    ),
    "cpu, labelled, unbound": pod(namespace="elsewhere", labels={"kai.scheduler/queue": "nlp"}),
}


def test_the_mig_prefix_is_the_parsers() -> None:
    assert registration.MIG_PREFIX == gpu_request._MIG_PREFIX


@pytest.mark.parametrize("runtime_class", ["", "nvidia"])
@pytest.mark.parametrize("name", sorted(PODS))
def test_a_pod_left_out_of_the_mutation_would_not_have_been_changed(
    name: str, runtime_class: str
) -> None:
    manifest = PODS[name]
    mutator = PodMutator(FakeCluster(example_objects()), gpu_runtime_class=runtime_class)
    changed = mutator(request(manifest)).patch is not None
    sent = _matches(registration.mutation_condition(runtime_class), manifest)
    assert sent or not changed, f"{name}: the mutation would change it, the condition skips it"


@pytest.mark.parametrize("name", sorted(PODS))
def test_a_pod_left_out_of_the_validation_would_have_been_allowed(name: str) -> None:
    manifest = PODS[name]
    verdict = PodValidator(FakeCluster(example_objects()))(request(manifest))
    sent = _matches(registration.validation_condition(), manifest)
    assert sent or verdict.allowed, f"{name}: refused ({verdict.message}), but not sent"


def test_the_conditions_leave_out_pods_with_nothing_to_do() -> None:
    skipped_by_mutation = {
        n for n, p in PODS.items() if not _matches(registration.mutation_condition(), p)
    }
    assert skipped_by_mutation == {
        "queue label",
        "project label",
        "missing queue",
        "parent queue",
        "other annotations",
        "whole gpus, labelled",
        "runtime class set",
        "cpu, labelled, unbound",
    }
    # with a runtime class, a labelled GPU pod without one is sent; one that has it is not
    with_class = registration.mutation_condition("nvidia")
    assert _matches(with_class, PODS["whole gpus, labelled"])
    assert not _matches(with_class, PODS["runtime class set"])
    skipped_by_validation = {
        n for n, p in PODS.items() if not _matches(registration.validation_condition(), p)
    }
    assert skipped_by_validation == {
        "plain, namespace bound",
        "plain, namespace unbound",
        "empty queue label",
        "project label",
    }


def test_refusals_of_the_validating_webhook_are_all_still_sent() -> None:
    validator = PodValidator(FakeCluster(example_objects()))
    refused = {n for n, p in PODS.items() if not validator(request(p)).allowed}
    # the table above covers every kind of refusal: queue, parser, resources
    assert {
        "missing queue",
        "parent queue",
        "bad fraction, no label",
        "legacy mig annotation",
        "gpu request differs from limit",
        "gpu in an init container",
    } <= refused
