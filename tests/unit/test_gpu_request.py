"""Every rule of kai.api.gpu_request, one test (or one parametrised case) per rule."""

from __future__ import annotations

import pytest

from kai.api.gpu_request import (
    ContainerResources,
    GpuRequest,
    GpuRequestError,
    gpu_request_from_pod,
    mig_profile_gpus,
    parse_gpu_request,
    queue_gpus,
)

MAIN = ContainerResources("main")


def gpus(n: object, name: str = "main", **kw: object) -> ContainerResources:
    return ContainerResources(name, limits={"nvidia.com/gpu": n}, **kw)  # type: ignore[arg-type]


def parse(annotations: dict[str, str], *containers: ContainerResources) -> GpuRequest:
    return parse_gpu_request("ns/p", annotations, containers or (MAIN,)).request


def refused(annotations: dict[str, str], *containers: ContainerResources) -> GpuRequestError:
    with pytest.raises(GpuRequestError) as info:
        parse_gpu_request("ns/p", annotations, containers or (MAIN,))
    assert str(info.value).startswith("pod ns/p: ")
    return info.value


# --- no GPU, whole GPUs -----------------------------------------------------------------------


def test_no_gpu_request_is_the_empty_request() -> None:
    assert parse({}) == GpuRequest()
    assert parse_gpu_request("p", {}).request == GpuRequest()


def test_whole_gpus_sum_over_regular_containers() -> None:
    assert parse({}, gpus(2, "a"), gpus("1", "b")) == GpuRequest(whole=3)


def test_whole_gpu_request_without_limit_is_taken() -> None:
    c = ContainerResources("main", requests={"nvidia.com/gpu": "2"})
    assert parse({}, c) == GpuRequest(whole=2)


def test_init_container_gpus_are_maxed_against_running_containers() -> None:
    init = gpus(4, "init", init=True)
    assert parse({}, init, gpus(1, "a"), gpus(1, "b")) == GpuRequest(whole=4)
    sidecar = gpus(1, "side", init=True, sidecar=True)
    assert parse({}, sidecar, gpus(1, "a")) == GpuRequest(whole=2)


def test_whole_gpu_request_must_equal_limit() -> None:
    c = ContainerResources("main", requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": 2})
    err = refused({}, c)
    assert "differs from limit" in str(err)
    assert err.field == "containers[main].resources[nvidia.com/gpu]"


@pytest.mark.parametrize("value", ["0.5", "500m", 0.5])
def test_fractional_whole_gpu_resource_is_refused_with_a_hint(value: object) -> None:
    err = refused({}, gpus(value))
    assert "whole number" in str(err)
    assert "gpu-fraction" in str(err)


def test_bad_gpu_quantity_is_refused() -> None:
    err = refused({}, gpus("two"))
    assert err.field == "containers[main].resources.limits[nvidia.com/gpu]"
    assert "not a Kubernetes quantity" in str(err)


def test_negative_gpu_count_is_refused() -> None:
    assert "must be >= 0" in str(refused({}, gpus("-1")))


# --- gpu-fraction -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"), [("0.5", 0.5), ("250m", 0.25), (".1", 0.1), ("1e-1", 0.1)]
)
def test_fraction_parses_as_a_quantity(raw: str, value: float) -> None:
    assert parse({"gpu-fraction": raw}) == GpuRequest(fraction=value)


@pytest.mark.parametrize("raw", ["1", "1.0", "1000m", "1.5", "2"])
def test_fraction_of_one_or_more_is_refused_everywhere(raw: str) -> None:
    err = refused({"gpu-fraction": raw})
    assert err.field == "annotation gpu-fraction"
    assert "must be > 0 and < 1" in str(err)
    assert "nvidia.com/gpu: 1" in str(err)


@pytest.mark.parametrize("raw", ["0", "-0.5", "0.0"])
def test_fraction_of_zero_or_less_is_refused(raw: str) -> None:
    assert "must be > 0 and < 1" in str(refused({"gpu-fraction": raw}))


@pytest.mark.parametrize("raw", ["NaN", "nan", "inf", "Infinity", "half", "", " 0.5", "0.5 "])
def test_fraction_that_is_not_a_quantity_is_refused(raw: str) -> None:
    err = refused({"gpu-fraction": raw})
    assert "not a Kubernetes quantity" in str(err)


