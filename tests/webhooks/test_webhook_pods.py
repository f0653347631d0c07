"""The pod webhooks: GPU request and queue checks, and the mutation (idempotent, KAI's names)."""

from __future__ import annotations

import copy

import pytest
from fakes import FakeCluster, example_objects, pod, request

from kai.webhooks.pods import PodMutator, PodValidator, configmap_prefix
from kai.webhooks.review import json_patch
from kube_emulator.patch import json_patch as apply_patch


def _cluster() -> FakeCluster:
    return FakeCluster(example_objects())


def test_fractional_pod_gets_kai_gpu_sharing_env_volume_and_configmaps() -> None:
    out = PodMutator(_cluster()).mutate(pod(annotations={"gpu-fraction": "0.5"}), "team-nlp")
    prefix = out["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert prefix.startswith("p-") and prefix.endswith("-shared-gpu")
    container = out["spec"]["containers"][0]
    cm = f"{prefix}-0"
    assert container["env"] == [
        {"name": n, "valueFrom": {"configMapKeyRef": {"name": cm, "key": n}}}
        for n in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
    ]
    assert container["envFrom"] == [{"configMapRef": {"name": f"{cm}-evar"}}]
    assert out["spec"]["volumes"] == [{"name": f"{cm}-vol", "configMap": {"name": cm}}]


def test_mutation_is_idempotent_and_a_reinvocation_changes_nothing() -> None:
    mutator = PodMutator(_cluster(), gpu_runtime_class="nvidia")
    original = pod(annotations={"gpu-memory": "2000"}, labels={})
    once = mutator.mutate(original, "team-nlp")
    assert mutator.mutate(once, "team-nlp") == once
    # the patch sent to the API server turns the pod into exactly the mutated one
    assert apply_patch(copy.deepcopy(original), json_patch(original, once)) == once
    verdict = mutator(request(once))
    assert verdict.allowed and verdict.patch is None


def test_mutation_leaves_the_reviewed_pod_alone() -> None:
    """The mutation copies only what it changes; the pod it was given is never touched (the
    JSON patch is computed against it), nested env entries, volumes and init containers
    included."""
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "A", "value": "1"}]
    original = pod(annotations={"gpu-fraction": "0.5"}, labels={})
    original["spec"]["containers"][0]["env"] = env
    original["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "x"}}]
    original["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    original["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    before = copy.deepcopy(original)
    once = PodMutator(_cluster(), gpu_runtime_class="nvidia").mutate(original, "team-nlp")
    assert original == before
    assert once != before
    assert apply_patch(copy.deepcopy(original), json_patch(original, once)) == once


def test_reinvocation_after_another_webhook_reordered_env_keeps_one_of_each() -> None:
    mutator = PodMutator(_cluster())
    once = mutator.mutate(pod(annotations={"gpu-fraction": "0.25"}), "team-nlp")
    container = once["spec"]["containers"][0]
    container["env"] = [{"name": "OTHER", "value": "1"}, *reversed(container["env"])]
    again = mutator.mutate(once, "team-nlp")
    names = [e["name"] for e in again["spec"]["containers"][0]["env"]]
    assert sorted(names) == sorted(
        ["OTHER", "NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"]
    )
    assert len(again["spec"]["volumes"]) == 1


def test_init_container_target_uses_kai_init_index_and_named_container() -> None:
    init = [{"name": "warmup", "image": "busybox"}]
    out = PodMutator(_cluster()).mutate(
        pod(
            annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "warmup"},
            init=init,
        ),
        "team-nlp",
    )
    prefix = out["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert out["spec"]["initContainers"][0]["envFrom"] == [
        {"configMapRef": {"name": f"{prefix}-i0-evar"}}
    ]
    assert "env" not in out["spec"]["containers"][0]


def test_queue_label_from_namespace_binding_only_when_absent() -> None:
    mutator = PodMutator(_cluster())
    assert mutator.mutate(pod(), "team-nlp")["metadata"]["labels"] == {"kai.scheduler/queue": "nlp"}
    kept = mutator.mutate(pod(labels={"kai.scheduler/queue": "vision"}), "team-nlp")
    assert kept["metadata"]["labels"]["kai.scheduler/queue"] == "vision"
    legacy = mutator.mutate(pod(labels={"project": "x"}), "team-nlp")
    assert "kai.scheduler/queue" not in legacy["metadata"]["labels"]
    unbound = mutator.mutate(pod(namespace="elsewhere"), "elsewhere")
    assert unbound["metadata"]["labels"] == {}


def test_runtime_class_only_for_gpu_pods_and_only_when_configured() -> None:
    mutator = PodMutator(_cluster(), gpu_runtime_class="nvidia")
    assert mutator.mutate(pod(gpus=1), "team-nlp")["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in mutator.mutate(pod(), "team-nlp")["spec"]
    own = pod(gpus=1)
    own["spec"]["runtimeClassName"] = "custom"
    assert mutator.mutate(own, "team-nlp")["spec"]["runtimeClassName"] == "custom"
    assert "runtimeClassName" not in PodMutator(_cluster()).mutate(pod(gpus=1), "x")["spec"]


def test_pods_of_other_schedulers_are_left_alone() -> None:
    other = pod(annotations={"gpu-fraction": "7"}, scheduler="default-scheduler")
    assert PodMutator(_cluster())(request(other)).patch is None
    assert PodValidator(_cluster())(request(other)).allowed


def test_configmap_prefix_leaves_room_for_kai_suffixes() -> None:
    long = pod(name="x" * 200)
    prefix = configmap_prefix(long, "i12")
    assert len(f"{prefix}-i12-evar") <= 63 and len(f"{prefix}-i12-vol") <= 63


def test_validation_names_the_gpu_contradiction() -> None:
    verdict = PodValidator(_cluster())(request(pod(annotations={"gpu-fraction": "0.5"}, gpus=1)))
    assert not verdict.allowed
    assert "pod team-nlp/p" in verdict.message and "gpu-fraction" in verdict.message


def test_validation_of_the_queue_label() -> None:
    validator = PodValidator(_cluster())
    assert validator(request(pod(labels={"kai.scheduler/queue": "nlp"}))).allowed
    missing = validator(request(pod(labels={"kai.scheduler/queue": "nope"})))
    assert "queue 'nope' does not exist" in missing.message
    parent = validator(request(pod(labels={"kai.scheduler/queue": "research"})))
    assert "is not a leaf" in parent.message
    elsewhere = validator(request(pod(namespace="ci", labels={"kai.scheduler/queue": "nlp"})))
    assert "only from the namespaces team-nlp" in elsewhere.message
    # a leaf without namespaces takes pods from anywhere
    assert validator(
        request(pod(namespace="x", labels={"kai.scheduler/queue": "default-queue"}))
    ).allowed


def test_a_queue_the_cache_does_not_know_yet_is_read_fresh_before_refusing() -> None:
    cluster = _cluster()
    cluster.cache_lags = True
    assert PodValidator(cluster)(request(pod(labels={"kai.scheduler/queue": "nlp"}))).allowed
    assert cluster.fresh_reads == 1


def test_the_cache_only_verdict_never_refuses_for_a_queue_and_never_reads_live() -> None:
    cluster = _cluster()
    validator = PodValidator(cluster)
    # what the caches decide alone, the inline path answers
    assert validator.from_cache(request(pod(labels={"kai.scheduler/queue": "nlp"}))) is not None
    gpu = validator.from_cache(request(pod(annotations={"gpu-fraction": "0.5"}, gpus=1)))
    assert gpu is not None and not gpu.allowed
    # a refusal for the queue needs the live read: left to the full validator
    cluster.cache_lags = True
    assert validator.from_cache(request(pod(labels={"kai.scheduler/queue": "nlp"}))) is None
    assert validator.from_cache(request(pod(labels={"kai.scheduler/queue": "nope"}))) is None
    assert cluster.fresh_reads == 0
    assert not validator(request(pod(labels={"kai.scheduler/queue": "nope"}))).allowed
    assert cluster.fresh_reads == 1


def test_the_binder_writes_the_configmaps_the_mutated_pod_reads() -> None:
    # the webhook names the ConfigMaps in the pod's env; the binder writes them at bind time:
    # both must agree for regular and init containers, or the container never starts
    from kai.reconcilers.binder import shared_container_index

    def referenced(out: dict[str, object]) -> set[str]:
        names = set()
        spec = out["spec"]
        assert isinstance(spec, dict)
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                names |= {e["configMapRef"]["name"] for e in c.get("envFrom") or []}
        return names

    cases = [
        ({"gpu-fraction": "0.5"}, None, "0"),
        ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, None, "1"),
        ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "warmup"}, "warmup", "i0"),
    ]
    for wanted, init_name, index in cases:
        p = pod(annotations=wanted, init=[{"name": init_name}] if init_name else None)
        p["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
        out = PodMutator(_cluster()).mutate(p, "team-nlp")
        prefix = out["metadata"]["annotations"]["runai/shared-gpu-configmap"]
        assert shared_container_index(out) == index
        assert referenced(out) == {f"{prefix}-{index}-evar"}, wanted


def test_the_mutation_patch_equals_the_diff_of_the_whole_pod() -> None:
    """PodMutator patches only where it writes (pods._patch): the same operations, in the same
    order, as json_patch of the whole pod, for pods of every shape the mutation handles."""
    from fakes import POD_SHAPES

    from kai.webhooks.pods import _patch

    shapes = [copy.deepcopy(p) for p in POD_SHAPES.values()]
    shapes.append({"apiVersion": "v1", "kind": "Pod", "spec": {"schedulerName": "kai-scheduler"}})
    no_md = pod(annotations={"gpu-fraction": "0.5"})
    no_md["metadata"] = {"name": "x", "namespace": "team-nlp"}  # no labels, no annotations key
    shapes.append(no_md)
    envs = pod(annotations={"gpu-fraction": "0.5"}, labels={"kai.scheduler/queue": "nlp"})
    envs["spec"]["containers"].insert(0, {"name": "side", "image": "x"})
    envs["metadata"]["annotations"]["gpu-fraction-container-name"] = "main"
    envs["spec"]["containers"][1]["env"] = [{"name": "GPU_PORTION", "value": "stale"}]
    envs["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    shapes.append(envs)
    init = pod(annotations={"gpu-memory": "1000", "gpu-fraction-container-name": "i"})
    init["spec"]["initContainers"] = [{"name": "i", "image": "x"}]
    shapes.append(init)
    for runtime_class in ("", "nvidia"):
        mutator = PodMutator(_cluster(), gpu_runtime_class=runtime_class)
        for shape in shapes:
            after = mutator.mutate(shape, "team-nlp")
            assert _patch(shape, after) == json_patch(shape, after), shape
            assert apply_patch(copy.deepcopy(shape), _patch(shape, after)) == after


def test_remembered_gpu_requests_are_the_parsers() -> None:
    """pods._gpu_request remembers a parse per pod shape: the same result as the parser for
    every shape, a refusal every time (never remembered), a changed shape parsed anew."""
    from fakes import POD_SHAPES

    from kai.api.gpu_request import GpuRequestError, gpu_request_from_pod
    from kai.webhooks.pods import _PARSED, _gpu_request

    _PARSED.clear()
    for _round in range(2):
        for name, shape in POD_SHAPES.items():
            try:
                expected = gpu_request_from_pod(shape)
            except GpuRequestError as exc:
                try:
                    _gpu_request(shape)
                except GpuRequestError as again:
                    assert str(again) == str(exc), name
                    continue
                raise AssertionError(f"{name}: refused by the parser, not when remembered") from exc
            assert _gpu_request(shape) == expected, name
    assert _PARSED  # shapes were remembered
    frac = pod(annotations={"gpu-fraction": "0.5"})
    assert _gpu_request(frac).request.fraction == 0.5
    frac["metadata"]["annotations"]["gpu-fraction"] = "0.25"
    assert _gpu_request(frac).request.fraction == 0.25
    frac["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    with pytest.raises(GpuRequestError):  # a fraction and a whole GPU: contradiction
        _gpu_request(frac)
    other = pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "side"})
    other["spec"]["containers"].append({"name": "side", "image": "x"})
    assert _gpu_request(other).container == "side"
    other["spec"]["containers"][1]["name"] = "renamed"
    with pytest.raises(GpuRequestError):  # the named container is gone
        _gpu_request(other)
