"""The plugin registry: a predicate added here, through the registry alone, changes allocate,
reclaim (the victim search) and the pending reasons; the registry's own checks; the one
``place_job`` in its three modes."""

from __future__ import annotations

import numpy as np
import pytest
from builders import cluster, job, node, queue, statuses, task

from kai.scheduler.framework import (
    ClassView,
    FilterMasks,
    NodeFilter,
    NodeScorer,
    NodeView,
    RowScore,
    ScoreRows,
    TaskFilter,
)
from kai.scheduler.job_placement import NO_FIT, PlaceMode, place_job
from kai.scheduler.plugins.registry import DEFAULT_REGISTRY
from kai.scheduler.predicates import TAINT
from kai.scheduler.session import Session, run_session
from kai.scheduler.snapshot import Snapshot, TaskSpec
from kai.scheduler.statement import Statement

# ------------------------------------------------------------------ a predicate of the test's own
MAINTENANCE = "node under maintenance"


def _maintenance_masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    return ((MAINTENANCE, ~view.labels.isin("maintenance", ("true",))),)


MAINTENANCE_FILTER = NodeFilter("maintenance", (MAINTENANCE,), _maintenance_masks)
WITH_MAINTENANCE = DEFAULT_REGISTRY.with_filter(MAINTENANCE_FILTER, before="taints")

DOWN = {"maintenance": "true"}


def test_allocate_avoids_the_nodes_the_new_predicate_refuses() -> None:
    # n0 is the fuller node (binpack) and the lowest name: the default choice
    nodes = [node("n0", gpus=4, labels=DOWN), node("n1", gpus=4)]
    jobs = [
        job("old", [task("old-0", status="Running", node_name="n0")], age=9),
        job("new", [task("new-0")]),
    ]
    snap = cluster(nodes, jobs)
    assert statuses(run_session(snap))["new-0"] == ("Binding", "n0")
    assert statuses(run_session(snap, registry=WITH_MAINTENANCE))["new-0"] == ("Binding", "n1")


def test_the_pending_reason_counts_the_nodes_failing_the_new_predicate_by_name() -> None:
    from kai.scheduler.snapshot import Taint

    nodes = [
        node("n0", labels=DOWN),
        node("n1", labels=DOWN),
        node("n2", labels=DOWN, taints=(Taint("dedicated", "x", "NoSchedule"),)),
        node("n3", taints=(Taint("dedicated", "x", "NoSchedule"),)),
        node("n4", gpus=1),
    ]
    snap = cluster(nodes, [job("big", [task("big-0", gpus=2)])])
    result = run_session(snap, registry=WITH_MAINTENANCE)
    (reason,) = result.job_reasons["big"]
    # registered before taints: n2 (down and tainted) is charged to maintenance
    assert reason.message.endswith(
        "0/5 nodes are available: 3 nodes: node under maintenance; "
        "1 node: untolerated taint; 1 node: insufficient gpu"
    )
    # registered after taints, n2 is charged to the taint (and equal counts list in
    # registry order)
    later = DEFAULT_REGISTRY.with_filter(MAINTENANCE_FILTER)
    (reason,) = run_session(snap, registry=later).job_reasons["big"]
    assert reason.message.endswith(
        "0/5 nodes are available: 2 nodes: untolerated taint; "
        "2 nodes: node under maintenance; 1 node: insufficient gpu"
    )


def _reclaim_case() -> Snapshot:
    """Queue b (quota 0) runs one 4-GPU job on each node; queue a (quota 4) has a 4-GPU job
    pending. The younger victim (on n0, under maintenance) comes first in victim order."""
    nodes = [node("n0", gpus=4, labels=DOWN), node("n1", gpus=4)]
    running = [task(f"v0-{i}", status="Running", node_name="n0") for i in range(4)]
    older = [task(f"v1-{i}", status="Running", node_name="n1") for i in range(4)]
    jobs = [
        job("v0", running, queue_name="b", age=1),
        job("v1", older, queue_name="b", age=5),
        job("r", [task(f"r-{i}") for i in range(4)], queue_name="a", priority=50),
    ]
    queues = [queue("a", gpu=(4, -1, 1), rank=0), queue("b", gpu=(0, -1, 1), rank=1)]
    return cluster(nodes, jobs, queues)


