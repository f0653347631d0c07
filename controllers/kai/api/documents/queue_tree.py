"""QueueTree: a tree of queues written as nested YAML; compiles to KAI Queues."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kai.api.base import KaiModel, PrinterColumn, TopLevelObject
from kai.api.documents.fields import DNSLabel, Duration, GpuAmount, Quantity, Weight
from kai.api.documents.status import DocumentStatus

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"


class ResourceAmounts(KaiModel):
    """Amounts per resource. A resource left out takes the tree's default (see QueueDefaults)."""

    gpu: GpuAmount | None = Field(default=None, description="GPU devices; fractions allowed.")
    cpu: Quantity | None = Field(default=None, description='CPU cores as a quantity ("500m", "2").')
    memory: Quantity | None = Field(
        default=None, description='Memory as a quantity ("64Gi", "512M").'
    )


class ResourceWeights(KaiModel):
    """Over-quota weights per resource: the share of what is left once every quota is served."""

    gpu: Weight | None = None
    cpu: Weight | None = None
    memory: Weight | None = None


class QueueDefaults(KaiModel):
    """Values applied to every queue of the tree that does not set them (per resource)."""

    quota: ResourceAmounts | None = Field(default=None, description="Default guaranteed amounts.")
    limit: ResourceAmounts | None = Field(default=None, description="Default hard caps.")
    overQuotaWeight: ResourceWeights | None = None
    priority: int | None = Field(default=None, description="Default priority (100 if unset).")
    preemptMinRuntime: Duration | None = None
    reclaimMinRuntime: Duration | None = None


class QueueNode(KaiModel):
    """One queue. A queue with ``children`` is a parent; one without is a leaf that runs jobs."""

    name: DNSLabel = Field(description="The Queue's name; unique across all documents.")
    displayName: str | None = Field(default=None, description="A human-readable name.")
    priority: int | None = Field(
        default=None,
        description="Queues of higher priority get over-quota resources first (default 100).",
    )
    quota: ResourceAmounts | None = Field(
        default=None, description='Guaranteed ("deserved") amounts; -1 = the parent\'s whole share.'
    )
    limit: ResourceAmounts | None = Field(default=None, description="Hard caps; -1 = no cap.")
    overQuotaWeight: ResourceWeights | None = None
    preemptMinRuntime: Duration | None = Field(
        default=None, description="Minimum runtime before this queue's jobs may be preempted."
    )
    reclaimMinRuntime: Duration | None = Field(
        default=None, description="Minimum runtime before this queue's jobs may be reclaimed."
    )
    namespaces: list[DNSLabel] | None = Field(
        default=None, description="Leaf only: namespaces whose workloads use this queue."
    )
    children: list[QueueNode] | None = Field(default=None, description="Nested queues.")


class QueueTreeSpec(KaiModel):
    """The queues of one tree, with optional defaults and an optional attachment point."""

    parent: DNSLabel | None = Field(
        default=None,
        description="Attach this tree's top queues under this queue (of another tree).",
    )
    defaults: QueueDefaults | None = None
    queues: list[QueueNode] = Field(min_length=1, description="The top queues of the tree.")


class QueueTree(TopLevelObject):
    """A hierarchy of queues kept in Git; each queue compiles to a scheduling.run.ai/v2 Queue."""

    API_GROUP: ClassVar[str] = GROUP
    API_VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "QueueTree"
    HAS_STATUS: ClassVar[bool] = True
    PLURAL: ClassVar[str] = "queuetrees"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("qt",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(name="Parent", type="string", jsonPath=".spec.parent"),
    )
    DESCRIPTION: ClassVar[str] = "A tree of scheduling queues (compiles to KAI Queues)."

    spec: QueueTreeSpec
    status: DocumentStatus | None = None
