"""KAI's node-order plugins as scorers (KAI-compatible scale: each weight keeps the plugins in
strict priority, gpusharingorder > nodeavailability > resourcetype > nodeplacement)."""

from __future__ import annotations

from kai.scheduler import scoring
from kai.scheduler.framework import ClassView, NodeScorer, RowScore, ScoreRows
from kai.scheduler.resource_layout import CPU, GPU, BoolArray, FloatArray


def _gpu_sharing(view: ClassView) -> RowScore | None:
    """gpusharingorder: a shared request prefers a node where a device already has room (only
    under binpack GPU placement)."""
    if not (view.shared and view.config.placement_gpu == "binpack"):
        return None

    def score(rows: ScoreRows) -> BoolArray:
        assert rows.shared_room is not None
        return rows.shared_room

    return score


def _placement(view: ClassView) -> RowScore | None:
    """nodeplacement: binpack (fuller nodes first) or spread on the GPU column for GPU tasks,
    the CPU column otherwise; in [0, 9] (binpack) or [0, 1] (spread)."""
    nodes = view.nodes
    if view.uses_gpu:
        strategy, column = view.config.placement_gpu, GPU
    else:
        strategy, column = view.config.placement_cpu, CPU
    max_capacity = float(nodes.max_capacity[column]) if len(nodes) else 0.0
    allocatable = nodes.allocatable

    def score(rows: ScoreRows) -> FloatArray:
        return scoring.placement(
            strategy, rows.future[:, column], allocatable[rows.rows, column], max_capacity
        )

    return score


def _availability(view: ClassView) -> RowScore | None:
    """nodeavailability: nodes where the task fits on idle resources before those where it
    would wait for releasing ones."""

    def score(rows: ScoreRows) -> BoolArray:
        return rows.fits_now

    return score


def _resource_type(view: ClassView) -> RowScore | None:
    """resourcetype: a task without GPUs prefers CPU-only nodes."""
    if view.uses_gpu:
        return None
    cpu_only = view.nodes.cpu_only

    def score(rows: ScoreRows) -> BoolArray:
        return cpu_only[rows.rows]

    return score


GPU_SHARING_ORDER = NodeScorer("gpusharingorder", scoring.GPU_SHARING, _gpu_sharing)
NODE_PLACEMENT = NodeScorer("nodeplacement", 1.0, _placement)
NODE_AVAILABILITY = NodeScorer("nodeavailability", scoring.AVAILABILITY, _availability)
RESOURCE_TYPE = NodeScorer("resourcetype", scoring.RESOURCE_TYPE, _resource_type)