def test_reclaim_no_longer_places_the_reclaimer_on_a_refused_node() -> None:
    snap = _reclaim_case()
    before = statuses(run_session(snap, ["reclaim"]))
    assert {before[f"r-{i}"] for i in range(4)} == {("Pipelined", "n0")}
    assert {before[f"v0-{i}"][0] for i in range(4)} == {"Releasing"}
    assert {before[f"v1-{i}"][0] for i in range(4)} == {"Running"}

    after = statuses(run_session(snap, ["reclaim"], registry=WITH_MAINTENANCE))
    assert {after[f"r-{i}"] for i in range(4)} == {("Pipelined", "n1")}
    assert {after[f"v0-{i}"][0] for i in range(4)} == {"Running"}
    assert {after[f"v1-{i}"][0] for i in range(4)} == {"Releasing"}


def test_reclaim_evicts_nobody_when_only_refused_nodes_could_be_freed() -> None:
    snap = _reclaim_case()
    snap.nodes[1].labels = dict(DOWN)
    after = statuses(run_session(snap, ["reclaim"], registry=WITH_MAINTENANCE))
    assert all(status == "Running" for uid, (status, _) in after.items() if uid[0] == "v")
    assert {after[f"r-{i}"] for i in range(4)} == {("Pending", None)}


# ------------------------------------------------------------------ scorers and task filters
def test_a_scorer_added_through_the_registry_reorders_nodes() -> None:
    def prefer_labelled(view: ClassView) -> RowScore | None:
        liked = np.array([lab.get("fast") == "yes" for lab in view.nodes.labels], dtype=bool)

        def score(rows: ScoreRows) -> np.ndarray:
            return liked[rows.rows]

        return score

    registry = DEFAULT_REGISTRY.with_scorer(NodeScorer("fast", 50.0, prefer_labelled))
    nodes = [node("n0"), node("n1", labels={"fast": "yes"})]
    snap = cluster(nodes, [job("j", [task("j-0")])])
    assert statuses(run_session(snap))["j-0"] == ("Binding", "n0")
    assert statuses(run_session(snap, registry=registry))["j-0"] == ("Binding", "n1")


def test_a_task_filter_sees_the_placements_of_the_session() -> None:
    """At most one task of a job per node: a task filter, evaluated per task."""
    spread = "another task of the job is on the node"

    def masks(session: Session, task_info: object) -> FilterMasks:
        job_info = task_info.job  # type: ignore[attr-defined]
        taken = np.zeros(len(session.nodes), dtype=bool)
        for other in job_info.tasks:
            if other.node >= 0:
                taken[other.node] = True
        return ((spread, ~taken),)

    registry = DEFAULT_REGISTRY.with_filter(
        TaskFilter("one-per-node", (spread,), lambda session: True, masks)
    )
    snap = cluster([node("n0"), node("n1")], [job("j", [task(f"j-{i}") for i in range(3)])])
    got = statuses(run_session(snap))
    assert {got[f"j-{i}"][1] for i in range(3)} == {"n0"}
    result = run_session(snap, registry=registry)
    assert {statuses(result)[f"j-{i}"][0] for i in range(3)} == {"Pending"}
    assert "2 nodes: another task of the job is on the node" in result.job_reasons["j"][0].message


def test_a_plugin_can_be_left_out() -> None:
    from kai.scheduler.snapshot import Taint

    snap = cluster([node("n0", taints=(Taint("k", "v", "NoSchedule"),))], [job("j", [task("j-0")])])
    assert statuses(run_session(snap))["j-0"] == ("Pending", None)
    assert statuses(run_session(snap, registry=DEFAULT_REGISTRY.without("taints")))["j-0"] == (
        "Binding",
        "n0",
    )


