"""The one parser of a pod's GPU request.

A pod asks for GPUs in exactly one of these forms:

- whole devices: container resource ``nvidia.com/gpu: N``;
- a fraction of a device: annotation ``gpu-fraction: "0.5"`` (optionally on
  ``gpu-fraction-num-devices`` devices);
- memory on a device: annotation ``gpu-memory: "2000"`` (MiB; optionally on several devices);
- MIG instances: container resources ``nvidia.com/mig-<N>g.<M>gb: K``.

The scheduler core, the admission webhook and the binder all call :func:`parse_gpu_request` (or
:func:`gpu_request_from_pod` on a raw pod manifest), so they can never disagree about what a pod
asked for. KAI's own scheduler accepts ``gpu-fraction: "1"`` while its webhook and binder refuse
it; here one rule holds everywhere: a fraction is strictly between 0 and 1 (a whole device is
asked for with ``nvidia.com/gpu: 1``). See docs/design/gpu-sharing.md.

Pure module: plain mappings in, a frozen :class:`GpuRequest` out, or a
:class:`GpuRequestError` whose message names the pod and the offending annotation or resource.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kai.api.quantity import QuantityError, parse_quantity

__all__ = [
    "GPU_FRACTION",
    "GPU_FRACTION_CONTAINER_NAME",
    "GPU_FRACTION_NUM_DEVICES",
    "GPU_MEMORY",
    "GPU_RESOURCE",
    "MPS",
    "ContainerResources",
    "GpuRequest",
    "GpuRequestError",
    "ParsedGpuRequest",
    "gpu_request_from_pod",
    "mig_profile_gpus",
    "parse_gpu_request",
    "queue_gpus",
]


@dataclass(frozen=True)
class GpuRequest:
    """What one task asks of GPUs. At most one of the forms is non-zero.

    - ``whole``: N exclusive devices.
    - ``fraction``: a portion (0 < f <= 1) of each of ``num_devices`` shared devices.
    - ``memory_mib``: MiB on each of ``num_devices`` shared devices.
    - ``mig``: MIG profile resource name (``nvidia.com/mig-1g.10gb``) -> instance count.
    """

    whole: int = 0
    fraction: float | None = None
    memory_mib: float | None = None
    num_devices: int = 1
    mig: tuple[tuple[str, int], ...] = ()

    @property
    def is_shared(self) -> bool:
        return self.fraction is not None or self.memory_mib is not None

    @property
    def is_mig(self) -> bool:
        return bool(self.mig)


GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
GPU_FRACTION_NUM_DEVICES = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER_NAME = "gpu-fraction-container-name"
MPS = "mps"
GPU_RESOURCE = "nvidia.com/gpu"
#: resources (and refused legacy annotations) with this prefix are MIG profiles
MIG_PREFIX = "nvidia.com/mig-"
#: the annotations :func:`gpu_request_from_pod` reads by name (besides refusing any with
#: ``MIG_PREFIX``): no other annotation can change its answer
PARSED_ANNOTATIONS = (
    GPU_FRACTION,
    GPU_MEMORY,
    GPU_FRACTION_NUM_DEVICES,
    GPU_FRACTION_CONTAINER_NAME,
    MPS,
)
_MIG_PROFILE = re.compile(r"nvidia\.com/mig-(?P<slices>[1-9][0-9]*)g\.(?P<mem>[1-9][0-9]*)gb")
_POSITIVE_INT = re.compile(r"[1-9][0-9]*")


class GpuRequestError(ValueError):
    """A pod's GPU request is malformed or contradictory. ``field`` names the annotation or
    resource at fault; the message names the pod and says what to do."""

    def __init__(self, pod: str, field: str, message: str) -> None:
        super().__init__(f"pod {pod}: {field}: {message}")
        self.pod = pod
        self.field = field


@dataclass(frozen=True)
class ContainerResources:
    """One container's resource requests and limits, values as quantities (strings or numbers)."""

    name: str
    requests: Mapping[str, object] = field(default_factory=dict)
    limits: Mapping[str, object] = field(default_factory=dict)
    init: bool = False  # an ordinary init container (runs before, not beside, the others)
    sidecar: bool = False  # a native sidecar (init container with restartPolicy Always)


