"""Hypothesis properties of the fair-share division and the Proportion state.

Invariants checked, for random n-level trees (quotas -1 or >= 0 in halves, GPU amounts in
tenths, limits -1 or >= 0, weights 0-3, two priority levels, tied creation ranks, optional
usage), at every sibling set with amount T (the capacity at the top, else the parent's fair
share) and phase-1 grant P = sum of min(deserved (T if -1), min(limit, requested)):

(a) sum of the siblings' fair shares <= max(T, P), and every fair share >= its phase-1 grant:
    phases 2 and 3 only hand out T - P, and only when it is positive;
(b) every fair share <= min(limit, requested) (requested alone if the limit is -1), and >= 0;
(c) at the top level, sum of over-quota shares (fair - phase-1 grant) <= capacity - P when
    that is positive, 0 otherwise; and without usage the division is work-conserving: if
    something is left, every queue of positive weight has all it can take;
(d) the result is identical whatever the order of the input list and of the dicts;
(e) check_job_capacity agrees with a brute-force recomputation of the limit and
    non-preemptible-quota rules over the ancestor chain (allocated summed from the leaves).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st
from reclaim_oracle import oracle_verdict

from kai.scheduler.fairshare import EPS, Proportion, ReclaimJudge, ShareInput, divide, divide_level
from kai.scheduler.fairshare.reclaim import EMPTY_FAIR_SET, FairSet
from kai.scheduler.snapshot import MANAGED_RESOURCES, QueueResource, QueueSpec

Triple = tuple[float, float, float]
TOL = 1e-6

halves = st.integers(min_value=0, max_value=24).map(lambda x: x / 2)
tenths = st.integers(min_value=0, max_value=120).map(lambda x: x / 10)
quota_st = st.one_of(st.just(-1.0), halves)
limit_st = st.one_of(st.just(-1.0), st.just(-1.0), halves)
weight_st = st.sampled_from([0.0, 1.0, 1.0, 2.0, 3.0])


@dataclass
class Case:
    queues: list[QueueSpec]
    capacity: Triple
    leaf_requested: dict[str, Triple]
    leaf_allocated: dict[str, Triple]
    leaf_allocated_np: dict[str, Triple]
    k_value: float


@st.composite
def cases(draw: st.DrawFn, with_usage: bool = True) -> Case:
    n = draw(st.integers(min_value=1, max_value=10))
    queues: list[QueueSpec] = []
    for i in range(n):
        parent = (
            draw(st.one_of(st.none(), st.integers(min_value=0, max_value=i - 1))) if i else None
        )
        resources = {
            r: QueueResource(draw(quota_st), draw(limit_st), draw(weight_st))
            for r in MANAGED_RESOURCES
        }
        usage = (
            {r: draw(st.floats(0, 1)) for r in MANAGED_RESOURCES}
            if with_usage and draw(st.booleans())
            else {}
        )
        queues.append(
            QueueSpec(
                name=f"q{i}",
                parent=None if parent is None else f"q{parent}",
                priority=draw(st.sampled_from([100, 100, 200])),
                creation_rank=draw(st.integers(0, 3)),
                resources=resources,
                usage=usage,
            )
        )
    parents = {q.parent for q in queues}
    leaves = [q.name for q in queues if q.name not in parents]
    requested: dict[str, Triple] = {}
    allocated: dict[str, Triple] = {}
    allocated_np: dict[str, Triple] = {}
    for name in leaves:
        alloc = (draw(tenths), draw(halves), draw(halves))
        pending = (draw(tenths), draw(halves), draw(halves))
        requested[name] = (alloc[0] + pending[0], alloc[1] + pending[1], alloc[2] + pending[2])
        allocated[name] = alloc
        share = draw(st.sampled_from([0.0, 0.5, 1.0]))
        allocated_np[name] = (alloc[0] * share, alloc[1] * share, alloc[2] * share)
    capacity = (draw(tenths) * 3, draw(halves) * 3, draw(halves) * 3)
    k = draw(st.sampled_from([0.0, 1.0, 2.5]))
    return Case(queues, capacity, requested, allocated, allocated_np, k)


def rolled_up(queues: Sequence[QueueSpec], leaf: Mapping[str, Triple]) -> dict[str, list[float]]:
    """Independent roll-up: each queue sums every leaf figure whose parent chain reaches it."""
    parent = {q.name: q.parent for q in queues}
    totals = {q.name: [0.0, 0.0, 0.0] for q in queues}
    for name, v in sorted(leaf.items()):
        node: str | None = name
        while node is not None:
            for r in range(3):
                totals[node][r] += v[r]
            node = parent[node]
    return totals


def requestable(res: QueueResource, requested: float) -> float:
    return requested if res.limit == -1 else min(res.limit, requested)


def sibling_sets(queues: Sequence[QueueSpec]) -> dict[str | None, list[QueueSpec]]:
    sets: dict[str | None, list[QueueSpec]] = {}
    for q in queues:
        sets.setdefault(q.parent, []).append(q)
    return sets


def run_divide(case: Case) -> dict[str, dict[str, float]]:
    requested = rolled_up(case.queues, case.leaf_requested)
    return divide(case.queues, case.capacity, requested, case.k_value)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_division_invariants(case: Case) -> None:
    shares = run_divide(case)
    requested = rolled_up(case.queues, case.leaf_requested)
    for parent, siblings in sibling_sets(case.queues).items():
        for r, res_name in enumerate(MANAGED_RESOURCES):
            amount = max(0.0, case.capacity[r] if parent is None else shares[parent][res_name])
            grants = {}
            for q in siblings:
                res = q.resources[res_name]
                deserved = amount if res.quota == -1 else res.quota
                grants[q.name] = max(0.0, min(deserved, requestable(res, requested[q.name][r])))
            phase1 = sum(grants.values())
            total = sum(shares[q.name][res_name] for q in siblings)
            # (a)
            assert total <= max(amount, phase1) + TOL
            for q in siblings:
                fair = shares[q.name][res_name]
                assert fair >= grants[q.name] - TOL
                # (b)
                cap = requestable(q.resources[res_name], requested[q.name][r])
                assert 0 <= fair <= cap + TOL
                if q.resources[res_name].limit != -1:
                    assert fair <= q.resources[res_name].limit + TOL
            # (c)
            if parent is None:
                over_quota = total - phase1
                assert over_quota <= max(0.0, case.capacity[r] - phase1) + TOL


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 1.0]), weight_st, tenths, limit_st, st.integers(0, 2)),
        min_size=1,
        max_size=5,
    ),
    tenths,
)
def test_flat_fractional_levels_respect_requests_and_amount(
    rows: list[tuple[float, float, float, float, int]], amount: float
) -> None:
    """(a), (b) on single sibling sets with mostly zero quotas and fractional amounts, where
    the leftover hand-out is busiest."""
    queues = [
        ShareInput(f"q{i}", d, lim, w, 100, rank, req)
        for i, (d, w, req, lim, rank) in enumerate(rows)
    ]
    shares = divide_level(queues, amount)
    phase1 = sum(min(q.deserved, q.requestable) for q in queues)
    assert sum(shares.values()) <= max(amount, phase1) + TOL
    for q in queues:
        assert 0 <= shares[q.name] <= q.requestable + TOL


@settings(max_examples=100, deadline=None)
@given(cases(with_usage=False))
def test_division_is_work_conserving_without_usage(case: Case) -> None:
    shares = run_divide(case)
    requested = rolled_up(case.queues, case.leaf_requested)
    for parent, siblings in sibling_sets(case.queues).items():
        for r, res_name in enumerate(MANAGED_RESOURCES):
            amount = max(0.0, case.capacity[r] if parent is None else shares[parent][res_name])
            total = sum(shares[q.name][res_name] for q in siblings)
            if total < amount - TOL:
                for q in siblings:
                    res = q.resources[res_name]
                    if res.over_quota_weight > 0:
                        cap = requestable(res, requested[q.name][r])
                        assert shares[q.name][res_name] >= cap - TOL, (q.name, res_name)


@settings(max_examples=100, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_division_does_not_depend_on_input_order(case: Case, rnd: random.Random) -> None:
    first = run_divide(case)
    shuffled = Case(
        queues=rnd.sample(case.queues, len(case.queues)),
        capacity=case.capacity,
        leaf_requested=dict(
            rnd.sample(list(case.leaf_requested.items()), len(case.leaf_requested))
        ),
        leaf_allocated=case.leaf_allocated,
        leaf_allocated_np=case.leaf_allocated_np,
        k_value=case.k_value,
    )
    assert run_divide(shuffled) == first
    p1 = make(case)
    p2 = make(shuffled)
    assert p1.queue_shares() == p2.queue_shares()


def make(case: Case, enabled: bool = True) -> Proportion:
    return Proportion(
        case.queues,
        case.capacity,
        case.leaf_requested,
        case.leaf_allocated,
        case.leaf_allocated_np,
        case.k_value,
        enabled,
    )


def brute_capacity(
    case: Case, leaf: str, request: Triple, preemptible: bool
) -> tuple[str, str] | None:
    """First violation as (code, queue): limits over the whole chain first, then quotas."""
    specs = {q.name: q for q in case.queues}
    alloc = rolled_up(case.queues, case.leaf_allocated)
    alloc_np = rolled_up(case.queues, case.leaf_allocated_np)
    chain = []
    node: str | None = leaf
    while node is not None:
        chain.append(node)
        node = specs[node].parent
    for name in chain:
        for r, res_name in enumerate(MANAGED_RESOURCES):
            lim = specs[name].resources[res_name].limit
            if lim != -1 and request[r] != 0 and alloc[name][r] + request[r] > lim + EPS:
                return ("OverLimit", name)
    if preemptible:
        return None
    for name in chain:
        for r, res_name in enumerate(MANAGED_RESOURCES):
            quota = specs[name].resources[res_name].quota
            if quota != -1 and request[r] != 0 and alloc_np[name][r] + request[r] > quota + EPS:
                return ("NonPreemptibleOverQuota", name)
    return None


@settings(max_examples=100, deadline=None)
@given(cases(), st.data())
def test_capacity_check_matches_brute_force(case: Case, data: st.DataObject) -> None:
    p = make(case)
    leaf = data.draw(st.sampled_from(sorted(case.leaf_requested)))
    request = (data.draw(halves), data.draw(halves), data.draw(halves))
    preemptible = data.draw(st.booleans())
    reason = p.check_job_capacity(leaf, request, preemptible)
    expected = brute_capacity(case, leaf, request, preemptible)
    got = None if reason is None else (reason.code, str(reason.details["queue"]))
    assert got == expected
    assert make(case, enabled=False).check_job_capacity(leaf, request, preemptible) is None


@settings(max_examples=100, deadline=None)
@given(cases(), st.data())
def test_allocate_then_deallocate_restores_the_state(case: Case, data: st.DataObject) -> None:
    p = make(case)
    before = p.queue_shares()
    leaves = sorted(case.leaf_requested)
    ops = data.draw(
        st.lists(
            st.tuples(st.sampled_from(leaves), st.tuples(halves, halves, halves), st.booleans()),
            max_size=8,
        )
    )
    clone = p.clone()
    for leaf, res, preemptible in ops:
        p.on_allocate(leaf, res, preemptible)
    for leaf, res, preemptible in reversed(ops):
        p.on_deallocate(leaf, res, preemptible)
    after = p.queue_shares()
    for name in before:
        for field in ("allocated", "allocated_non_preemptible"):
            b, a = getattr(before[name], field), getattr(after[name], field)
            assert all(abs(a[r] - b[r]) < TOL for r in b)
    assert clone.queue_shares() == before


@settings(max_examples=100, deadline=None)
@given(cases(), st.data())
def test_queue_order_is_antisymmetric_and_keys_agree(case: Case, data: st.DataObject) -> None:
    p = make(case)
    sets = [s for s in sibling_sets(case.queues).values() if len(s) >= 2]
    if not sets:
        return
    siblings = data.draw(st.sampled_from(sets))
    a, b = data.draw(st.permutations([s.name for s in siblings]))[:2]
    ja = (data.draw(halves), data.draw(halves), data.draw(halves))
    jb = (data.draw(halves), data.draw(halves), data.draw(halves))
    ab = p.compare_queues(a, b, ja, jb)
    assert ab in (-1, 1)
    assert p.compare_queues(b, a, jb, ja) == -ab
    ka, kb = p.order_key(a, ja), p.order_key(b, jb)
    assert (ka < kb) == (ab == -1) and (kb < ka) == (ab == 1)


@settings(max_examples=100, deadline=None)
@given(cases(), st.data())
def test_reclaim_verdict_does_not_depend_on_the_order_of_victim_queues(
    case: Case, data: st.DataObject
) -> None:
    p = make(case)
    leaves = sorted(case.leaf_requested)
    reclaimer = data.draw(st.sampled_from(leaves))
    request = (data.draw(halves), data.draw(halves), data.draw(halves))
    victims = data.draw(
        st.lists(st.tuples(st.sampled_from(leaves), st.tuples(halves, halves, halves)), max_size=6)
    )
    # interleave queues differently while keeping each queue's own chunk order
    by_queue: dict[str, list[tuple[str, Triple]]] = {}
    for v in victims:
        by_queue.setdefault(v[0], []).append(v)
    regrouped = [v for name in sorted(by_queue, reverse=True) for v in by_queue[name]]
    preemptible = data.draw(st.booleans())
    verdict = p.judge_reclaim(reclaimer, request, victims, preemptible)
    assert p.judge_reclaim(reclaimer, request, regrouped, preemptible) == verdict


@settings(max_examples=300, deadline=None)
@given(cases(), st.data())
def test_the_judge_gives_the_oracle_verdict_and_message(case: Case, data: st.DataObject) -> None:
    """``ReclaimJudge.verdict`` (the incremental rules folded from the empty set) gives the
    from-scratch oracle's verdict, refusal text included, whatever the victims' order."""
    p = make(case, enabled=data.draw(st.sampled_from([True, True, True, False])))
    leaves = sorted(case.leaf_requested)
    reclaimer = data.draw(st.sampled_from(leaves))
    request = (data.draw(halves), data.draw(halves), data.draw(halves))
    victims = data.draw(
        st.lists(
            st.tuples(st.sampled_from(leaves), st.tuples(tenths, tenths, tenths), st.booleans()),
            max_size=8,
        )
    )
    preemptible = data.draw(st.booleans())
    expected = oracle_verdict(p, reclaimer, request, victims, preemptible)
    assert p.judge_reclaim(reclaimer, request, victims, preemptible) == expected
    judge = ReclaimJudge(p, reclaimer, request, preemptible)
    assert (judge.judge(victims) is not None) == expected.ok
    assert judge.verdict(victims, explain=False).ok == expected.ok


@settings(max_examples=300, deadline=None)
@given(cases(), st.data())
def test_fair_sets_grown_chunk_by_chunk_agree_with_the_oracle(
    case: Case, data: st.DataObject
) -> None:
    """reclaim's incremental verdicts (``ReclaimJudge.grow`` from the last fair set) are the
    verdicts the from-scratch oracle gives every grown set, and the grown state is the one the
    fold from the empty set reaches."""
    # integral amounts take grow's out-of-order path, tenths its in-order one only
    integral = data.draw(st.booleans())
    if integral:
        whole = {
            name: (math.floor(a[0]), math.floor(a[1]), math.floor(a[2]))
            for name, a in case.leaf_allocated.items()
        }
        case = replace(
            case,
            leaf_allocated={k: (float(a), float(b), float(c)) for k, (a, b, c) in whole.items()},
            leaf_allocated_np={
                k: (float(math.floor(a)), float(math.floor(b)), float(math.floor(c)))
                for k, (a, b, c) in case.leaf_allocated_np.items()
            },
        )
    p = make(case, enabled=data.draw(st.sampled_from([True, True, True, False])))
    leaves = sorted(case.leaf_requested)
    reclaimer = data.draw(st.sampled_from(leaves))
    request = (data.draw(halves), data.draw(halves), data.draw(halves))
    preemptible = data.draw(st.booleans())
    judge = ReclaimJudge(p, reclaimer, request, preemptible)
    amounts = st.integers(min_value=0, max_value=12).map(lambda x: x / 4) if integral else tenths
    candidates = data.draw(
        st.lists(
            st.tuples(st.sampled_from(leaves), st.tuples(amounts, amounts, amounts), st.booleans()),
            max_size=8,
        )
    )
    taken: list[tuple[str, Triple, bool]] = []
    base: FairSet | None = EMPTY_FAIR_SET
    for chunk in candidates:
        grown_list = [*taken, chunk]
        expected = oracle_verdict(p, reclaimer, request, grown_list, preemptible, explain=False).ok
        scratch = judge.judge(grown_list)
        assert (scratch is not None) == expected
        if base is not None:
            grown = judge.grow(base, chunk)
            assert (grown is not None) == expected
            assert grown == scratch  # the same sums, exactly
        if expected or data.draw(st.booleans()):
            # reclaim grows only fair sets; an unfair one is kept now and then to be judged
            # from scratch at the next step
            taken = grown_list
            base = scratch


def test_fair_sets_grown_out_of_queue_order_agree_with_the_oracle() -> None:
    """Over-served victim queues (most growths fair) with chunks in any queue order: grow's
    out-of-order path (exact quarter amounts) must be taken often and agree with the oracle
    every time."""
    rnd = random.Random(7)
    out_of_order = 0
    for _ in range(200):
        queues = [
            QueueSpec(name="a", parent=None, resources=_quota(rnd.choice([2.0, 4.0]))),
            QueueSpec(name="b", parent=None, resources=_quota(rnd.choice([2.0, 4.0]))),
        ]
        leaves = []
        for i in range(6):
            parent = rnd.choice(["a", "b", None])
            queues.append(
                QueueSpec(name=f"l{i}", parent=parent, resources=_quota(rnd.choice([0.0, 1.0])))
            )
            leaves.append(f"l{i}")
        allocated = {
            name: (rnd.randint(0, 16) / 4, float(rnd.randint(0, 8)), float(rnd.randint(0, 8)))
            for name in leaves
        }
        allocated[leaves[0]] = (0.0, 0.0, 0.0)
        case = Case(
            queues,
            (40.0, 40.0, 40.0),
            {n: (a[0] + 2, a[1] + 2, a[2] + 2) for n, a in allocated.items()},
            allocated,
            {n: (0.0, 0.0, 0.0) for n in leaves},
            rnd.choice([0.0, 1.0]),
        )
        p = make(case)
        reclaimer, request, preemptible = leaves[0], (1.0, 1.0, 1.0), rnd.random() < 0.7
        judge = ReclaimJudge(p, reclaimer, request, preemptible)
        taken: list[tuple[str, Triple, bool]] = []
        base = EMPTY_FAIR_SET
        for _ in range(10):
            chunk = (
                rnd.choice(leaves[1:]),
                (rnd.randint(0, 4) / 4, float(rnd.randint(0, 2)), float(rnd.randint(0, 2))),
                rnd.random() < 0.5,
            )
            grown_list = [*taken, chunk]
            expected = oracle_verdict(p, reclaimer, request, grown_list, preemptible).ok
            scratch = judge.judge(grown_list)
            assert (scratch is not None) == expected
            assert base.exact  # exact amounts, leaf queues: always
            if p.tree.lookup(chunk[0]) < base.last:
                out_of_order += 1
            grown = judge.grow(base, chunk)
            assert (grown is not None) == expected
            assert grown == scratch
            if grown is not None:
                assert [c.queue for c in grown.chunks()] == [c[0] for c in grown_list]
                taken, base = grown_list, grown
    assert out_of_order > 200


def _quota(gpu: float) -> dict[str, QueueResource]:
    return {r: QueueResource(gpu if r == "gpu" else -1.0, -1.0, 1.0) for r in MANAGED_RESOURCES}
