"""The pod webhooks' match conditions (CEL, evaluated by the API server): a pod left out by a
condition is one the webhook would have answered with no change (mutating) or ``allowed``
(validating). Evaluated here with cel-python over pods of every kind the handlers tell apart;
tests/webhooks/test_webhook_real_cluster.py checks the same on a real API server."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import POD_SHAPES as PODS
from fakes import FakeCluster, example_objects, request

from kai.api import gpu_request
from kai.webhooks import registration
from kai.webhooks.pods import PodMutator, PodValidator

celpy = pytest.importorskip("celpy")


def _matches(expression: str, obj: dict[str, Any]) -> bool:
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate({"object": celpy.json_to_cel(obj)})
    assert isinstance(result, celpy.celtypes.BoolType), (expression, result)
    return bool(result)


def test_the_mig_prefix_is_the_parsers() -> None:
    assert registration.MIG_PREFIX == gpu_request.MIG_PREFIX


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