@dataclass(frozen=True)
class ParsedGpuRequest:
    """The parse result: the request the core schedules with, plus what the binder needs."""

    request: GpuRequest
    container: str | None = None  # container receiving the shared GPU (shared requests only)
    mps: bool = False

    @property
    def is_fractional(self) -> bool:
        return self.request.is_shared


def mig_profile_gpus(profile: str) -> int:
    """GPUs of quota one instance of a MIG profile counts (``nvidia.com/mig-3g.20gb`` -> 3)."""
    match = _MIG_PROFILE.fullmatch(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile resource (nvidia.com/mig-<N>g.<M>gb)")
    return int(match["slices"])


def queue_gpus(
    request: GpuRequest, device_memory_mib: float | None, *, on_node: bool = False
) -> float:
    """GPUs a request counts in queue accounting.

    A fraction counts ``fraction × devices``, a MIG instance its slice count, a gpu-memory request
    ``devices × memory / device_memory_mib`` where ``device_memory_mib`` is the memory of the
    device it sits on (or, for a pending task, the smallest device memory of the shard). Without
    any GPU node (``None`` or 0) a gpu-memory request counts 0. ``on_node``: the memory is that of
    the device the task sits on, and the share is rounded up to a hundredth, as KAI does there.
    """
    if request.fraction is not None:
        return request.fraction * request.num_devices
    if request.memory_mib is not None:
        if not device_memory_mib:
            return 0.0
        share = request.memory_mib / device_memory_mib
        if on_node:
            share = math.ceil(round(share * 100, 9)) / 100
        return request.num_devices * share
    if request.mig:
        return float(sum(mig_profile_gpus(name) * count for name, count in request.mig))
    return float(request.whole)


_QUANTITIES: dict[str, Fraction] = {}


def _quantity(raw: object) -> Fraction:
    """``parse_quantity``, remembered per string: pods repeat a handful of values ("1",
    "0.5") and the scheduler parses every new or relabelled pod, so the exact parse (regular
    expression + Fraction) was most of a pod's parse. A Fraction is immutable; errors are not
    remembered and are raised again each time."""
    if type(raw) is not str:
        return parse_quantity(raw)
    value = _QUANTITIES.get(raw)
    if value is None:
        value = parse_quantity(raw)
        if len(_QUANTITIES) < 4096:
            _QUANTITIES[raw] = value
    return value


def _resource_value(
    pod: str, container: ContainerResources, resource: str, *, integer: bool
) -> int | Fraction:
    """The amount of one extended resource a container asks for: its limit (Kubernetes requires
    extended resources in limits; a request alone is taken as the limit). A request that differs
    from the limit is refused, as the API server does."""
    where = f"containers[{container.name}].resources"
    raw_limit = container.limits.get(resource)
    raw_request = container.requests.get(resource)
    values: dict[str, Fraction] = {}
    for kind, raw in (("limits", raw_limit), ("requests", raw_request)):
        if raw is None:
            continue
        try:
            values[kind] = _quantity(raw)
        except QuantityError as exc:
            raise GpuRequestError(pod, f"{where}.{kind}[{resource}]", str(exc)) from None
    if "limits" in values and "requests" in values and values["limits"] != values["requests"]:
        raise GpuRequestError(
            pod,
            f"{where}[{resource}]",
            f"request {raw_request} differs from limit {raw_limit}; an extended resource must "
            "have equal request and limit",
        )
    value = values.get("limits", values.get("requests", Fraction(0)))
    if value < 0:
        raise GpuRequestError(pod, f"{where}[{resource}]", f"must be >= 0, got {value}")
    if integer and value.denominator != 1:
        hint = (
            f"; to share a device use the {GPU_FRACTION} or {GPU_MEMORY} annotation instead"
            if resource == GPU_RESOURCE
            else ""
        )
        raise GpuRequestError(
            pod, f"{where}[{resource}]", f"must be a whole number, got {float(value):g}{hint}"
        )
    return int(value) if integer else value


def _effective(amounts: Iterable[tuple[ContainerResources, int]]) -> int:
    """kubelet's effective pod request: regular containers and native sidecars add up; an
    ordinary init container runs alone, so the pod needs the larger of the two."""
    running = 0
    init_peak = 0
    for container, amount in amounts:
        if container.init and not container.sidecar:
            init_peak = max(init_peak, amount)
        else:
            running += amount
    return max(running, init_peak)


def _positive_int(pod: str, key: str, raw: str, what: str) -> int:
    if _POSITIVE_INT.fullmatch(raw) is None:
        raise GpuRequestError(
            pod, f"annotation {key}", f"must be a positive integer {what}, got {raw!r}"
        )
    return int(raw)


def _parse_fraction(pod: str, raw: str) -> float:
    key = f"annotation {GPU_FRACTION}"
    try:
        value = _quantity(raw)
    except QuantityError as exc:
        # parse_quantity's grammar has no NaN or Inf, so "NaN" and "inf" end up here too.
        raise GpuRequestError(pod, key, f'{exc}; expected a number such as "0.5"') from None
    if not 0 < value < 1:
        hint = f" (for a whole device request {GPU_RESOURCE}: 1 instead)" if value >= 1 else ""
        raise GpuRequestError(pod, key, f"must be > 0 and < 1, got {raw!r}{hint}")
    return float(value)


def parse_gpu_request(
    pod: str,
    annotations: Mapping[str, str],
    containers: Sequence[ContainerResources] = (),
) -> ParsedGpuRequest:
    """Read a pod's GPU request from its annotations and container resources.

    ``pod`` is only used in messages (``namespace/name`` reads best). Raises
    :class:`GpuRequestError` on the first rule a pod breaks.
    """
    _reject_legacy_mig(pod, annotations)
    raw_fraction = annotations.get(GPU_FRACTION)
    raw_memory = annotations.get(GPU_MEMORY)
    whole = _effective(
        (c, int(_resource_value(pod, c, GPU_RESOURCE, integer=True))) for c in containers
    )
    mig = _mig_requests(pod, containers)
    fraction = _parse_fraction(pod, raw_fraction) if raw_fraction is not None else None
    memory = (
        _positive_int(pod, GPU_MEMORY, raw_memory, "of MiB") if raw_memory is not None else None
    )
    _check_one_form(pod, whole, fraction, memory, mig)
    shared = fraction is not None or memory is not None
    num_devices = _num_devices(pod, annotations.get(GPU_FRACTION_NUM_DEVICES), shared)
    container = _gpu_container(
        pod, annotations.get(GPU_FRACTION_CONTAINER_NAME), shared, containers
    )
    mps = _mps(pod, annotations.get(MPS), shared)
    request = GpuRequest(
        whole=whole,
        fraction=fraction,
        memory_mib=float(memory) if memory is not None else None,
        num_devices=num_devices,
        mig=tuple(mig),
    )
    return ParsedGpuRequest(request=request, container=container, mps=mps)


def _reject_legacy_mig(pod: str, annotations: Mapping[str, str]) -> None:
    for key in sorted(annotations):
        if key.startswith(MIG_PREFIX):
            raise GpuRequestError(
                pod,
                f"annotation {key}",
                "MIG requested through an annotation (legacy MIG) is not supported; request the "
                f"MIG profile as a container resource instead (resources.limits[{key}])",
            )


def _mig_requests(pod: str, containers: Sequence[ContainerResources]) -> list[tuple[str, int]]:
    """(profile resource, count) for each MIG profile the containers ask for."""
    mig_names = sorted(
        {
            name
            for c in containers
            for name in (*c.limits, *c.requests)
            if name.startswith(MIG_PREFIX)
        }
    )
    mig: list[tuple[str, int]] = []
    for name in mig_names:
        if _MIG_PROFILE.fullmatch(name) is None:
            raise GpuRequestError(
                pod,
                f"resources[{name}]",
                "not a MIG profile resource; expected nvidia.com/mig-<N>g.<M>gb, "
                "e.g. nvidia.com/mig-1g.10gb",
            )
        count = _effective(
            (c, int(_resource_value(pod, c, name, integer=True))) for c in containers
        )
        if count > 0:
            mig.append((name, count))
    return mig


def _check_one_form(
    pod: str,
    whole: int,
    fraction: float | None,
    memory: int | None,
    mig: list[tuple[str, int]],
) -> None:
    """A pod asks for GPUs in one form: whole devices, a share (fraction or memory), or MIG."""
    if fraction is not None and memory is not None:
        raise GpuRequestError(
            pod,
            f"annotation {GPU_MEMORY}",
            f"cannot be combined with {GPU_FRACTION}; ask for a share of a device in one form only",
        )
    shared = fraction is not None or memory is not None
    if shared and whole > 0:
        form = GPU_FRACTION if fraction is not None else GPU_MEMORY
        raise GpuRequestError(
            pod,
            f"annotation {form}",
            f"cannot be combined with a whole-GPU request ({GPU_RESOURCE}: {whole}); drop one",
        )
    if mig and (shared or whole > 0):
        other = (
            GPU_RESOURCE if whole > 0 else (GPU_FRACTION if fraction is not None else GPU_MEMORY)
        )
        raise GpuRequestError(
            pod,
            f"resources[{mig[0][0]}]",
            f"a MIG request cannot be combined with {other}; ask for GPUs in one form only",
        )


def _num_devices(pod: str, raw: str | None, shared: bool) -> int:
    if raw is None:
        return 1
    if not shared:
        raise GpuRequestError(
            pod,
            f"annotation {GPU_FRACTION_NUM_DEVICES}",
            f"needs {GPU_FRACTION} or {GPU_MEMORY}: it says on how many devices that share "
            "is taken",
        )
    return _positive_int(pod, GPU_FRACTION_NUM_DEVICES, raw, "of devices")


def _gpu_container(
    pod: str, raw: str | None, shared: bool, containers: Sequence[ContainerResources]
) -> str | None:
    """The container a shared GPU is given to: the named one, else the first regular one."""
    if raw is None:
        if shared and containers:
            regular = [c.name for c in containers if not c.init]
            return regular[0] if regular else containers[0].name
        return None
    if not shared:
        raise GpuRequestError(
            pod,
            f"annotation {GPU_FRACTION_CONTAINER_NAME}",
            f"only applies to a shared-GPU request ({GPU_FRACTION} or {GPU_MEMORY})",
        )
    names = [c.name for c in containers]
    if containers and raw not in names:
        raise GpuRequestError(
            pod,
            f"annotation {GPU_FRACTION_CONTAINER_NAME}",
            f"names no container of the pod ({raw!r}; containers: {', '.join(names)})",
        )
    return raw


def _mps(pod: str, raw: str | None, shared: bool) -> bool:
    if raw is None:
        return False
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise GpuRequestError(pod, f"annotation {MPS}", f'must be "true" or "false", got {raw!r}')
    mps = lowered == "true"
    if mps and not shared:
        raise GpuRequestError(
            pod,
            f"annotation {MPS}",
            f'"true" needs a shared-GPU request ({GPU_FRACTION} or {GPU_MEMORY})',
        )
    return mps


def _containers_of(pod_spec: Mapping[str, object]) -> list[ContainerResources]:
    out: list[ContainerResources] = []
    for key, init in (("initContainers", True), ("containers", False)):
        raw = pod_spec.get(key) or []
        if not isinstance(raw, list):
            continue
        for index, item in enumerate(raw):
            if not isinstance(item, Mapping):
                continue
            resources = item.get("resources") or {}
            if not isinstance(resources, Mapping):
                resources = {}
            requests = resources.get("requests") or {}
            limits = resources.get("limits") or {}
            out.append(
                ContainerResources(
                    name=str(item.get("name") or f"{key}[{index}]"),
                    requests=requests if isinstance(requests, Mapping) else {},
                    limits=limits if isinstance(limits, Mapping) else {},
                    init=init,
                    sidecar=init and item.get("restartPolicy") == "Always",
                )
            )
    return out


def gpu_request_from_pod(pod: Mapping[str, object]) -> ParsedGpuRequest:
    """:func:`parse_gpu_request` on a raw pod manifest (a dict as the API server serves it)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(metadata, Mapping):
        metadata = {}
    if not isinstance(spec, Mapping):
        spec = {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name") or "<unnamed>")
    label = f"{namespace}/{name}" if namespace else name
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        annotations = {}
    return parse_gpu_request(
        label, {str(k): str(v) for k, v in annotations.items()}, _containers_of(spec)
    )
