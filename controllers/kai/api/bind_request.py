"""KAI's BindRequest (``scheduling.run.ai/v1alpha2``): the scheduler asks the binder to bind."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kai.api.base import KaiModel, PrinterColumn, TopLevelObject
from kai.api.dra import AllocationResult, ContainerExtendedResourceRequest, DeviceRequest
from kai.api.types import ResourceList

__all__ = [
    "BindRequest",
    "BindRequestSpec",
    "BindRequestStatus",
    "ExtendedResourceClaimAllocation",
    "NUMAZone",
    "ReceivedGPU",
    "ResourceClaimAllocation",
]


class ReceivedGPU(KaiModel):
    """The GPUs the pod receives."""

    count: int | None = None
    """How many GPU devices."""
    portion: Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?$")] | None = None
    """The portion of each device, as a decimal string such as "0.50"."""


class ResourceClaimAllocation(KaiModel):
    """The scheduler's allocation of one of the pod's resource claims."""

    name: str | None = None
    """The pod's claim name (pod.spec.resourceClaims[].name)."""
    allocation: AllocationResult | None = None
    """The allocation to write into the claim's status."""


class ExtendedResourceClaimAllocation(KaiModel):
    """The allocation of the synthetic claim for extended resources backed by DRA."""

    allocation: AllocationResult | None = None
    """The allocation of the synthetic claim."""
    deviceRequests: list[DeviceRequest] | None = None
    """The device requests of the synthetic claim."""
    containerMappings: list[ContainerExtendedResourceRequest] | None = None
    """Which container each device request serves."""


class NUMAZone(KaiModel):
    """Resources predicted on one NUMA zone."""

    zone: str
    """The NUMA zone's id, as in the NodeResourceTopology."""
    amount: ResourceList
    """Resources predicted on that zone."""


class BindRequestSpec(KaiModel):
    """What to bind where."""

    podName: str | None = None
    """The pod to bind, in the BindRequest's namespace."""
    selectedNode: str | None = None
    """The node the scheduler chose."""
    receivedResourceType: Literal["Regular", "Fraction", "MigInstance"] | None = None
    """How the pod receives GPUs: whole devices, a fraction of a shared device, or MIG."""
    receivedGPU: ReceivedGPU | None = None
    """The GPUs the pod receives."""
    selectedGPUGroups: list[str] | None = None
    """For fractions: the shared-GPU groups chosen, one per device."""
    resourceClaimAllocations: list[ResourceClaimAllocation] | None = None
    """Allocations of the pod's DRA resource claims."""
    extendedResourceClaimAllocation: ExtendedResourceClaimAllocation | None = None
    """Allocation of the synthetic claim for DRA-backed extended resources."""
    predictedNUMAZones: list[NUMAZone] | None = None
    """The NUMA zones the scheduler expects the pod's resources on."""
    backoffLimit: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)] | None = None
    """How many failed attempts before the binder gives up (unset: one attempt)."""


class BindRequestStatus(KaiModel):
    """The binder's progress."""

    phase: Literal["Pending", "Succeeded", "Failed"] | None = None
    """Pending, Succeeded or Failed."""
    reason: str | None = None
    """Why the last attempt failed."""
    failedAttempts: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    """How many attempts have failed."""


class BindRequest(TopLevelObject):
    """A request from the scheduler to the binder to bind one pod to a node (and its GPUs)."""

    API_GROUP: ClassVar[str] = "scheduling.run.ai"
    API_VERSION: ClassVar[str] = "v1alpha2"
    KIND: ClassVar[str] = "BindRequest"
    PLURAL: ClassVar[str] = "bindrequests"
    SCOPE: ClassVar[str] = "Namespaced"
    HAS_STATUS: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Pod", type="string", jsonPath=".spec.podName"),
        PrinterColumn(name="Node", type="string", jsonPath=".spec.selectedNode"),
        PrinterColumn(name="Phase", type="string", jsonPath=".status.phase"),
    )

    spec: BindRequestSpec
    """The pod, the node and the devices to bind."""
    status: BindRequestStatus | None = None
    """The binder's progress."""