def test_fraction_with_whole_gpu_limit_is_contradictory() -> None:
    err = refused({"gpu-fraction": "0.5"}, gpus(1))
    assert err.field == "annotation gpu-fraction"
    assert "whole-GPU request" in str(err)


def test_fraction_with_zero_whole_gpus_is_fine() -> None:
    assert parse({"gpu-fraction": "0.5"}, gpus(0)) == GpuRequest(fraction=0.5)


# --- gpu-memory -------------------------------------------------------------------------------


def test_gpu_memory_is_mib_per_device() -> None:
    assert parse({"gpu-memory": "2000"}) == GpuRequest(memory_mib=2000.0)


@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "2Gi", "abc", " 20", "020"])
def test_gpu_memory_must_be_a_positive_integer(raw: str) -> None:
    err = refused({"gpu-memory": raw})
    assert err.field == "annotation gpu-memory"
    assert "positive integer" in str(err)


def test_gpu_memory_with_fraction_is_contradictory() -> None:
    err = refused({"gpu-memory": "100", "gpu-fraction": "0.5"})
    assert "cannot be combined with gpu-fraction" in str(err)


def test_gpu_memory_with_whole_gpu_is_contradictory() -> None:
    err = refused({"gpu-memory": "100"}, gpus(2))
    assert err.field == "annotation gpu-memory"
    assert "nvidia.com/gpu: 2" in str(err)


# --- gpu-fraction-num-devices ---------------------------------------------------------------


