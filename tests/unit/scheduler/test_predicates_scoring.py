"""Node filters (affinity operators, taints, readiness, pod affinity) and score formulas."""

from __future__ import annotations

import numpy as np
from builders import cluster, job, node, task

from kai.scheduler import predicates, scoring
from kai.scheduler.nodes import NodeTable
from kai.scheduler.placement import EqClass
from kai.scheduler.plugins.registry import DEFAULT_REGISTRY
from kai.scheduler.resource_layout import ResourceLayout
from kai.scheduler.session import Session
from kai.scheduler.snapshot import NodeSelectorTerm, Requirement, Taint, Toleration


def _table() -> NodeTable:
    nodes = [
        node("a", labels={"zone": "z1", "rank": "3"}),
        node("b", labels={"zone": "z2", "rank": "10"}),
        node("c", labels={"zone": "z3"}),
    ]
    return NodeTable(nodes, ResourceLayout())


def _mask(*requirements: Requirement) -> list[bool]:
    table = _table()
    index = predicates.LabelIndex(table)
    terms = (NodeSelectorTerm(tuple(requirements)),)
    return list(predicates.affinity_mask(index, {}, terms, len(table)))


def test_affinity_operators() -> None:
    assert _mask(Requirement("zone", "In", ("z1", "z3"))) == [True, False, True]
    assert _mask(Requirement("zone", "NotIn", ("z1",))) == [False, True, True]
    assert _mask(Requirement("rank", "Exists")) == [True, True, False]
    assert _mask(Requirement("rank", "DoesNotExist")) == [False, False, True]
    assert _mask(Requirement("rank", "Gt", ("5",))) == [False, True, False]
    assert _mask(Requirement("rank", "Lt", ("5",))) == [True, False, False]
    assert _mask(Requirement("zone", "In", ("z1", "z2")), Requirement("rank", "Gt", ("4",))) == [
        False,
        True,
        False,
    ]


def test_terms_are_ored_and_selector_anded() -> None:
    table = _table()
    index = predicates.LabelIndex(table)
    terms = (
        NodeSelectorTerm((Requirement("zone", "In", ("z1",)),)),
        NodeSelectorTerm((Requirement("zone", "In", ("z3",)),)),
    )
    assert list(predicates.affinity_mask(index, {}, terms, 3)) == [True, False, True]
    assert list(predicates.affinity_mask(index, {"rank": "3"}, terms, 3)) == [True, False, False]


def test_tolerations() -> None:
    taint = Taint("node.kubernetes.io/not-ready", None, "NoSchedule")
    assert not predicates.tolerates((), taint)
    assert predicates.tolerates((Toleration("node.kubernetes.io/not-ready", "Exists"),), taint)
    assert predicates.tolerates((Toleration(None, "Exists"),), taint)
    assert not predicates.tolerates(
        (Toleration("node.kubernetes.io/not-ready", "Exists", effect="NoExecute"),), taint
    )
    soft = NodeTable([node("n", taints=(Taint("x", "y", "PreferNoSchedule"),))], ResourceLayout())
    assert list(predicates.taint_mask(soft, ())) == [True]


def test_binpack_kai_formula_and_session_form_order_nodes_alike() -> None:
    free = np.array([0.0, 2.0, 4.0, 8.0])
    has = np.array([True, True, True, True])
    kai = scoring.binpack_kai(free, has)
    assert list(kai) == [9.0, 6.75, 4.5, 0.0]
    ours = scoring.binpack(free, np.full(4, 8.0), 8.0)
    assert list(np.argsort(-kai)) == list(np.argsort(-ours))
    assert scoring.binpack_kai(np.array([3.0, 3.0]), np.array([True, True])).tolist() == [9, 9]
    assert scoring.binpack(np.array([0.0]), np.array([0.0]), 8.0).tolist() == [0.0]


def test_spread_formula() -> None:
    assert scoring.spread(np.array([2.0, 0.0, 1.0]), np.array([4.0, 0.0, 1.0])).tolist() == [
        0.5,
        0.0,
        1.0,
    ]


