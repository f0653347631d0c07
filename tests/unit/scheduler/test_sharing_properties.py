"""Properties of GPU sharing and topology placement over random clusters (hypothesis).

- The shares on any device never add up to more than one device, and a device holding shared
  tasks is never also counted as a whole GPU of a whole-GPU task (whole GPUs + shared devices of
  a node never exceed its GPUs).
- A job (or subgroup) with a required topology level never spans two domains of that level and
  never lands on a node outside the topology.
"""

from __future__ import annotations

from collections import defaultdict

from builders import cluster, job, node, task  # type: ignore[import-not-found]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.scheduler.session import run_session
from kai.scheduler.snapshot import (
    PLACED_STATUSES,
    SubGroupSpec,
    TaskSpec,
    TaskStatus,
    TopologyConstraint,
    TopologySpec,
)

ZONE, RACK = "k8s.io/zone", "k8s.io/rack"
EPS = 1e-6

gpu_request = st.one_of(
    st.builds(lambda n: {"gpus": n}, st.integers(0, 2)),
    st.builds(
        lambda f, d: {"fraction": f, "num_devices": d},
        st.sampled_from([0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.75, 0.9]),
        st.sampled_from([1, 1, 1, 2]),
    ),
    st.builds(
        lambda m, d: {"gpu_memory": m, "num_devices": d},
        st.sampled_from([10, 25, 40, 50, 70, 100]),
        st.sampled_from([1, 1, 2]),
    ),
)


@st.composite
def sharing_cluster(draw):  # type: ignore[no-untyped-def]
    nodes = [
        node(
            f"n{i}", gpus=draw(st.integers(0, 4)), gpu_memory=100, max_pods=draw(st.integers(2, 8))
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    jobs = []
    for j in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 3))
        tasks = [task(f"j{j}-{i}", **draw(gpu_request)) for i in range(size)]
        jobs.append(job(f"j{j}", tasks, min_available=draw(st.integers(1, size)), age=10 - j))
    return cluster(nodes, jobs)


def _share(spec: TaskSpec, device_memory: float) -> float:
    if spec.gpu.fraction is not None:
        return spec.gpu.fraction
    return (spec.gpu.memory_mib or 0.0) / device_memory


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sharing_cluster())
def test_device_shares_never_exceed_one_and_never_mix_with_whole_gpus(snap) -> None:  # type: ignore[no-untyped-def]
    result = run_session(snap)
    specs = {t.uid: t for j in snap.jobs for t in j.tasks}
    gpus = {n.name: n.gpus for n in snap.nodes}
    per_device: dict[str, float] = defaultdict(float)
    whole: dict[str, int] = defaultdict(int)
    devices: dict[str, set[str]] = defaultdict(set)
    for uid, outcome in result.tasks.items():
        if outcome.status not in PLACED_STATUSES | {TaskStatus.BINDING} or outcome.node is None:
            continue
        spec = specs[uid]
        if spec.gpu.is_shared:
            assert len(outcome.gpu_groups) == spec.gpu.num_devices
            assert len(set(outcome.gpu_groups)) == spec.gpu.num_devices
            for group in outcome.gpu_groups:
                assert group.startswith(outcome.node + "/")
                per_device[group] += _share(spec, 100.0)
                devices[outcome.node].add(group)
        else:
            assert outcome.gpu_groups == ()
            whole[outcome.node] += spec.gpu.whole
    for group, share in per_device.items():
        assert share <= 1 + EPS, f"device {group} holds {share}"
    for name, count in gpus.items():
        assert whole[name] + len(devices[name]) <= count, name


