"""Base classes shared by every API model (KAI-compatible objects and GitOps documents).

Models are pydantic v2 classes whose field names are the wire names (camelCase), so a model reads
and writes the YAML/JSON users see without aliases. Unknown fields are refused (``extra=forbid``),
which is also what the generated JSON Schemas and CRDs say (``additionalProperties: false``).

A top-level kind carries its identity and CRD metadata as class variables; ``kai.api.registry``
collects them, and ``kai.api.generate`` turns them into ``schemas/`` and ``manifests/crds/``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field


class KaiModel(BaseModel):
    """Strict base: unknown fields are an error, field names are wire names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=False)


class ObjectMeta(BaseModel):
    """The subset of Kubernetes ObjectMeta a document or object may carry.

    Server-set fields (uid, resourceVersion, ...) are accepted so that objects read back from a
    cluster validate; GitOps documents normally set only name, labels and annotations.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PrinterColumn(KaiModel):
    name: str
    type: str  # string | integer | number | boolean | date
    jsonPath: str
    description: str | None = None
    priority: int | None = None


class TopLevelObject(KaiModel):
    """A kind with apiVersion/kind/metadata. Subclasses set the class variables below."""

    API_GROUP: ClassVar[str]
    API_VERSION: ClassVar[str]  # the version part only, e.g. "v2"
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SCOPE: ClassVar[str] = "Cluster"  # Cluster | Namespaced
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = ()
    HAS_STATUS: ClassVar[bool] = False
    DESCRIPTION: ClassVar[str] = ""

    apiVersion: str
    kind: str
    metadata: ObjectMeta

    @classmethod
    def api_version_string(cls) -> str:
        return f"{cls.API_GROUP}/{cls.API_VERSION}"

    @classmethod
    def skeleton(cls, name: str, **spec: Any) -> dict[str, Any]:
        """A minimal wire-form object of this kind (used by tests and examples)."""
        return {
            "apiVersion": cls.api_version_string(),
            "kind": cls.KIND,
            "metadata": {"name": name},
            **({"spec": spec} if spec else {}),
        }