def test_a_plugin_turned_off_by_the_config_is_not_used() -> None:
    off = NodeFilter(
        "maintenance",
        (MAINTENANCE,),
        _maintenance_masks,
        enabled=lambda config: config.predicates,
    )
    registry = DEFAULT_REGISTRY.with_filter(off)
    nodes = [node("n0", labels=DOWN)]
    on_snap = cluster(nodes, [job("j", [task("j-0")])])
    off_snap = cluster(nodes, [job("j", [task("j-0")])], predicates=False)
    assert statuses(run_session(on_snap, registry=registry))["j-0"] == ("Pending", None)
    assert statuses(run_session(off_snap, registry=registry))["j-0"] == ("Binding", "n0")


def test_filters_that_read_the_spec_split_equivalence_classes() -> None:
    """A filter's ``class_key`` is part of the class: tasks it treats differently never share
    a cached mask."""
    quiet = "pod asks for quiet nodes"

    def masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
        if spec.labels.get("quiet") != "yes":
            return ()
        return ((quiet, view.labels.isin("noisy", ("no",))),)

    registry = DEFAULT_REGISTRY.with_filter(
        NodeFilter("quiet", (quiet,), masks, class_key=lambda spec: spec.labels.get("quiet"))
    )
    nodes = [node("n0", labels={"noisy": "yes"}), node("n1", labels={"noisy": "no"})]
    jobs = [
        job("a", [task("a-0")], age=2),
        job("b", [task("b-0", labels={"quiet": "yes"})], age=1),
    ]
    got = statuses(run_session(cluster(nodes, jobs), registry=registry))
    assert got["a-0"] == ("Binding", "n0")
    assert got["b-0"] == ("Binding", "n1")


# ------------------------------------------------------------------ the registry's checks
def test_the_registry_refuses_bad_lists() -> None:
    with pytest.raises(ValueError, match="listed twice: maintenance"):
        WITH_MAINTENANCE.with_filter(MAINTENANCE_FILTER)
    with pytest.raises(ValueError, match="no plugin named 'nope'"):
        DEFAULT_REGISTRY.with_filter(MAINTENANCE_FILTER, before="nope")
    clash = NodeFilter("clash", (TAINT,), _maintenance_masks)
    with pytest.raises(ValueError, match="must be unique"):
        DEFAULT_REGISTRY.with_filter(clash)
    with pytest.raises(ValueError, match="exactly one DomainFilter"):
        DEFAULT_REGISTRY.without("topology-domain")


def test_a_filter_returning_an_undeclared_reason_is_named() -> None:
    sloppy = NodeFilter("sloppy", ("declared",), lambda view, spec: (("other", view.nodes.ready),))
    snap = cluster([node("n0")], [job("j", [task("j-0")])])
    with pytest.raises(ValueError, match="'sloppy' returned the reason 'other'"):
        run_session(snap, registry=DEFAULT_REGISTRY.with_filter(sloppy))


# ------------------------------------------------------------------ place_job modes
def test_place_job_modes_record_tasks_differently() -> None:
    """n0 has one idle GPU and one releasing: a 2-task job fits, one task only after releases."""
    nodes = [node("n0", gpus=2)]
    jobs = [
        job("v", [task("v-0", status="Releasing", node_name="n0")], age=9),
        job("j", [task("j-0"), task("j-1")]),
    ]
    kinds = {}
    for mode in PlaceMode:
        session = Session(cluster(nodes, jobs))
        statement = Statement(session, "test")
        job_info = next(j for j in session.jobs if j.uid == "j")
        assert place_job(session, job_info, list(job_info.tasks), statement, mode) is None
        kinds[mode] = sorted(t.status.value for t in job_info.tasks)
        statement.discard()
        assert all(t.node < 0 for t in job_info.tasks)
    # allocate: the gang would bind only partly, so it is pipelined whole
    assert kinds[PlaceMode.ALLOCATE] == ["Pipelined", "Pipelined"]
    assert kinds[PlaceMode.SIMULATE] == ["Pipelined", "Pipelined"]
    assert kinds[PlaceMode.REPLAY] == ["Allocated", "Allocated"]


