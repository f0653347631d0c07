"""GPU kind rules (KAI predicates): MIG requests only on mixed-strategy MIG nodes; shared GPU
requests never on MIG nodes and only where the GPU memory is known; a shared or MIG request only
on nodes whose pool's SharingPolicy allows its mode."""

from __future__ import annotations

from collections.abc import Hashable

from kai.scheduler.framework import FilterMasks, NodeFilter, NodeView
from kai.scheduler.predicates import (
    MIG_ONLY,
    NO_GPU_MEMORY,
    NO_SHARING_ON_MIG,
    SHARING_MODE_NOT_ALLOWED,
    gpu_type_masks,
)
from kai.scheduler.sharing_modes import sharing_mode
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    return gpu_type_masks(view.nodes, spec)


def _key(spec: TaskSpec) -> Hashable:
    return (spec.gpu.is_mig, spec.gpu.is_shared, sharing_mode(spec))


GPU_RULES = NodeFilter(
    "gpu-rules",
    (MIG_ONLY, NO_SHARING_ON_MIG, NO_GPU_MEMORY, SHARING_MODE_NOT_ALLOWED),
    _masks,
    class_key=_key,
)
