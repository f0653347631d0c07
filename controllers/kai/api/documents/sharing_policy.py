"""SharingPolicy: how GPUs of one node pool may be shared between workloads."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kai.api.base import KaiModel, TopLevelObject
from kai.api.documents.fields import LabelValue
from kai.api.documents.status import DocumentStatus

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"

SharingMode = Literal["fraction", "gpu-memory", "mps", "mig"]


class SharingPolicySpec(KaiModel):
    """GPU sharing settings of the nodes of one node pool."""

    nodePool: LabelValue = Field(
        default="",
        description='Value of the kai.scheduler/node-pool node label; "" = nodes without it.',
    )
    modes: list[SharingMode] = Field(
        default_factory=list,
        json_schema_extra={"uniqueItems": True},
        description="Sharing modes allowed: fraction (gpu-fraction), gpu-memory, mps, mig. "
        "Empty: whole GPUs only.",
    )
    defaultPlacement: Literal["pack", "spread"] = Field(
        default="pack",
        description="Where shared requests go: pack onto partly used GPUs, or spread.",
    )
    reservationRuntimeClassName: str = Field(
        default="nvidia",
        description='RuntimeClass of the GPU reservation pods ("" = none).',
    )


class SharingPolicy(TopLevelObject):
    """GPU sharing (fractions, GPU memory, MPS, MIG) for one node pool."""

    API_GROUP: ClassVar[str] = GROUP
    API_VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "SharingPolicy"
    HAS_STATUS: ClassVar[bool] = True
    PLURAL: ClassVar[str] = "sharingpolicies"
    DESCRIPTION: ClassVar[str] = "GPU sharing settings of one node pool."

    spec: SharingPolicySpec
    status: DocumentStatus | None = None