def test_num_devices_multiplies_a_fraction() -> None:
    got = parse({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"})
    assert got == GpuRequest(fraction=0.5, num_devices=3)


def test_num_devices_multiplies_gpu_memory() -> None:
    got = parse({"gpu-memory": "40", "gpu-fraction-num-devices": "2"})
    assert got == GpuRequest(memory_mib=40.0, num_devices=2)


def test_num_devices_without_shared_request_is_refused() -> None:
    err = refused({"gpu-fraction-num-devices": "2"})
    assert err.field == "annotation gpu-fraction-num-devices"
    assert "needs gpu-fraction or gpu-memory" in str(err)


@pytest.mark.parametrize("raw", ["0", "-1", "1.5", "two"])
def test_num_devices_must_be_a_positive_integer(raw: str) -> None:
    err = refused({"gpu-fraction": "0.5", "gpu-fraction-num-devices": raw})
    assert "positive integer" in str(err)


# --- gpu-fraction-container-name ------------------------------------------------------------


def test_shared_gpu_goes_to_the_first_regular_container_by_default() -> None:
    init = ContainerResources("setup", init=True)
    got = parse_gpu_request("p", {"gpu-fraction": "0.5"}, (init, MAIN, ContainerResources("b")))
    assert got.container == "main"
    assert got.is_fractional


def test_container_name_selects_a_container_or_init_container() -> None:
    init = ContainerResources("setup", init=True)
    annotations = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "setup"}
    assert parse_gpu_request("p", annotations, (init, MAIN)).container == "setup"


def test_container_name_must_name_a_container() -> None:
    err = refused({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"})
    assert "names no container" in str(err)
    assert "main" in str(err)


def test_container_name_without_shared_request_is_refused() -> None:
    err = refused({"gpu-fraction-container-name": "main"})
    assert err.field == "annotation gpu-fraction-container-name"


def test_whole_gpu_requests_have_no_container() -> None:
    assert parse_gpu_request("p", {}, (gpus(1),)).container is None


# --- mps --------------------------------------------------------------------------------------


def test_mps_true_with_a_fraction() -> None:
    got = parse_gpu_request("p", {"gpu-memory": "10", "mps": "true"}, (MAIN,))
    assert got.mps


def test_mps_false_is_accepted_anywhere() -> None:
    assert not parse_gpu_request("p", {"mps": "false"}, (MAIN,)).mps


def test_mps_without_fractional_request_is_refused() -> None:
    err = refused({"mps": "true"}, gpus(1))
    assert err.field == "annotation mps"
    assert "needs a shared-GPU request" in str(err)


def test_mps_must_be_a_boolean() -> None:
    assert 'must be "true" or "false"' in str(refused({"gpu-fraction": "0.5", "mps": "yes"}))


# --- MIG --------------------------------------------------------------------------------------


def test_mig_resources_become_a_mig_request() -> None:
    c = ContainerResources(
        "main", limits={"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": "1"}
    )
    assert parse({}, c) == GpuRequest(
        mig=(("nvidia.com/mig-1g.10gb", 2), ("nvidia.com/mig-3g.40gb", 1))
    )


def test_mig_resources_add_up_over_containers() -> None:
    a = ContainerResources("a", limits={"nvidia.com/mig-2g.20gb": 1})
    b = ContainerResources("b", limits={"nvidia.com/mig-2g.20gb": 1})
    assert parse({}, a, b) == GpuRequest(mig=(("nvidia.com/mig-2g.20gb", 2),))


def test_legacy_mig_annotation_is_refused() -> None:
    err = refused({"nvidia.com/mig-1g.10gb": "1"})
    assert err.field == "annotation nvidia.com/mig-1g.10gb"
    assert "legacy MIG" in str(err)


def test_unknown_mig_resource_name_is_refused() -> None:
    c = ContainerResources("main", limits={"nvidia.com/mig-big": 1})
    assert "not a MIG profile" in str(refused({}, c))


@pytest.mark.parametrize(
    ("annotations", "other"),
    [
        ({}, "nvidia.com/gpu"),
        ({"gpu-fraction": "0.5"}, "gpu-fraction"),
        ({"gpu-memory": "5"}, "gpu-memory"),
    ],
)
def test_mig_with_another_gpu_form_is_contradictory(
    annotations: dict[str, str], other: str
) -> None:
    limits: dict[str, object] = {"nvidia.com/mig-1g.10gb": 1}
    if not annotations:
        limits["nvidia.com/gpu"] = 1
    err = refused(annotations, ContainerResources("main", limits=limits))
    assert other in str(err)


def test_mig_profile_gpus_counts_slices() -> None:
    assert mig_profile_gpus("nvidia.com/mig-3g.20gb") == 3
    with pytest.raises(ValueError, match="not a MIG profile"):
        mig_profile_gpus("nvidia.com/gpu")


# --- queue accounting ---------------------------------------------------------------------------


def test_queue_gpus_per_form() -> None:
    assert queue_gpus(GpuRequest(whole=2), 100) == 2
    assert queue_gpus(GpuRequest(fraction=0.25, num_devices=2), 100) == 0.5
    assert queue_gpus(GpuRequest(memory_mib=40, num_devices=2), 100) == 0.8
    assert queue_gpus(GpuRequest(memory_mib=40), None) == 0
    assert queue_gpus(GpuRequest(mig=(("nvidia.com/mig-3g.20gb", 2),)), 100) == 6


def test_queue_gpus_on_a_node_rounds_memory_shares_up_to_a_hundredth() -> None:
    assert queue_gpus(GpuRequest(memory_mib=1000), 81900, on_node=True) == 0.02
    assert queue_gpus(GpuRequest(memory_mib=33), 100, on_node=True) == 0.33
    assert queue_gpus(GpuRequest(memory_mib=1000, num_devices=2), 81900, on_node=True) == 0.04
    assert queue_gpus(GpuRequest(memory_mib=1000), 81900) < 0.02


# --- raw manifests ------------------------------------------------------------------------------


def test_from_pod_manifest() -> None:
    pod = {
        "metadata": {"name": "w", "namespace": "team", "annotations": {"gpu-fraction": "0.5"}},
        "spec": {
            "initContainers": [{"name": "side", "restartPolicy": "Always"}],
            "containers": [{"name": "train", "resources": {"limits": {"cpu": "1"}}}],
        },
    }
    got = gpu_request_from_pod(pod)
    assert got.request == GpuRequest(fraction=0.5)
    assert got.container == "train"


def test_from_pod_manifest_error_names_namespace_and_pod() -> None:
    pod = {"metadata": {"name": "w", "namespace": "team", "annotations": {"gpu-fraction": "1"}}}
    with pytest.raises(GpuRequestError, match=r"^pod team/w: annotation gpu-fraction: "):
        gpu_request_from_pod(pod)


def test_from_pod_manifest_tolerates_missing_sections() -> None:
    assert gpu_request_from_pod({}).request == GpuRequest()
