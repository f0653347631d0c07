"""kai.reconcilers.segments: segment-size annotations -> per-segment subgroups."""

from __future__ import annotations

import pytest

from kai.reconcilers.segments import SegmentError, plan_segments
from kai.scheduler.snapshot import SubGroupSpec, TopologyConstraint

RACK = "k8s.io/rack"


def test_no_segment_size_means_no_segments() -> None:
    assert plan_segments("job ns/t", {}, 8) is None


def test_segments_with_rack_constraint() -> None:
    annotations = {
        "kai.scheduler/segment-size": "4",
        "kai.scheduler/segment-topology-required-placement": RACK,
        "kai.scheduler/topology": "cluster",
    }
    plan = plan_segments("job ns/t", annotations, 8)
    assert plan is not None
    rack = TopologyConstraint("cluster", RACK, None)
    assert plan.subgroups() == [
        SubGroupSpec("workers", None, None, 2),
        SubGroupSpec("workers-segment-0", "workers", 4, None, rack),
        SubGroupSpec("workers-segment-1", "workers", 4, None, rack),
    ]
    assert [plan.segment_name(i) for i in (0, 3, 4, 7)] == [
        "workers-segment-0",
        "workers-segment-0",
        "workers-segment-1",
        "workers-segment-1",
    ]


def test_segments_beyond_the_minimum_are_elastic() -> None:
    plan = plan_segments("j", {"kai.scheduler/segment-size": "4"}, 10, min_workers=5)
    assert plan is not None
    assert plan.min_members == (4, 4, 0)  # ceil(5/4) = 2 required segments


def test_last_required_segment_may_be_short() -> None:
    plan = plan_segments("j", {"kai.scheduler/segment-size": "4"}, 6)
    assert plan is not None
    assert plan.min_members == (4, 2)


def test_workload_topology_applies_when_the_template_has_none() -> None:
    annotations = {
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/segment-topology-preferred-placement": RACK,
    }
    plan = plan_segments("j", annotations, 4, workload_annotations={"kai.scheduler/topology": "t"})
    assert plan is not None
    assert plan.topology == TopologyConstraint("t", None, RACK)


def test_template_topology_wins_over_the_workload() -> None:
    annotations = {
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/segment-topology-required-placement": RACK,
        "kai.scheduler/topology": "template",
    }
    plan = plan_segments("j", annotations, 4, workload_annotations={"kai.scheduler/topology": "w"})
    assert plan is not None and plan.topology is not None
    assert plan.topology.topology == "template"


def test_nested_parent() -> None:
    plan = plan_segments(
        "j", {"kai.scheduler/segment-size": "2"}, 4, parent="w", parent_of_parent="all"
    )
    assert plan is not None
    assert plan.subgroups()[0] == SubGroupSpec("w", "all", None, 2)


@pytest.mark.parametrize(
    ("annotations", "workers", "message"),
    [
        ({"kai.scheduler/segment-size": "1"}, 4, "must be > 1"),
        ({"kai.scheduler/segment-size": "0"}, 4, "must be > 1"),
        ({"kai.scheduler/segment-size": "two"}, 4, "whole number"),
        ({"kai.scheduler/segment-size": "-2"}, 4, "whole number"),
        ({"kai.scheduler/segment-size": "8"}, 4, "more than the 4 worker"),
        (
            {"kai.scheduler/segment-topology-required-placement": RACK},
            4,
            "needs kai.scheduler/segment-size",
        ),
        (
            {
                "kai.scheduler/segment-size": "2",
                "kai.scheduler/segment-topology-required-placement": RACK,
            },
            4,
            "needs kai.scheduler/topology",
        ),
    ],
)
def test_bad_annotations_are_clear_errors(
    annotations: dict[str, str], workers: int, message: str
) -> None:
    with pytest.raises(SegmentError, match=message) as info:
        plan_segments("job ns/t", annotations, workers)
    assert str(info.value).startswith("job ns/t: ")


def test_too_many_segments() -> None:
    with pytest.raises(SegmentError, match="exceed the limit"):
        plan_segments("j", {"kai.scheduler/segment-size": "2"}, 20_002)


def test_worker_index_out_of_range() -> None:
    plan = plan_segments("j", {"kai.scheduler/segment-size": "2"}, 4)
    assert plan is not None
    with pytest.raises(SegmentError, match=r"outside 0\.\.3"):
        plan.segment_name(4)


def test_minimum_out_of_range() -> None:
    with pytest.raises(SegmentError, match=r"outside 0\.\.4"):
        plan_segments("j", {"kai.scheduler/segment-size": "2"}, 4, min_workers=5)
