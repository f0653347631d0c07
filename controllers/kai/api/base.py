"""Base classes shared by every API model (KAI-compatible objects and GitOps documents).

Models are pydantic v2 classes whose field names are the wire names (camelCase), so a model reads
and writes the YAML/JSON users see without aliases. Unknown fields are refused (``extra=forbid``),
which is also what the generated JSON Schemas and CRDs say (``additionalProperties: false``).

A top-level kind carries its identity and CRD metadata as class variables; ``kai.api.registry``
collects them, and ``kai.api.generate`` turns them into ``schemas/`` and ``manifests/crds/``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator


class KaiModel(BaseModel):
    """Strict base: unknown fields are an error, field names are wire names.

    A docstring written under a field becomes that field's description in the JSON Schema and the
    CRD (``use_attribute_docstrings``), so models are documented once, next to the field.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,  # "2" is not a number and 2.5 is not an integer, as in the JSON Schema
        populate_by_name=True,
        validate_assignment=False,
        use_attribute_docstrings=True,
    )


def cel(rule: str, message: str, *, field_path: str | None = None) -> dict[str, str]:
    """One CEL validation rule for a CRD (``x-kubernetes-validations`` entry).

    Attach rules to a model with ``model_config = ConfigDict(json_schema_extra=cel_rules(...))`` or
    to a field with ``Field(json_schema_extra=cel_rules(...))``; the JSON Schema carries them as an
    extension keyword and :mod:`kai.api.crd` copies them into the CRD.
    """
    entry = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """The ``json_schema_extra`` value holding CEL rules."""
    return {"x-kubernetes-validations": [dict(r) for r in rules]}


class ObjectMeta(BaseModel):
    """The subset of Kubernetes ObjectMeta a document or object may carry.

    Server-set fields (uid, resourceVersion, ...) are accepted so that objects read back from a
    cluster validate; GitOps documents normally set only name, labels and annotations.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, use_attribute_docstrings=True)

    name: str = Field(min_length=1, max_length=253)
    """The object's name, unique per kind (and namespace)."""
    namespace: str | None = None
    """The namespace of a namespaced object."""
    labels: dict[str, str] | None = None
    """Labels: identifying key/value pairs, used by selectors."""
    annotations: dict[str, str] | None = None
    """Annotations: non-identifying key/value pairs."""


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
    """The API group and version of this object, e.g. scheduling.run.ai/v2."""
    kind: str
    """The kind of this object."""
    metadata: ObjectMeta
    """Standard object metadata: name, namespace, labels and annotations."""

    @model_validator(mode="after")
    def check_identity(self) -> TopLevelObject:
        kind = getattr(type(self), "KIND", None)
        if kind is None:  # an abstract base, not a concrete kind
            return self
        expected = type(self).api_version_string()
        if self.apiVersion != expected:
            raise ValueError(
                f"apiVersion must be {expected!r} for kind {kind}, got {self.apiVersion!r}"
            )
        if self.kind != kind:
            raise ValueError(f"kind must be {kind!r}, got {self.kind!r}")
        return self

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