@st.composite
def topology_cluster(draw):  # type: ignore[no-untyped-def]
    nodes = []
    for i in range(draw(st.integers(2, 8))):
        labels: dict[str, str] = {}
        if draw(st.integers(0, 9)) > 0:  # one node in ten is outside the topology
            labels = {
                ZONE: draw(st.sampled_from(["z1", "z2"])),
                RACK: draw(st.sampled_from(["r1", "r2"])),
            }
        nodes.append(node(f"n{i}", gpus=draw(st.integers(1, 4)), labels=labels))
    jobs = []
    for j in range(draw(st.integers(1, 5))):
        size = draw(st.integers(1, 4))
        level = draw(st.sampled_from([ZONE, RACK]))
        if draw(st.booleans()):
            tasks = [task(f"j{j}-{i}", **draw(gpu_request)) for i in range(size)]
            spec = job(f"j{j}", tasks, min_available=draw(st.integers(1, size)), age=10 - j)
            spec.topology = TopologyConstraint("t", level, draw(st.sampled_from([None, RACK])))
        else:  # two leaves, each with a required rack, under a root that requires a zone
            tasks = [
                task(f"j{j}-{i}", subgroup=f"s{i % 2}", **draw(gpu_request)) for i in range(size)
            ]
            leaves = [
                SubGroupSpec(
                    f"s{k}",
                    None,
                    1 if any(t.subgroup == f"s{k}" for t in tasks) else 0,
                    topology=TopologyConstraint("t", RACK),
                )
                for k in range(2)
            ]
            spec = job(f"j{j}", tasks, subgroups=leaves, age=10 - j)
            spec.topology = TopologyConstraint("t", ZONE)
        jobs.append(spec)
    snap = cluster(nodes, jobs)
    snap.topologies = [TopologySpec("t", [ZONE, RACK])]
    return snap


def _domain(labels: dict[str, str], level: str) -> str | None:
    if ZONE not in labels or RACK not in labels:
        return None
    return labels[ZONE] if level == ZONE else f"{labels[ZONE]}.{labels[RACK]}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology_cluster())
def test_required_level_never_spans_two_domains(snap) -> None:  # type: ignore[no-untyped-def]
    result = run_session(snap)
    labels = {n.name: n.labels for n in snap.nodes}
    for spec in snap.jobs:
        groups: dict[tuple[str, str], set[str | None]] = defaultdict(set)
        for t in spec.tasks:
            outcome = result.tasks[t.uid]
            if outcome.node is None:
                continue
            node_labels = labels[outcome.node]
            assert spec.topology is not None
            if spec.topology.required_level:
                groups[("job", spec.topology.required_level)].add(
                    _domain(node_labels, spec.topology.required_level)
                )
            if t.subgroup is not None:
                groups[(t.subgroup, RACK)].add(_domain(node_labels, RACK))
        for key, domains in groups.items():
            assert None not in domains, f"{spec.name} {key}: a node outside the topology"
            assert len(domains) == 1, f"{spec.name} {key} spans {sorted(map(str, domains))}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology_cluster())
def test_failed_topology_placement_leaves_no_trace(snap) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from kai.scheduler.gang import tasks_to_allocate
    from kai.scheduler.session import Session
    from kai.scheduler.statement import Statement
    from kai.scheduler.topology_placement import place_tasks

    session = Session(snap)
    for job_info in session.jobs:
        tasks = tasks_to_allocate(job_info)
        if not tasks:
            continue
        idle = session.nodes.idle.copy()
        releasing = session.nodes.releasing.copy()
        devices = [dict(d) for d in session.nodes.devices]
        placements = {t.uid: (t.status, t.node, t.gpu_groups) for t in job_info.tasks}
        statement = Statement(session, "allocate")
        reason = place_tasks(session, job_info, tasks, statement)
        if reason is None:
            statement.commit()
            continue
        assert statement.operations == []
        assert np.allclose(session.nodes.idle, idle)
        assert np.allclose(session.nodes.releasing, releasing)
        assert [set(d) for d in session.nodes.devices] == [set(d) for d in devices]
        assert {t.uid: (t.status, t.node, t.gpu_groups) for t in job_info.tasks} == placements
