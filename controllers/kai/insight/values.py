"""Field values as a Kubernetes user reads them in YAML (for ``kai plan``'s output).

Light on purpose (only PyYAML): the sandboxed process of ``kai plan --template`` imports it.
"""

from __future__ import annotations

import math
from typing import Any


def normal(value: Any) -> Any:
    """``value`` as the API server stores and returns it: an integral float is an integer (in
    mappings and lists too)."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


UNSET = "(unset)"


def show(value: Any) -> str:
    """A field's value as a Kubernetes user reads it in YAML: ``true``, ``10m``, ``'true'`` (a
    string that would read as another type is quoted), ``{a: 1}``; ``(unset)`` for no field."""
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    value = normal(value)
    if isinstance(value, int):
        return str(value)
    import yaml

    text: str = yaml.safe_dump(
        normal(value), default_flow_style=True, width=2**31, allow_unicode=True
    )
    text = text.strip()
    if text.endswith("\n..."):  # the end-of-document marker after a plain scalar
        text = text[: -len("\n...")]
    if not text.isprintable():  # a line break or control character: YAML's escaped form
        import json

        text = "".join(
            c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
            for c in json.dumps(normal(value), ensure_ascii=False)
        )
    return text
