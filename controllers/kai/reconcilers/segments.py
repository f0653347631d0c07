"""Segmented subgroups: ``kai.scheduler/segment-size`` turned into per-segment subgroups.

A distributed job whose worker template carries ``kai.scheduler/segment-size: "4"`` is split
into segments of 4 workers (worker ``i`` belongs to segment ``i // 4``), each segment its own
leaf subgroup, optionally under its own topology constraint
(``kai.scheduler/segment-topology-required-placement`` / ``-preferred-placement`` with the
topology named by ``kai.scheduler/topology`` on the template or, failing that, the workload),
all under one parent subgroup.

The pod-grouper calls :func:`plan_segments` and writes the result into the PodGroup's
``subGroups`` (:meth:`SegmentPlan.subgroups` gives them as core snapshot specs); workers get the
label ``kai.scheduler/subgroup-name`` = :meth:`SegmentPlan.segment_name`. Pure module: plain
mappings in, plain data out, :class:`SegmentError` naming the annotation on bad input.

Gang rule: the first ``ceil(min_workers / size)`` segments are required (``minMember`` = the
workers in them: a segment is placed whole or not at all); later segments get ``minMember`` 0
and grow elastically. The parent carries ``minSubGroup`` = the number of segments (optional
segments are satisfied at once, so this requires exactly the required ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kai.scheduler.snapshot import SubGroupSpec, TopologyConstraint

__all__ = [
    "MAX_SEGMENTS",
    "SEGMENT_PREFERRED",
    "SEGMENT_REQUIRED",
    "SEGMENT_SIZE",
    "TOPOLOGY",
    "SegmentError",
    "SegmentPlan",
    "plan_segments",
]

SEGMENT_SIZE = "kai.scheduler/segment-size"
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
TOPOLOGY = "kai.scheduler/topology"
MAX_SEGMENTS = 10_000


class SegmentError(ValueError):
    """Bad segment annotations; the message names the workload and the annotation."""


@dataclass(frozen=True)
class SegmentPlan:
    parent: str  # name of the parent subgroup holding the segments
    parent_of_parent: str | None
    size: int
    workers: int
    min_members: tuple[int, ...]  # per segment
    topology: TopologyConstraint | None  # the constraint of every segment

    @property
    def count(self) -> int:
        return len(self.min_members)

    def segment_name(self, worker_index: int) -> str:
        """The leaf subgroup of worker ``worker_index`` (its replica index, from 0)."""
        if not 0 <= worker_index < self.workers:
            raise SegmentError(
                f"worker index {worker_index} is outside 0..{self.workers - 1} of {self.parent!r}"
            )
        return f"{self.parent}-segment-{worker_index // self.size}"

    def subgroups(self) -> list[SubGroupSpec]:
        """The parent and one leaf per segment, as core snapshot subgroups."""
        out = [SubGroupSpec(self.parent, self.parent_of_parent, None, self.count)]
        for index, minimum in enumerate(self.min_members):
            out.append(
                SubGroupSpec(
                    f"{self.parent}-segment-{index}",
                    self.parent,
                    minimum,
                    None,
                    self.topology,
                )
            )
        return out


def _size(workload: str, raw: str, workers: int) -> int:
    text = raw.strip()
    if not text.isdigit() or text != raw:
        raise SegmentError(
            f"{workload}: annotation {SEGMENT_SIZE}: must be a whole number > 1, got {raw!r}"
        )
    size = int(text)
    if size <= 1:
        raise SegmentError(f"{workload}: annotation {SEGMENT_SIZE}: must be > 1, got {size}")
    if size > workers:
        raise SegmentError(
            f"{workload}: annotation {SEGMENT_SIZE}: {size} is more than the {workers} worker(s)"
        )
    return size


def plan_segments(
    workload: str,
    template_annotations: Mapping[str, str],
    workers: int,
    min_workers: int | None = None,
    workload_annotations: Mapping[str, str] | None = None,
    parent: str = "workers",
    parent_of_parent: str | None = None,
) -> SegmentPlan | None:
    """Segments of ``workers`` workers, or None when the template asks for none.

    ``workload`` names the workload in messages; ``min_workers`` (default: all) is how many
    workers the job needs to run; ``workload_annotations`` are the top owner's, whose
    ``kai.scheduler/topology`` applies when the template names none.
    """
    raw = template_annotations.get(SEGMENT_SIZE)
    if raw is None:
        for key in (SEGMENT_REQUIRED, SEGMENT_PREFERRED):
            if key in template_annotations:
                raise SegmentError(f"{workload}: annotation {key} needs {SEGMENT_SIZE}")
        return None
    if workers < 1:
        raise SegmentError(f"{workload}: a segmented workload needs at least one worker")
    size = _size(workload, raw, workers)
    count = math.ceil(workers / size)
    if count > MAX_SEGMENTS:
        raise SegmentError(
            f"{workload}: {count} segments of {size} workers exceed the limit of {MAX_SEGMENTS}"
        )
    minimum = workers if min_workers is None else min_workers
    if not 0 <= minimum <= workers:
        raise SegmentError(f"{workload}: minimum workers {minimum} is outside 0..{workers}")
    required = math.ceil(minimum / size)
    members = tuple(
        min(size, workers - index * size) if index < required else 0 for index in range(count)
    )
    required_level = template_annotations.get(SEGMENT_REQUIRED) or None
    preferred_level = template_annotations.get(SEGMENT_PREFERRED) or None
    constraint = None
    if required_level or preferred_level:
        topology = template_annotations.get(TOPOLOGY) or (workload_annotations or {}).get(TOPOLOGY)
        if not topology:
            key = SEGMENT_REQUIRED if required_level else SEGMENT_PREFERRED
            raise SegmentError(
                f"{workload}: annotation {key} needs {TOPOLOGY} on the worker template or the "
                "workload to say which Topology the level belongs to"
            )
        constraint = TopologyConstraint(topology, required_level, preferred_level)
    return SegmentPlan(parent, parent_of_parent, size, workers, members, constraint)
