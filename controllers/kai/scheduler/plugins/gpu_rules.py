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
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    return gpu_type_masks(view.nodes, spec)


def _key(spec: TaskSpec) -> Hashable:
    # decides is_mig, is_shared and the sharing mode, all the masks read of the spec
    gpu = spec.gpu
    return (gpu.fraction is not None, gpu.memory_mib is not None, bool(gpu.mig))


GPU_RULES = NodeFilter(
    "gpu-rules",
    (MIG_ONLY, NO_SHARING_ON_MIG, NO_GPU_MEMORY, SHARING_MODE_NOT_ALLOWED),
    _masks,
    class_key=_key,
)
