"""The status the controller (``kai controller``) writes on every GitOps document."""

from __future__ import annotations

from pydantic import Field

from kai.api.base import KaiModel
from kai.api.types import Condition


class ProducedObject(KaiModel):
    """One object compiled from the document and applied to the cluster."""

    apiVersion: str
    kind: str
    name: str
    namespace: str | None = None


class DocumentStatus(KaiModel):
    """Written by the controller; never by hand."""

    observedGeneration: int | None = Field(
        default=None, description="The metadata.generation the conditions describe."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="Ready, Applied, Invalid (rule id and message of kai validate), PruneBlocked.",
    )
    objects: list[ProducedObject] | None = Field(
        default=None, description="The objects produced from this document and applied."
    )
