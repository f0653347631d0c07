"""TopologyPolicy: a named network topology; compiles to a kai.scheduler/v1alpha1 Topology."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kai.api.base import KaiModel, TopLevelObject
from kai.api.documents.fields import LabelKey
from kai.api.documents.status import DocumentStatus

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"


class TopologyLevel(KaiModel):
    """One level of the topology: the node label whose value names a domain at this level."""

    nodeLabel: LabelKey = Field(description="Node label key, e.g. topology.kubernetes.io/zone.")
    alias: LabelKey | None = Field(
        default=None,
        description="A short name workloads may use instead of the label key (e.g. rack).",
    )


class TopologyPolicySpec(KaiModel):
    """Levels from the widest (first) to the narrowest (last)."""

    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=16,
        description="Widest first; node labels unique; kubernetes.io/hostname only last.",
    )


class TopologyPolicy(TopLevelObject):
    """A topology (zone, block, rack, host) for topology-aware placement of gangs."""

    API_GROUP: ClassVar[str] = GROUP
    API_VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "TopologyPolicy"
    HAS_STATUS: ClassVar[bool] = True
    PLURAL: ClassVar[str] = "topologypolicies"
    DESCRIPTION: ClassVar[str] = "A network topology (compiles to a KAI Topology)."

    spec: TopologyPolicySpec
    status: DocumentStatus | None = None
