"""Field types shared by the API models: quantities, durations, names, label keys, conditions.

Each type is an ``Annotated`` alias that carries both its Python validation and the JSON Schema
fragment the generated schemas and CRDs use, so a model field and its schema cannot disagree.
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from kai.api.base import KaiModel
from kai.api.quantity import QUANTITY_PATTERN, parse_quantity

__all__ = [
    "DNS_LABEL_PATTERN",
    "DURATION_PATTERN",
    "LABEL_KEY_PATTERN",
    "QUANTITY_PATTERN",
    "QUANTITY_SCHEMA",
    "Condition",
    "DNSLabel",
    "Duration",
    "LabelKey",
    "Number",
    "Quantity",
    "ResourceList",
    "Timestamp",
]

# The JSON Schema fragment of a quantity: a YAML number, or a string in Kubernetes' grammar.
# kai.api.crd recognises this exact fragment and emits Kubernetes' int-or-string form.
QUANTITY_SCHEMA: dict[str, object] = {
    "anyOf": [{"type": "number"}, {"type": "string", "pattern": QUANTITY_PATTERN}]
}


def _check_quantity(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f'expected a quantity (a number or a string such as "500m"), got {value!r}'
        )
    parse_quantity(value)  # raises QuantityError (a ValueError) with the reason
    return value


Quantity = Annotated[
    int | float | str,
    BeforeValidator(_check_quantity),
    WithJsonSchema(QUANTITY_SCHEMA),
]
"""A Kubernetes quantity as written (``2``, ``0.5``, ``"500m"``, ``"64Gi"``); parse it with
:func:`kai.api.quantity.parse_quantity` for its exact value."""


def _check_number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return value


Number = Annotated[int | float, BeforeValidator(_check_number), WithJsonSchema({"type": "number"})]
"""A plain number (integer or not), kept as written; strings and booleans are refused."""

ResourceList = dict[str, Quantity]
"""Resource name -> quantity, as Kubernetes' ``ResourceList``."""

# Go's time.ParseDuration grammar (metav1.Duration): "0", or one or more <number><unit>.
DURATION_PATTERN = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, json_schema_extra={"examples": ["30s", "10m", "1h30m"]}),
]
"""A Go duration string (``metav1.Duration``): ``90s``, ``10m``, ``1h30m``, ``-1s``."""

# RFC 3339 date-time as Kubernetes writes it (metav1.Time).
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def _check_timestamp(value: object) -> str:
    if isinstance(value, datetime.datetime):  # YAML loaders turn unquoted timestamps into these
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if not isinstance(value, str) or not _TIMESTAMP.match(value):
        raise ValueError(f"{value!r} is not an RFC 3339 date-time such as 2026-01-01T00:00:00Z")
    return value


Timestamp = Annotated[
    str,
    BeforeValidator(_check_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""An RFC 3339 timestamp string (``metav1.Time``), kept as written."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNSLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
"""An RFC 1123 label: lower-case letters, digits and ``-``, alphanumeric at both ends."""

LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
LabelKey = Annotated[str, Field(min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN)]
"""A label key with an optional DNS-subdomain prefix (``topology.kubernetes.io/zone``)."""


_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(KaiModel):
    """A standard Kubernetes condition (``metav1.Condition``)."""

    type: Annotated[str, Field(max_length=316, pattern=LABEL_KEY_PATTERN)] = Field(
        description="Type of the condition, in CamelCase or foo.example.com/CamelCase."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    observedGeneration: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="The .metadata.generation the condition was set from."
    )
    lastTransitionTime: Timestamp = Field(
        description="When the condition last changed from one status to another."
    )
    reason: Annotated[
        str,
        Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
    ] = Field(description="A programmatic identifier for the last transition, in CamelCase.")
    message: Annotated[str, Field(max_length=32768)] = Field(
        description="A human-readable message about the transition."
    )