def test_summary_lists_counts_per_reason() -> None:
    text = DEFAULT_REGISTRY.summarize({"insufficient gpu": 3, predicates.NODE_AFFINITY: 2}, 5)
    assert (
        text
        == "0/5 nodes are available: 3 nodes: insufficient gpu; 2 nodes: node affinity mismatch"
    )


def test_pod_anti_affinity_is_symmetric() -> None:
    from kai.scheduler.session import run_session

    nodes = [node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}) for i in range(2)]
    guard = task(
        "guard",
        status="Running",
        node_name="n0",
        pod_anti_affinity=("kubernetes.io/hostname", {"app": "noisy"}),
    )
    noisy = task("noisy", labels={"app": "noisy"})
    snap = cluster(nodes, [job("g", [guard], age=9), job("n", [noisy])])
    assert run_session(snap, ["allocate"]).tasks["noisy"].node == "n1"


def test_incremental_failure_codes_match_a_full_recount() -> None:
    from kai.scheduler.statement import Statement

    nodes = [
        node("a", gpus=2, cpu=3000),
        node("b", gpus=1, max_pods=1),
        node("c", gpus=4, ready=False),
        node("d", gpus=4, taints=(Taint("x", "y", "NoSchedule"),)),
        node("e", gpus=4, labels={"kai.scheduler/type": "other"}),
    ]
    jobs = [
        job("r", [task("r0", gpus=1, status="Running", node_name="b")], age=9),
        job("p", [task("p0", gpus=2, cpu=2000), task("p1", gpus=2, cpu=2000)]),
        job("f", [task("f0", fraction=0.5, affinity={"kai.scheduler/type": ["a", "b", "c"]})]),
    ]
    session = Session(cluster(nodes, jobs))
    stmt = Statement(session, "test")
    stmt.allocate(session.tasks["p0"], session.nodes.index["a"])
    everywhere = np.ones(len(session.nodes), dtype=bool)
    domain = session.engine.domain_code
    for uid in ("p1", "f0"):
        cls = session.engine.class_of(session.tasks[uid])
        incremental = cls.explain([])
        assert incremental == cls.explain([(domain, everywhere)])
        # a class built now computes every row from scratch
        fresh = EqClass(session.engine, session.tasks[uid], -1)
        assert incremental == fresh.explain([])
        assert incremental == _charge_in_order(session, cls)


def _charge_in_order(session: Session, cls: EqClass) -> dict[str, int]:
    """The reference: every node charged to the first check it fails, checks in registry
    order, resources last."""
    from kai.scheduler.framework import NodeView
    from kai.scheduler.resource_layout import EPS, PODS

    nodes = session.nodes
    view = NodeView(nodes, session.engine.labels, session.config)
    checks = [pair for f in session.registry.node_filters for pair in f.masks(view, cls.spec)]
    future = nodes.idle + nodes.releasing
    checks.append((predicates.TOO_MANY_PODS, future[:, PODS] >= 1 - EPS))
    for col in cls.columns:
        if col != PODS:
            name = f"insufficient {nodes.layout.names[col]}"
            checks.append((name, future[:, col] >= cls.request[col] - EPS))
    if cls.shared:
        checks.append((predicates.INSUFFICIENT_SHARED, cls.fits_future))
    counts: dict[str, int] = {}
    for i in range(len(nodes)):
        for name, ok in checks:
            if not ok[i]:
                counts[name] = counts.get(name, 0) + 1
                break
    return counts


def test_placed_pod_index_follows_placements_and_rollback() -> None:
    from kai.scheduler.session import Session
    from kai.scheduler.snapshot import PodAffinityTerm
    from kai.scheduler.statement import Statement

    nodes = [node(f"n{i}", labels={"zone": f"z{i}"}) for i in range(2)]
    web = task("web", labels={"app": "web"}, pod_anti_affinity=("zone", {"app": "web"}))
    session = Session(cluster(nodes, [job("j", [web])]))
    term = PodAffinityTerm("zone", (("app", "web"),))
    stmt = Statement(session, "test")
    stmt.allocate(session.tasks["web"], 1)
    assert [n for _, n in session.placed_pods.matching("", term)] == [1]
    assert session.placed_pods.any_anti_affinity()
    stmt.discard()
    assert list(session.placed_pods.matching("", term)) == []
    assert not session.placed_pods.any_anti_affinity()
