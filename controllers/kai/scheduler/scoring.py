"""Node scores, vectorised.

Scores are summed; the scale constants keep the plugins in strict priority: gpusharingorder
(1000) > nodeavailability (100) > resourcetype (10) > nodeplacement (at most 9). Kubernetes'
own scores (preferred pod affinity in KAI; preferred node affinity here too) are multiplied by
``K8S_PLUGINS`` (100,000), KAI's scale for them: a node that a pod prefers wins over every
node that KAI's own plugins would rank higher, as long as the pod fits there.
"""

from __future__ import annotations

import numpy as np

from kai.scheduler.resource_layout import FloatArray

K8S_PLUGINS = 100_000.0
GPU_SHARING = 1000.0
AVAILABILITY = 100.0
RESOURCE_TYPE = 10.0
MAX_HIGH_DENSITY = 9.0


def binpack_kai(free: FloatArray, has_resource: np.ndarray) -> FloatArray:
    """KAI's binpack score: ``9 × (1 − (free − minFree)/(maxFree − minFree))`` over the nodes
    having the resource (9 when all are equal), 0 on nodes lacking it."""
    out = np.zeros(free.shape, dtype=np.float64)
    if not has_resource.any():
        return out
    lo = float(free[has_resource].min())
    hi = float(free[has_resource].max())
    if hi == lo:
        out[has_resource] = MAX_HIGH_DENSITY
    else:
        out[has_resource] = MAX_HIGH_DENSITY * (1.0 - (free[has_resource] - lo) / (hi - lo))
    return out


def binpack(free: FloatArray, capacity: FloatArray, max_capacity: float) -> FloatArray:
    """Binpack as used by the session: ``9 × (1 − free / max_capacity)``, 0 on nodes lacking the
    resource. Orders nodes exactly as :func:`binpack_kai` (both decrease with ``free`` and stay
    below the next score step), but a node's score depends on that node only, so cached scores
    of untouched nodes stay valid."""
    if max_capacity <= 0:
        return np.zeros(free.shape, dtype=np.float64)
    score = MAX_HIGH_DENSITY * (1.0 - np.clip(free, 0.0, None) / max_capacity)
    return np.where(capacity > 0, score, 0.0)


def spread(free: FloatArray, capacity: FloatArray) -> FloatArray:
    """KAI's spread score: ``free / capacity`` in [0, 1], 0 on nodes lacking the resource."""
    safe = np.where(capacity > 0, capacity, 1.0)
    return np.where(capacity > 0, np.clip(free, 0.0, None) / safe, 0.0)


def placement(
    strategy: str, free: FloatArray, capacity: FloatArray, max_capacity: float
) -> FloatArray:
    if strategy == "binpack":
        return binpack(free, capacity, max_capacity)
    if strategy == "spread":
        return spread(free, capacity)
    return np.zeros(free.shape, dtype=np.float64)