def test_place_job_failure_leaves_the_statement_as_it_was() -> None:
    nodes = [node("n0", gpus=1)]
    jobs = [job("j", [task("j-0"), task("j-1")])]
    for mode in PlaceMode:
        session = Session(cluster(nodes, jobs))
        statement = Statement(session, "test")
        job_info = session.jobs[0]
        reason = place_job(session, job_info, list(job_info.tasks), statement, mode)
        assert reason is not None
        assert statement.checkpoint() == 0
        assert all(t.node < 0 for t in job_info.tasks)
        if mode is PlaceMode.ALLOCATE:
            assert "1 fit before task 'j-1'" in reason.message
        else:
            assert reason is NO_FIT


# ------------------------------------------------------------------ job order and commit hooks
def test_the_registry_job_order_is_the_order_of_allocate() -> None:
    """Two one-GPU jobs, one GPU: the default order (older first) and a registry that serves
    the younger job first."""
    from dataclasses import replace

    from kai.scheduler.jobs import JobInfo

    def younger_first(job_info: JobInfo) -> tuple[object, ...]:
        return (-job_info.spec.created_at, job_info.uid)

    snap = cluster(
        [node("n0", gpus=1)], [job("old", [task("old-0")], age=9), job("new", [task("new-0")])]
    )
    assert statuses(run_session(snap))["old-0"] == ("Binding", "n0")
    registry = replace(DEFAULT_REGISTRY, job_order=younger_first)
    got = statuses(run_session(snap, registry=registry))
    assert got["new-0"] == ("Binding", "n0")
    assert got["old-0"] == ("Pending", None)


def test_commit_hooks_see_every_committed_operation_once() -> None:
    from collections.abc import Sequence

    from kai.scheduler.framework import CommitHook
    from kai.scheduler.statement import Operation

    seen: list[tuple[str, str, str]] = []

    def record(session: Session, operations: Sequence[Operation]) -> None:
        seen.extend((op.kind, op.task.uid, op.action) for op in operations)

    registry = DEFAULT_REGISTRY.with_commit_hook(CommitHook("record", record))
    result = run_session(_reclaim_case(), ["reclaim"], registry=registry)
    evicted = {uid for uid, out in result.tasks.items() if out.status.value == "Releasing"}
    pipelined = {uid for uid, out in result.tasks.items() if out.status.value == "Pipelined"}
    assert {uid for kind, uid, _ in seen if kind == "evict"} == evicted
    assert {uid for kind, uid, _ in seen if kind == "pipeline"} == pipelined
    assert len(seen) == len(evicted) + len(pipelined) == 8  # probes rolled back are not seen
    assert {action for _, _, action in seen} == {"reclaim"}


def test_a_victim_check_keeps_jobs_out_of_every_victim_search() -> None:
    from kai.scheduler.framework import VictimCheck
    from kai.scheduler.jobs import JobInfo

    def not_protected(session: Session, job_info: JobInfo) -> bool:
        return job_info.spec.namespace != "protected"

    snap = _reclaim_case()
    next(j for j in snap.jobs if j.uid == "v0").namespace = "protected"
    registry = DEFAULT_REGISTRY.with_victim_check(VictimCheck("protected", not_protected))
    got = statuses(run_session(snap, ["reclaim"], registry=registry))
    assert {got[f"v0-{i}"][0] for i in range(4)} == {"Running"}
    assert {got[f"v1-{i}"][0] for i in range(4)} == {"Releasing"}
    assert {got[f"r-{i}"] for i in range(4)} == {("Pipelined", "n1")}
    # preempt asks the same check: a higher-priority job of queue b cannot take v0 either
    snap.jobs.append(job("hi", [task(f"hi-{i}") for i in range(4)], queue_name="b", priority=90))
    got = statuses(run_session(snap, ["preempt"], registry=registry))
    assert {got[f"v0-{i}"][0] for i in range(4)} == {"Running"}
    assert {got[f"hi-{i}"] for i in range(4)} == {("Pipelined", "n1")}
