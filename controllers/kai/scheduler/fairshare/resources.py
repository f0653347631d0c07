"""Resource vectors for queue accounting: (gpu, cpu, memory) in ``MANAGED_RESOURCES`` order.

Only the three resources KAI's proportion plugin manages take part in fair share, limits and
quotas. Units: GPUs in devices (fractions allowed: a fractional task counts
its fraction, a gpu-memory task counts memory / device memory, a MIG ``Ng`` instance counts N),
cpu in millicores, memory in bytes.

Public methods accept either a length-3 sequence in ``MANAGED_RESOURCES`` order (the canonical
form, cheapest) or a mapping keyed by ``"gpu"``, ``"cpu"``, ``"memory"`` (missing keys = 0;
other keys, such as extended resources or ``pods``, are ignored because queues do not manage
them).

Floating point: accounting adds and removes fractional GPUs many times per session, so sums
drift (``0.1 + 0.2 != 0.3``). Every comparison here treats values within ``EPS`` as equal; KAI
compares raw float64 values and can reject a job by one ulp. Integer quantities (millicores,
bytes, whole GPUs) are exact in float64 below 2**53, so the tolerance never changes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kai.scheduler.snapshot import MANAGED_RESOURCES, UNLIMITED

#: tolerance of every comparison of resource amounts
EPS = 1e-9

Vector = tuple[float, float, float]
ResourcesLike = Mapping[str, float] | Sequence[float]

ZERO: Vector = (0.0, 0.0, 0.0)
GPU, CPU, MEMORY = 0, 1, 2
RESOURCE_INDEXES = (GPU, CPU, MEMORY)
#: KAI walks resources as cpu, memory, gpu; when several are violated at once, the capacity
#: policy reports the first in this order, as KAI does
CHECK_ORDER = (CPU, MEMORY, GPU)

_UNITS = {GPU: "GPUs", CPU: "millicores", MEMORY: "bytes"}


def to_vector(resources: ResourcesLike) -> Vector:
    """Normalise a mapping or a length-3 sequence to a ``(gpu, cpu, memory)`` tuple of floats."""
    if isinstance(resources, Mapping):
        return (
            float(resources.get(MANAGED_RESOURCES[GPU], 0.0)),
            float(resources.get(MANAGED_RESOURCES[CPU], 0.0)),
            float(resources.get(MANAGED_RESOURCES[MEMORY], 0.0)),
        )
    if len(resources) != 3:
        raise ValueError(
            f"a resource vector has 3 entries {MANAGED_RESOURCES}, got {len(resources)}: "
            f"{list(resources)!r}"
        )
    return (float(resources[0]), float(resources[1]), float(resources[2]))


def to_mapping(vector: Sequence[float]) -> dict[str, float]:
    """``(gpu, cpu, memory)`` -> ``{"gpu": .., "cpu": .., "memory": ..}``."""
    return {name: float(vector[i]) for i, name in enumerate(MANAGED_RESOURCES)}


def leq_unlimited(a: float, b: float) -> bool:
    """``a <= b`` where -1 means infinity on either side (KAI's ``LessEqual`` per resource)."""
    if a == UNLIMITED:
        return b == UNLIMITED
    if b == UNLIMITED:
        return True
    return a <= b + EPS


def all_leq_unlimited(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a <= b`` in every resource, -1 meaning infinity (KAI ``ResourceQuantities.LessEqual``)."""
    return all(leq_unlimited(a[r], b[r]) for r in RESOURCE_INDEXES)


def add(a: Sequence[float], b: Sequence[float]) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def sub(a: Sequence[float], b: Sequence[float]) -> Vector:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def resource_name(index: int) -> str:
    return MANAGED_RESOURCES[index]


def describe(index: int, amount: float) -> str:
    """A human figure with its unit, e.g. ``2.5 GPUs``, ``-1`` shown as ``unlimited``."""
    if amount == UNLIMITED:
        return "unlimited"
    if not math.isfinite(amount):
        return f"{amount} {_UNITS[index]}"
    text = f"{amount:.6f}".rstrip("0").rstrip(".") if amount != int(amount) else str(int(amount))
    return f"{text} {_UNITS[index]}"
