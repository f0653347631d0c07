"""Preferred (soft) node and pod affinity as scores, and PersistentVolumeClaims as a filter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from builders import cluster, job, node, task

from kai.scheduler import predicates
from kai.scheduler.nodes import NodeTable
from kai.scheduler.pod_affinity import PlacedPods, preferred_scores
from kai.scheduler.reasons import PendingReason, classify
from kai.scheduler.resource_layout import ResourceLayout
from kai.scheduler.session import Session, run_session
from kai.scheduler.snapshot import (
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    TaskSpec,
    VolumeConstraint,
    WeightedNodeTerm,
    WeightedPodAffinityTerm,
)

HOST = "kubernetes.io/hostname"


def _prefer_nodes(spec: TaskSpec, *weighted: tuple[int, str, list[str]]) -> TaskSpec:
    spec.preferred_node_affinity = tuple(
        WeightedNodeTerm(w, NodeSelectorTerm((Requirement(key, "In", tuple(values)),)))
        for w, key, values in weighted
    )
    return spec


def _pod_term(weight: int, key: str, labels: dict[str, str]) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight, PodAffinityTerm(key, tuple(sorted(labels.items()))))


def _nodes(count: int, **labels_of: dict[str, str]) -> list:  # type: ignore[type-arg]
    return [
        node(f"n{i}", labels={HOST: f"n{i}", **labels_of.get(f"n{i}", {})}) for i in range(count)
    ]


# -- preferred node affinity ---------------------------------------------------------------
def test_preferred_node_wins_over_binpack_when_it_fits() -> None:
    # binpack alone would put the pod on the fuller n0
    busy = task("busy", gpus=3, status="Running", node_name="n0")
    wants = _prefer_nodes(task("wants", gpus=1), (10, "zone", ["b"]))
    nodes = _nodes(2, n0={"zone": "a"}, n1={"zone": "b"})
    snap = cluster(nodes, [job("busy", [busy], age=5), job("wants", [wants])])
    assert run_session(snap, ["allocate"]).tasks["wants"].node == "n1"
    plain = task("plain", gpus=1)
    snap = cluster(nodes, [job("busy", [busy], age=5), job("plain", [plain])])
    assert run_session(snap, ["allocate"]).tasks["plain"].node == "n0"


def test_preferred_node_is_only_a_preference() -> None:
    full = task("full", gpus=4, status="Running", node_name="n1")
    wants = _prefer_nodes(task("wants", gpus=1), (100, "zone", ["b"]))
    nodes = _nodes(2, n0={"zone": "a"}, n1={"zone": "b"})
    snap = cluster(nodes, [job("full", [full], age=5), job("wants", [wants])])
    assert run_session(snap, ["allocate"]).tasks["wants"].node == "n0"


def test_weights_of_matching_terms_are_summed() -> None:
    table = NodeTable(
        _nodes(3, n0={"zone": "a", "disk": "ssd"}, n1={"zone": "a"}, n2={"disk": "ssd"}),
        ResourceLayout(),
    )
    index = predicates.LabelIndex(table)
    spec = _prefer_nodes(task("t"), (30, "zone", ["a"]), (50, "disk", ["ssd"]))
    score = predicates.preferred_node_score(index, spec.preferred_node_affinity, len(table))
    assert list(score) == [80.0, 30.0, 50.0]
    # an empty preferred term matches no node
    empty = (WeightedNodeTerm(70, NodeSelectorTerm(())),)
    assert list(predicates.preferred_node_score(index, empty, len(table))) == [0.0, 0.0, 0.0]


def test_higher_total_weight_wins() -> None:
    spec = _prefer_nodes(task("t", gpus=1), (30, "zone", ["a"]), (50, "disk", ["ssd"]))
    nodes = _nodes(3, n0={"zone": "a"}, n1={"disk": "ssd"}, n2={"zone": "a", "disk": "ssd"})
    assert run_session(cluster(nodes, [job("t", [spec])]), ["allocate"]).tasks["t"].node == "n2"


# -- preferred pod affinity ----------------------------------------------------------------
def test_preferred_pod_affinity_gathers_and_anti_affinity_spreads() -> None:
    nodes = _nodes(3)
    web = task("web", status="Running", node_name="n2", labels={"app": "web"})
    near = task("near", gpus=1)
    near.preferred_pod_affinity = (_pod_term(10, HOST, {"app": "web"}),)
    snap = cluster(nodes, [job("web", [web], age=5), job("near", [near])])
    assert run_session(snap, ["allocate"]).tasks["near"].node == "n2"
    away = task("away", gpus=1)
    away.preferred_pod_anti_affinity = (_pod_term(10, HOST, {"app": "web"}),)
    # binpack would put it with web (the fullest node): the soft anti-affinity wins
    snap = cluster(nodes, [job("web", [web], age=5), job("away", [away])])
    assert run_session(snap, ["allocate"]).tasks["away"].node != "n2"


def test_preferred_pod_terms_of_placed_pods_score_the_newcomer() -> None:
    # Kubernetes: a placed pod's preferred term that selects the incoming pod counts too
    nodes = _nodes(3)
    host = task("host", status="Running", node_name="n1", labels={"app": "cache"})
    host.preferred_pod_affinity = (_pod_term(20, HOST, {"app": "client"}),)
    client = task("client", gpus=1, labels={"app": "client"})
    snap = cluster(nodes, [job("host", [host], age=5), job("client", [client])])
    assert run_session(snap, ["allocate"]).tasks["client"].node == "n1"


def test_preferred_scores_count_every_matching_pod_and_both_directions() -> None:
    # KAI's own test: a pod preferring a placed pod that prefers it back scores 2 x weight
    labels = predicates.LabelIndex(NodeTable(_nodes(2), ResourceLayout())).domains
    placed = PlacedPods()
    term = _pod_term(10, HOST, {"my-label": "a"})
    other = task("other", labels={"my-label": "a"})
    other.preferred_pod_affinity = (term,)
    placed.move(other, -1, 0)
    me = task("me", labels={"my-label": "a"})
    me.preferred_pod_affinity = (term,)
    scores = preferred_scores(me, placed, labels)
    assert scores is not None and list(scores) == [20.0, 0.0]
    # each matching pod adds the weight; another namespace does not count
    second = task("second", labels={"my-label": "a"})
    placed.move(second, -1, 0)
    stranger = replace(task("stranger", labels={"my-label": "a"}), namespace="elsewhere")
    placed.move(stranger, -1, 1)
    scores = preferred_scores(me, placed, labels)
    assert scores is not None and list(scores) == [30.0, 0.0]
    # nothing selected: no score at all
    assert preferred_scores(task("lonely", labels={"x": "y"}), PlacedPods(), labels) is None


def test_preferred_pod_affinity_follows_placements_within_a_session() -> None:
    # the second pod of a job follows the first one placed in the same session
    nodes = _nodes(4)
    pods = []
    for i in range(2):
        spec = task(f"p{i}", gpus=1, labels={"app": "pair"})
        spec.preferred_pod_affinity = (_pod_term(50, HOST, {"app": "pair"}),)
        pods.append(spec)
    result = run_session(cluster(nodes, [job("pair", pods)], placement_gpu="spread"), ["allocate"])
    assert result.tasks["p0"].node == result.tasks["p1"].node


def test_sessions_without_preferred_terms_do_not_activate_the_scorers() -> None:
    snap = cluster(_nodes(2), [job("j", [task("j-0")])])
    engine = Session(snap).engine
    assert engine.task_scorers == [] and not engine.per_task_filters
    spec = task("k-0")
    spec.preferred_pod_anti_affinity = (_pod_term(1, HOST, {"a": "b"}),)
    snap = cluster(_nodes(2), [job("k", [spec])])
    assert Session(snap).engine.per_task_filters  # nothing shared between jobs alike then


# -- volumes -------------------------------------------------------------------------------
def _on_host(*hosts: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm((Requirement(HOST, "In", hosts),)),)


def test_bound_volume_node_affinity_restricts_the_nodes() -> None:
    spec = task("db", gpus=1)
    spec.volumes = VolumeConstraint(node_affinity=(_on_host("n2"),))
    result = run_session(cluster(_nodes(3), [job("db", [spec])]), ["allocate"])
    assert result.tasks["db"].node == "n2"


def test_two_volumes_must_both_be_reachable() -> None:
    spec = task("db", gpus=1)
    spec.volumes = VolumeConstraint(node_affinity=(_on_host("n1", "n2"), _on_host("n0", "n1")))
    result = run_session(cluster(_nodes(3), [job("db", [spec])]), ["allocate"])
    assert result.tasks["db"].node == "n1"


def test_unreachable_volume_leaves_the_pod_pending_with_node_counts() -> None:
    spec = task("db", gpus=1)
    spec.volumes = VolumeConstraint(node_affinity=(_on_host("gone"),))
    result = run_session(cluster(_nodes(3), [job("db", [spec])]), ["allocate"])
    assert result.tasks["db"].status.value == "Pending"
    (first,) = classify(result.job_reasons["db"])[:1]
    assert first.reason is PendingReason.NO_NODE_FITS
    assert "3 nodes: node(s) had volume node affinity conflict" in first.message


@pytest.mark.parametrize(
    ("volumes", "text"),
    [
        (VolumeConstraint(missing=("data",)), "pod's persistentvolumeclaim not found"),
        (VolumeConstraint(unbound=("data",)), "pod has unbound immediate PersistentVolumeClaims"),
    ],
)
def test_missing_or_unbound_claim_fits_no_node(volumes: VolumeConstraint, text: str) -> None:
    spec = task("db", gpus=1)
    spec.volumes = volumes
    result = run_session(cluster(_nodes(2), [job("db", [spec])]), ["allocate"])
    assert result.tasks["db"].status.value == "Pending"
    (first,) = classify(result.job_reasons["db"])[:1]
    assert first.reason is PendingReason.NO_NODE_FITS
    assert f"2 nodes: {text}" in first.message


def test_volume_masks_without_claims_filter_nothing() -> None:
    table = NodeTable(_nodes(2), ResourceLayout())
    index = predicates.LabelIndex(table)
    assert predicates.volume_masks(index, VolumeConstraint(), 2) == []
    masks = predicates.volume_masks(index, VolumeConstraint(node_affinity=(_on_host("n1"),)), 2)
    assert [(r, list(m)) for r, m in masks] == [(predicates.VOLUME_NODE_AFFINITY, [False, True])]
    assert np.all(~masks[0][1][:1])


def test_a_placed_task_being_moved_does_not_score_itself() -> None:
    domains = predicates.LabelIndex(NodeTable(_nodes(2), ResourceLayout())).domains
    placed = PlacedPods()
    me = task("me", labels={"app": "x"})
    me.preferred_pod_affinity = (_pod_term(10, HOST, {"app": "x"}),)
    placed.move(me, -1, 0)
    assert preferred_scores(me, placed, domains) is None
    twin = task("twin", labels={"app": "x"})
    twin.preferred_pod_affinity = me.preferred_pod_affinity
    placed.move(twin, -1, 0)
    # the twin selects me (+10) and I select the twin (+10); my own term counts once only
    scores = preferred_scores(me, placed, domains)
    assert scores is not None and list(scores) == [20.0, 0.0]
    placed.move(twin, 0, -1)
    placed.move(me, 0, -1)
    assert not placed.any_preferred_terms()
