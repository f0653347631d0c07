"""Job, task and subgroup order; hierarchical queue order in allocate."""

from __future__ import annotations

from builders import cluster, job, node, queue, statuses, task

from kai.scheduler.jobs import PodSet, SubGroupSet
from kai.scheduler.ordering import child_order_key, job_order_key, task_order_key
from kai.scheduler.session import Session, run_session


def _jobs(*specs):  # type: ignore[no-untyped-def]
    session = Session(cluster([node("n0")], list(specs)))
    return {j.uid: j for j in session.jobs}


def test_job_order_priority_then_elastic_then_age_then_name() -> None:
    jobs = _jobs(
        job("low-old", [task("a")], priority=50, age=100),
        job("high", [task("b")], priority=75),
        job("b-young", [task("c")], age=1),
        job("a-young", [task("d")], age=1),
        job(
            "above",
            [task("e", status="Running", node_name="n0"), task("f")],
            min_available=0,
            age=1000,
        ),
    )
    ordered = sorted(jobs.values(), key=job_order_key)
    assert [j.uid for j in ordered] == ["high", "low-old", "a-young", "b-young", "above"]


def test_task_order_priority_labelled_first_then_name() -> None:
    specs = [task("b"), task("a"), task("z", priority=1), task("y", priority=7)]
    specs.append(task("m", labels={"training.kubeflow.org/job-role": "master"}))
    ordered = sorted(specs, key=task_order_key)
    assert [t.name for t in ordered] == ["m", "y", "z", "a", "b"]


def test_child_order_unsatisfied_first_then_ratio_then_optional() -> None:
    root = SubGroupSet("", None, None)
    unsatisfied = PodSet("u", 2, root)
    required_half = PodSet("r1", 2, root)
    required_half.active = 2
    required_full = PodSet("r0", 1, root)
    required_full.active = 3
    optional = PodSet("o", 0, root)
    optional.active = 1
    ordered = sorted([optional, required_full, required_half, unsatisfied], key=child_order_key)
    assert [c.name for c in ordered] == ["u", "r1", "r0", "o"]


def test_queue_below_fair_share_goes_first() -> None:
    queues = [queue("a", gpu=(1, -1, 1), rank=0), queue("b", gpu=(1, -1, 1), rank=1)]
    snap = cluster(
        [node("n0", gpus=3)],
        [
            job("a-run", [task("ar", status="Running", node_name="n0")], queue_name="a", age=9),
            job("a-new", [task("an")], queue_name="a", age=5),
            job("b-new", [task("bn")], queue_name="b", age=1),
            job("a-new2", [task("an2")], queue_name="a", age=4),
        ],
        queues=queues,
    )
    got = statuses(run_session(snap, ["allocate"]))
    # b (nothing allocated, within quota) wins over the older job of a
    assert got["bn"][0] == "Binding"
    assert sum(got[k][0] == "Binding" for k in ("an", "an2")) == 1


def test_hierarchy_compares_departments_first() -> None:
    queues = [
        queue("d1", gpu=(2, -1, 1), rank=0),
        queue("d2", gpu=(2, -1, 1), rank=1),
        queue("d1-a", parent="d1", gpu=(2, -1, 1), rank=2),
        queue("d2-a", parent="d2", gpu=(1, -1, 1), rank=3),
        queue("d2-b", parent="d2", gpu=(1, -1, 1), rank=4),
    ]
    snap = cluster(
        [node("n0", gpus=4)],
        [
            job(
                "x", [task("x0"), task("x1"), task("x2")], queue_name="d1-a", min_available=1, age=9
            ),
            job("y", [task("y0")], queue_name="d2-a", age=1),
            job("z", [task("z0")], queue_name="d2-b", age=1),
        ],
        queues=queues,
    )
    got = statuses(run_session(snap, ["allocate"]))
    assert got["y0"][0] == "Binding" and got["z0"][0] == "Binding"
    assert sum(got[f"x{i}"][0] == "Binding" for i in range(3)) == 2
