"""The parts of Kubernetes Dynamic Resource Allocation (``resource.k8s.io/v1``) a BindRequest
carries: an ``AllocationResult`` and the device requests of extended-resource claims.

Only the shape is checked here; the API server owns the meaning.
"""

from __future__ import annotations

from typing import Any

from kai.api.base import KaiModel
from kai.api.types import ResourceList, Timestamp

__all__ = [
    "AllocationResult",
    "CELDeviceSelector",
    "ContainerExtendedResourceRequest",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceCapacityRequirements",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceToleration",
    "ExactDeviceRequest",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "OpaqueDeviceConfiguration",
]


class DeviceToleration(KaiModel):
    """A toleration of a device taint."""

    key: str | None = None
    """The taint key to tolerate."""
    operator: str | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = None
    """The taint value to match with Equal."""
    effect: str | None = None
    """The taint effect to match; empty matches all."""
    tolerationSeconds: int | None = None
    """How long a NoExecute taint is tolerated."""


class OpaqueDeviceConfiguration(KaiModel):
    """Driver-specific configuration."""

    driver: str
    """The driver the parameters are for."""
    parameters: dict[str, Any]
    """Driver-specific parameters (any JSON object)."""


class DeviceAllocationConfiguration(KaiModel):
    """Configuration applied to allocated devices."""

    source: str
    """FromClass or FromClaim."""
    requests: list[str] | None = None
    """The requests the configuration applies to; all when empty."""
    opaque: OpaqueDeviceConfiguration | None = None
    """Driver-specific configuration."""


class DeviceRequestAllocationResult(KaiModel):
    """One allocated device."""

    request: str
    """The request (or request/subrequest) this device satisfies."""
    driver: str
    """The device's driver."""
    pool: str
    """The resource pool the device belongs to."""
    device: str
    """The device's name within its pool."""
    adminAccess: bool | None = None
    """Whether the device is allocated for admin access."""
    tolerations: list[DeviceToleration] | None = None
    """Taints of the device tolerated by the request."""
    bindingConditions: list[str] | None = None
    """Conditions that must be True before the pod binds."""
    bindingFailureConditions: list[str] | None = None
    """Conditions whose truth means binding failed."""
    shareID: str | None = None
    """Identifies a share of a shared device."""
    consumedCapacity: ResourceList | None = None
    """The capacity consumed on a shared device."""


class NodeSelectorRequirement(KaiModel):
    """A key, operator and values of a node selector."""

    key: str
    """The label or field key."""
    operator: str
    """In, NotIn, Exists, DoesNotExist, Gt or Lt."""
    values: list[str] | None = None
    """The values to compare with."""


class NodeSelectorTerm(KaiModel):
    """Requirements that must all hold."""

    matchExpressions: list[NodeSelectorRequirement] | None = None
    """Requirements on node labels."""
    matchFields: list[NodeSelectorRequirement] | None = None
    """Requirements on node fields."""


class NodeSelector(KaiModel):
    """Terms of which at least one must hold."""

    nodeSelectorTerms: list[NodeSelectorTerm]
    """The terms, ORed."""


class AllocationResult(KaiModel):
    """Where and which devices a claim was allocated (``resource.k8s.io/v1``)."""

    devices: DeviceAllocationResult | None = None
    """The allocated devices and their configuration."""
    nodeSelector: NodeSelector | None = None
    """The nodes on which the allocated devices are available."""
    allocationTimestamp: Timestamp | None = None
    """When the allocation was made."""


class DeviceAllocationResult(KaiModel):
    """The devices of an allocation."""

    results: list[DeviceRequestAllocationResult] | None = None
    """One entry per allocated device."""
    config: list[DeviceAllocationConfiguration] | None = None
    """Configuration for the allocated devices."""


class CELDeviceSelector(KaiModel):
    """A CEL expression a device must satisfy."""

    expression: str
    """The CEL expression."""


class DeviceSelector(KaiModel):
    """A device selector."""

    cel: CELDeviceSelector | None = None
    """A CEL selector."""


class DeviceCapacityRequirements(KaiModel):
    """Capacity requested from a shareable device."""

    requests: ResourceList | None = None
    """Capacity name -> amount."""


class ExactDeviceRequest(KaiModel):
    """A request for devices of one class."""

    deviceClassName: str
    """The DeviceClass of the devices."""
    selectors: list[DeviceSelector] | None = None
    """Further conditions on the devices."""
    allocationMode: str | None = None
    """ExactCount or All."""
    count: int | None = None
    """How many devices with ExactCount."""
    adminAccess: bool | None = None
    """Request admin access."""
    tolerations: list[DeviceToleration] | None = None
    """Device taints tolerated."""
    capacity: DeviceCapacityRequirements | None = None
    """Capacity requested from each device."""


class DeviceSubRequest(KaiModel):
    """One alternative of a firstAvailable request."""

    name: str
    """The sub-request's name."""
    deviceClassName: str
    """The DeviceClass of the devices."""
    selectors: list[DeviceSelector] | None = None
    """Further conditions on the devices."""
    allocationMode: str | None = None
    """ExactCount or All."""
    count: int | None = None
    """How many devices with ExactCount."""
    tolerations: list[DeviceToleration] | None = None
    """Device taints tolerated."""
    capacity: DeviceCapacityRequirements | None = None
    """Capacity requested from each device."""


class DeviceRequest(KaiModel):
    """A named device request of a claim."""

    name: str
    """The request's name."""
    exactly: ExactDeviceRequest | None = None
    """A request for exactly these devices."""
    firstAvailable: list[DeviceSubRequest] | None = None
    """Alternatives, the first that can be satisfied wins."""


class ContainerExtendedResourceRequest(KaiModel):
    """Which container's extended-resource request a device request serves."""

    containerName: str
    """The container's name."""
    requestName: str
    """The device request's name."""
    resourceName: str
    """The extended resource name, e.g. example.com/gpu."""


AllocationResult.model_rebuild()
