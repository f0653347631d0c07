"""kai.scheduler.topology: trees, aliases, candidate domains, preferred-level scores."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kai.scheduler.snapshot import TopologyConstraint, TopologySpec
from kai.scheduler.topology import (
    ROOT_LEVEL,
    TopologyError,
    build_topologies,
    build_topology,
    candidate_domains,
    domains_of,
    preferred_level_scores,
    resolve_constraint,
)

ZONE, RACK = "k8s.io/zone", "k8s.io/rack"
SPEC = TopologySpec("t", [ZONE, RACK], aliases={"zone": ZONE, "rack": RACK})

# n0..n3 in zone a (racks r1: n0 n1, r2: n2 n3), n4 n5 in zone b rack r1, n6 has no rack label.
LABELS = [
    {ZONE: "a", RACK: "r1"},
    {ZONE: "a", RACK: "r1"},
    {ZONE: "a", RACK: "r2"},
    {ZONE: "a", RACK: "r2"},
    {ZONE: "b", RACK: "r1"},
    {ZONE: "b", RACK: "r1"},
    {ZONE: "b"},
]


def tree():  # type: ignore[no-untyped-def]
    return build_topology(SPEC, LABELS)


def resolve(required: str | None = None, preferred: str | None = None):  # type: ignore[no-untyped-def]
    return resolve_constraint({"t": tree()}, TopologyConstraint("t", required, preferred))


def free(*gpus: float) -> np.ndarray:
    """One resource column (GPUs) per node."""
    return np.asarray(gpus, dtype=np.float64).reshape(-1, 1)


def tasks(*gpus: float) -> np.ndarray:
    return np.asarray(gpus, dtype=np.float64).reshape(-1, 1)


ALL = np.ones(7, dtype=bool)


def test_domain_ids_join_label_values_from_the_top() -> None:
    t = tree()
    assert t.domain_ids[0] == ["a", "b"]
    assert t.domain_ids[1] == ["a.r1", "a.r2", "b.r1"]
    assert t.level_domain[1].tolist() == [0, 0, 1, 1, 2, 2, -1]
    assert t.domain_parent[1].tolist() == [0, 0, 1]


def test_node_lacking_a_level_label_is_outside() -> None:
    t = tree()
    assert t.inside.tolist() == [True] * 6 + [False]
    assert t.level_domain[0][6] == -1


def test_same_rack_name_in_two_zones_is_two_domains() -> None:
    assert domains_of(tree(), 1, [0, 4]) == {"a.r1", "b.r1"}
    assert domains_of(tree(), 1, [0, 6]) == {"a.r1", "<outside>"}


def test_aliases_and_raw_labels_resolve_to_the_same_level() -> None:
    assert resolve("rack").required == resolve(RACK).required == 1
    assert resolve(preferred="zone").preferred == 0


def test_unknown_topology_is_a_clear_error() -> None:
    with pytest.raises(TopologyError, match="Requested topology 'nope' does not exist") as info:
        resolve_constraint({}, TopologyConstraint("nope", RACK))
    assert info.value.code == "TopologyDoesNotExist"


def test_unknown_level_names_the_levels_and_aliases() -> None:
    with pytest.raises(
        TopologyError, match=re.escape("'k8s.io/row' is not a level of topology 't'")
    ) as info:
        resolve("k8s.io/row")
    assert info.value.code == "TopologyLevelDoesNotExist"
    assert "aliases: rack, zone" in str(info.value)


def test_preferred_not_below_required_is_dropped() -> None:
    r = resolve(required=RACK, preferred=ZONE)
    assert (r.required, r.preferred) == (1, None)


def test_constraint_without_levels_is_no_constraint() -> None:
    assert resolve_constraint({"t": tree()}, TopologyConstraint("t")) is None


def test_required_level_only_gives_that_level_fullest_first() -> None:
    # rack a.r2 has 2 free GPUs, a.r1 4, b.r1 8: all fit 2 tasks of 1 GPU; fullest first.
    got = candidate_domains(resolve(RACK), ALL, free(2, 2, 1, 1, 4, 4, 8), tasks(1, 1))
    assert [c.domain for c in got] == ["a.r2", "a.r1", "b.r1"]
    assert got[0].nodes.tolist() == [2, 3]
    assert {c.level for c in got} == {1}


def test_domains_that_cannot_fit_are_not_candidates() -> None:
    got = candidate_domains(resolve(RACK), ALL, free(2, 2, 1, 1, 4, 4, 8), tasks(2, 2))
    assert [c.domain for c in got] == ["a.r1", "b.r1"]


def test_homogeneous_tasks_use_per_node_pod_counts() -> None:
    # Rack a.r2 has 3 GPUs in total but 1.5 + 1.5: no node holds a 2-GPU task.
    got = candidate_domains(resolve(RACK), ALL, free(0, 0, 1.5, 1.5, 2, 0, 9), tasks(2))
    assert [c.domain for c in got] == ["b.r1"]


def test_heterogeneous_tasks_use_the_ratio_test() -> None:
    two = np.asarray([[0, 0], [0, 0], [1.5, 4], [1.5, 4], [2, 0], [0, 0], [0, 0]], dtype=float)
    reqs = np.asarray([[2.0, 0.0], [0.0, 4.0]])  # one GPU task, one CPU-only task
    got = candidate_domains(resolve(RACK), ALL, two, reqs)
    assert [c.domain for c in got] == ["a.r2"]  # b.r1 has no cpu column at all


def test_preferred_only_goes_from_preferred_level_up_to_root() -> None:
    got = candidate_domains(resolve(preferred=RACK), ALL, free(1, 1, 1, 1, 2, 2, 9), tasks(1, 1, 1))
    assert [(c.level, c.domain) for c in got] == [(1, "b.r1"), (0, "a"), (0, "b"), (-1, "root")]
    assert got[-1].nodes.tolist() == [0, 1, 2, 3, 4, 5]  # node 6 is outside


def test_required_and_preferred_go_from_preferred_up_to_required() -> None:
    got = candidate_domains(
        resolve(required=ZONE, preferred=RACK), ALL, free(1, 1, 1, 1, 2, 2, 0), tasks(1, 1, 1)
    )
    assert [(c.level, c.domain) for c in got] == [(1, "b.r1"), (0, "a"), (0, "b")]
    assert ROOT_LEVEL not in {c.level for c in got}


def test_within_a_level_siblings_sort_under_their_parents() -> None:
    labels = [
        {ZONE: "a", RACK: "r1"},
        {ZONE: "a", RACK: "r2"},
        {ZONE: "b", RACK: "r3"},
        {ZONE: "b", RACK: "r4"},
    ]
    t = build_topology(SPEC, labels)
    r = resolve_constraint({"t": t}, TopologyConstraint("t", RACK))
    assert r is not None
    # Zone b is fuller (3 free) than zone a (8 free), so both its racks come before a's racks.
    got = candidate_domains(r, np.ones(4, dtype=bool), free(4, 4, 2, 1), tasks(1))
    assert [c.domain for c in got] == ["b.r4", "b.r3", "a.r1", "a.r2"]


def test_running_tasks_confine_a_required_job_to_its_domain() -> None:
    got = candidate_domains(
        resolve(RACK), ALL, free(2, 2, 1, 1, 4, 4, 8), tasks(1), running_nodes=[4]
    )
    assert [c.domain for c in got] == ["b.r1"]


def test_running_tasks_do_not_confine_a_preferred_only_job() -> None:
    got = candidate_domains(resolve(preferred=RACK), ALL, free(1, 1, 1, 1, 1, 1, 0), tasks(1), [4])
    assert "a.r1" in [c.domain for c in got]


def test_usable_mask_restricts_candidates() -> None:
    usable = np.asarray([False, True, False, False, True, True, True])
    got = candidate_domains(resolve(RACK), usable, free(1, 1, 1, 1, 1, 1, 1), tasks(1))
    assert [(c.domain, c.nodes.tolist()) for c in got] == [("a.r1", [1]), ("b.r1", [4, 5])]


def test_no_domain_fits_is_a_clear_error() -> None:
    with pytest.raises(
        TopologyError, match=re.escape("no domain of topology t (required level k8s.io/rack)")
    ) as info:
        candidate_domains(
            resolve(RACK), ALL, free(1, 1, 1, 1, 1, 1, 9), tasks(1, 1, 1), subject="job j"
        )
    assert info.value.code == "NoTopologyDomainFits"
    assert "job j (3 task(s))" in str(info.value)


def test_only_outside_nodes_is_a_clear_error() -> None:
    only_outside = np.asarray([False] * 6 + [True])
    with pytest.raises(TopologyError, match="no usable node"):
        candidate_domains(resolve(RACK), only_outside, free(*[9] * 7), tasks(1))


def test_best_effort_tasks_fit_anywhere_inside() -> None:
    got = candidate_domains(resolve(RACK), ALL, free(0, 0, 0, 0, 0, 0, 0), tasks(0, 0))
    assert len(got) == 3


def test_preferred_scores_favour_the_subdomain_with_most_room() -> None:
    r = resolve(required=ZONE, preferred=RACK)
    cand = candidate_domains(r, ALL, free(1, 1, 3, 3, 0, 0, 0), tasks(1, 1))
    zone_a = next(c for c in cand if c.domain == "a")
    scores = preferred_level_scores(r, zone_a, free(1, 1, 3, 3, 0, 0, 0), tasks(1, 1))
    # a.r1 (2 free) is fuller: i=1 of 2 -> 50,000; a.r2 (6 free): i=2 -> 100,000.
    assert scores.tolist() == [50_000, 50_000, 100_000, 100_000, 0, 0, 0]


def test_preferred_scores_are_flat_within_a_preferred_domain() -> None:
    r = resolve(preferred=RACK)
    cand = candidate_domains(r, ALL, free(1, 1, 3, 3, 0, 0, 0), tasks(1))
    scores = preferred_level_scores(r, cand[0], free(1, 1, 3, 3, 0, 0, 0), tasks(1))
    assert len(set(scores[cand[0].nodes].tolist())) == 1


def test_build_topologies_by_name() -> None:
    trees = build_topologies([SPEC, TopologySpec("u", [RACK])], LABELS)
    assert set(trees) == {"t", "u"}
    assert trees["u"].domain_ids[0] == ["r1", "r2"]  # rack alone: r1 of both zones merges
    assert trees["u"].inside.tolist() == [True] * 6 + [False]


def test_vectorised_build_scales() -> None:
    labels = [{ZONE: f"z{i // 256}", RACK: f"r{i // 16}"} for i in range(4096)]
    t = build_topology(SPEC, labels)
    assert len(t.domain_ids[1]) == 256
    r = resolve_constraint({"t": t}, TopologyConstraint("t", RACK))
    assert r is not None
    got = candidate_domains(r, np.ones(4096, dtype=bool), np.full((4096, 1), 8.0), tasks(*[8] * 16))
    assert len(got) == 256
