"""Field types of the GitOps documents.

Names, quantities, durations and label keys come from :mod:`kai.api.types` (shared with the
KAI-compatible models, so the CRD generator knows them); the few types only the documents need
are defined here. Each carries the JSON Schema fragment that ``schemas/`` publishes for it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, WithJsonSchema

from kai.api.types import DNSLabel, Duration, LabelKey, Quantity

__all__ = [
    "DNSLabel",
    "Duration",
    "GpuAmount",
    "LabelKey",
    "LabelValue",
    "PrometheusDuration",
    "Quantity",
    "Weight",
]

GpuAmount = Annotated[
    int | float,
    WithJsonSchema({"type": "number", "description": "GPU devices; fractions allowed."}),
]
"""A number of GPU devices (0.5 = half a device); -1 means unlimited."""

Weight = Annotated[int | float, WithJsonSchema({"type": "number", "minimum": 0})]
"""A relative weight, 0 or more."""

# A Prometheus range ("1w", "7d", "12h", "30m"), as KAI's usage window sizes are written.
PROMETHEUS_DURATION_PATTERN = r"^([0-9]+(y|w|d|h|m|s|ms))+$"
PrometheusDuration = Annotated[
    str, Field(pattern=PROMETHEUS_DURATION_PATTERN, json_schema_extra={"examples": ["1w", "7d"]})
]
"""A Prometheus range such as ``1w``, ``7d`` or ``12h``."""

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
"""A Kubernetes label value (may be empty)."""
