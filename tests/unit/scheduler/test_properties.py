"""Hypothesis properties of allocate over random clusters and queue trees:
no node over-committed (now, and after releases, devices included); a gang is placed whole or
not at all; no queue or ancestor pushed over its limit; the same snapshot (in any input order)
gives the same decisions."""

from __future__ import annotations

import copy
import random
from collections import defaultdict

from builders import cluster, job, node, queue, task
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.scheduler.session import run_session
from kai.scheduler.snapshot import Snapshot, TaskSpec

HOLD = {"Running", "Binding", "Allocated", "Bound", "Releasing"}
FUTURE = {"Running", "Binding", "Allocated", "Bound", "Pipelined"}
ACTIVE = FUTURE


def _random_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    nodes = []
    free: dict[str, list[float]] = {}
    for i in range(rng.randint(1, 5)):
        gpus = rng.choice([0, 1, 2, 4, 8])
        cpu = rng.choice([4000, 8000, 16000])
        nodes.append(
            node(f"n{i}", gpus=gpus, cpu=cpu, memory=64e9, max_pods=rng.choice([3, 8, 110]))
        )
        free[f"n{i}"] = [gpus, cpu, nodes[-1].max_pods]
    queues = [queue("dept", gpu=(-1, rng.choice([-1, 4, 8]), 1))]
    leaves = []
    for k in range(rng.randint(1, 3)):
        limit = rng.choice([-1, -1, 2, 3, 6])
        cpu_limit = rng.choice([-1, -1, 2500, 6000])
        queues.append(
            queue(
                f"q{k}",
                parent="dept",
                gpu=(rng.choice([0, 1, 2, -1]), limit, 1),
                cpu=(-1, cpu_limit, 1),
            )
        )
        leaves.append(f"q{k}")
    jobs = []
    for j in range(rng.randint(1, 7)):
        size = rng.randint(1, 4)
        tasks: list[TaskSpec] = []
        for t in range(size):
            kind = rng.random()
            name = f"j{j}-{t}"
            status, where = "Pending", None
            gpus = rng.choice([0, 1, 1, 2])
            cpu = rng.choice([500, 1000, 3000])
            if kind < 0.25 and j % 2 == 0:
                # a running or releasing whole-GPU task that really fits
                for n, (g, c, p) in free.items():
                    if g >= gpus and c >= cpu and p >= 1:
                        free[n] = [g - gpus, c - cpu, p - 1]
                        status, where = rng.choice(["Running", "Releasing"]), n
                        break
                tasks.append(task(name, gpus=gpus, cpu=cpu, status=status, node_name=where))
            elif kind < 0.45:
                tasks.append(task(name, fraction=rng.choice([0.25, 0.5, 0.75]), cpu=cpu))
            else:
                tasks.append(task(name, gpus=gpus, cpu=cpu))
        minimum = rng.randint(0, size)
        jobs.append(
            job(
                f"j{j}",
                tasks,
                queue_name=rng.choice(leaves),
                priority=rng.choice([50, 75, 100]),
                min_available=minimum,
                age=rng.randint(0, 30),
            )
        )
    return cluster(
        nodes,
        jobs,
        queues=queues,
        placement_gpu=rng.choice(["binpack", "spread"]),
        gpu_sharing_placement=rng.choice(["pack", "spread"]),
    )


def _outcome(snap: Snapshot) -> dict[str, tuple[str, str | None, tuple[str, ...]]]:
    result = run_session(snap, ["allocate"])
    return {k: (v.status.value, v.node, v.gpu_groups) for k, v in result.tasks.items()}


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_allocate_invariants(seed: int) -> None:
    snap = _random_snapshot(seed)
    before = {t.uid: t.status.value for j in snap.jobs for t in j.tasks}
    out = _outcome(snap)
    specs = {t.uid: t for j in snap.jobs for t in j.tasks}
    jobs = {j.uid: j for j in snap.jobs}
    nodes = {n.name: n for n in snap.nodes}

    # 1. no node over-committed, now (holding statuses) and after releases (future statuses)
    for statuses in (HOLD, FUTURE):
        gpus: dict[str, float] = defaultdict(float)
        cpu: dict[str, float] = defaultdict(float)
        pods: dict[str, int] = defaultdict(int)
        device_memory: dict[tuple[str, str], float] = defaultdict(float)
        devices: dict[str, set[str]] = defaultdict(set)
        for uid, (status, where, groups) in out.items():
            if where is None:
                continue
            spec = specs[uid]
            if spec.gpu.is_shared:
                devices[where].update(groups)  # a device occupies a GPU in every state
            if status not in statuses:
                continue
            cpu[where] += spec.cpu_millis
            pods[where] += 1
            if spec.gpu.is_shared:
                for g in groups:
                    device_memory[(where, g)] += (spec.gpu.fraction or 0) * nodes[
                        where
                    ].gpu_memory_mib
            else:
                gpus[where] += spec.gpu.whole
        for name, n in nodes.items():
            assert gpus[name] + (len(devices[name]) if statuses is FUTURE else 0) <= n.gpus + 1e-9
            assert cpu[name] <= n.cpu_millis + 1e-6
            assert pods[name] <= n.max_pods
        for (name, _), used in device_memory.items():
            assert used <= nodes[name].gpu_memory_mib + 1e-6

    # 2. a job that got new tasks reaches its gang minimum (placed whole or not at all)
    for j in snap.jobs:
        new = [
            t
            for t in j.tasks
            if out[t.uid][0] in ("Binding", "Pipelined") and before[t.uid] == "Pending"
        ]
        if new:
            active = sum(1 for t in j.tasks if out[t.uid][0] in ACTIVE)
            assert active >= (j.min_available or 0)

    # 3. no queue or ancestor pushed over its GPU or CPU limit by this session
    parents = {q.name: q.parent for q in snap.queues}
    for resource in ("gpu", "cpu"):
        limit = {q.name: q.resources[resource].limit for q in snap.queues}
        used_before: dict[str, float] = defaultdict(float)
        used_after: dict[str, float] = defaultdict(float)
        for uid, spec in specs.items():
            if resource == "gpu":
                amount = spec.gpu.whole + (spec.gpu.fraction or 0)
            else:
                amount = spec.cpu_millis
            q: str | None = jobs[spec.job].queue
            while q is not None:
                if before[uid] in ACTIVE:
                    used_before[q] += amount
                if out[uid][0] in ACTIVE:
                    used_after[q] += amount
                q = parents[q]
        for name, cap in limit.items():
            if cap != -1 and used_after[name] > used_before[name] + 1e-9:
                assert used_after[name] <= cap + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_same_snapshot_same_decisions_in_any_input_order(seed: int) -> None:
    snap = _random_snapshot(seed)
    first = _outcome(snap)
    assert _outcome(snap) == first
    shuffled = copy.deepcopy(snap)
    rng = random.Random(seed)
    rng.shuffle(shuffled.nodes)
    rng.shuffle(shuffled.queues)
    rng.shuffle(shuffled.jobs)
    for j in shuffled.jobs:
        rng.shuffle(j.tasks)
    assert _outcome(shuffled) == first
    a = run_session(snap, ["allocate"])
    b = run_session(shuffled, ["allocate"])
    assert (a.binds, a.pipelined, a.job_reasons) == (b.binds, b.pipelined, b.job_reasons)


def _affinity_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    nodes = [
        node(
            f"n{i}",
            gpus=rng.choice([1, 2, 4]),
            labels={"kubernetes.io/hostname": f"n{i}", "zone": f"z{i % 2}"},
        )
        for i in range(rng.randint(2, 5))
    ]
    jobs = []
    for j in range(rng.randint(1, 6)):
        tasks: list[TaskSpec] = []
        for t in range(rng.randint(1, 3)):
            kind = rng.random()
            name = f"j{j}-{t}"
            if kind < 0.2:
                where = rng.choice(nodes).name
                tasks.append(
                    task(name, gpus=0, status="Running", node_name=where, labels={"app": "b"})
                )
            elif kind < 0.55:
                tasks.append(
                    task(
                        name,
                        labels={"app": "a"},
                        pod_anti_affinity=("kubernetes.io/hostname", {"app": "a"}),
                    )
                )
            elif kind < 0.8:
                tasks.append(task(name, labels={"app": "c"}, pod_affinity=("zone", {"app": "b"})))
            else:
                tasks.append(task(name, labels={"app": rng.choice(["a", "b"])}))
        jobs.append(
            job(f"j{j}", tasks, min_available=rng.randint(0, len(tasks)), age=rng.randint(0, 9))
        )
    return cluster(nodes, jobs)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9))
def test_pod_affinity_and_anti_affinity_hold(seed: int) -> None:
    snap = _affinity_snapshot(seed)
    out = _outcome(snap)
    specs = {t.uid: t for j in snap.jobs for t in j.tasks}
    labels = {n.name: n.labels for n in snap.nodes}
    placed = {uid: v[1] for uid, v in out.items() if v[1] is not None}
    for uid, where in placed.items():
        spec = specs[uid]
        for term in spec.pod_anti_affinity:
            domain = labels[where][term.topology_key]
            for other, there in placed.items():
                if other == uid or labels[there][term.topology_key] != domain:
                    continue
                assert not all(specs[other].labels.get(k) == v for k, v in term.match_labels)
        for term in spec.pod_affinity:
            domain = labels[where][term.topology_key]
            assert any(
                labels[there][term.topology_key] == domain
                and all(specs[other].labels.get(k) == v for k, v in term.match_labels)
                for other, there in placed.items()
                if other != uid
            )


def _subgroup_snapshot(seed: int) -> Snapshot:
    from kai.scheduler.snapshot import SubGroupSpec

    rng = random.Random(seed)
    nodes = [node(f"n{i}", gpus=rng.choice([1, 2, 4])) for i in range(rng.randint(1, 4))]
    jobs = []
    for j in range(rng.randint(1, 5)):
        leaves = [f"l{k}" for k in range(rng.randint(1, 3))]
        subgroups = []
        tasks: list[TaskSpec] = []
        for leaf in leaves:
            size = rng.randint(1, 3)
            subgroups.append(SubGroupSpec(leaf, None, min_available=rng.randint(0, size)))
            tasks += [task(f"j{j}-{leaf}-{t}", subgroup=leaf) for t in range(size)]
        minimum = rng.choice([None, *range(len(leaves) + 1)])
        jobs.append(job(f"j{j}", tasks, subgroups=subgroups, min_subgroup=minimum, age=j))
    return cluster(nodes, jobs)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9))
def test_subgroup_gangs_reach_their_threshold_or_get_nothing(seed: int) -> None:
    snap = _subgroup_snapshot(seed)
    out = _outcome(snap)
    for j in snap.jobs:
        placed = [t for t in j.tasks if out[t.uid][0] in ACTIVE]
        if not placed:
            continue
        satisfied = 0
        for sg in j.subgroups:
            active = sum(1 for t in placed if t.subgroup == sg.name)
            satisfied += active >= (sg.min_available or 0)
        threshold = len(j.subgroups) if j.min_subgroup is None else j.min_subgroup
        assert satisfied >= threshold
