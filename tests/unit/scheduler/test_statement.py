"""Statement: every operation is undone exactly by rollback, shared-GPU devices included."""

from __future__ import annotations

from typing import Any

import numpy as np
from builders import cluster, job, node, task
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.scheduler.session import Session
from kai.scheduler.snapshot import TaskStatus
from kai.scheduler.statement import Statement


def _state(session: Session) -> tuple[Any, ...]:
    nodes = session.nodes
    devices = tuple(
        tuple(sorted((d.id, d.used, d.releasing, d.tasks) for d in devs.values()))
        for devs in nodes.devices
    )
    podsets = tuple(
        (j.uid, ps.name, ps.active, ps.allocated, ps.pending, ps.alive)
        for j in session.jobs
        for ps in j.podsets.values()
    )
    placements = tuple((t.uid, t.status, t.node, t.gpu_groups) for t in session.tasks.values())
    return (
        nodes.idle.round(6).tobytes(),
        nodes.releasing.round(6).tobytes(),
        nodes.dev_free_now.round(6).tobytes(),
        nodes.dev_free_future.round(6).tobytes(),
        devices,
        podsets,
        placements,
        tuple(round(x, 6) for x in session.proportion.save_state()[0]),
        tuple(round(x, 6) for x in session.proportion.save_state()[1]),
    )


def _session() -> Session:
    nodes = [node("n0", gpus=2), node("n1", gpus=4)]
    jobs = [
        job(
            "run",
            [
                task("run-0", status="Running", node_name="n0"),
                task("run-1", fraction=0.5, status="Running", node_name="n1", groups=("n1/0",)),
                task("run-2", fraction=0.25, status="Releasing", node_name="n1", groups=("n1/0",)),
            ],
            age=5,
        ),
        job("np", [task("np-0", gpus=1, status="Running", node_name="n1")], priority=100),
        job(
            "pend",
            [
                task("p-0"),
                task("p-1", fraction=0.5),
                task("p-2", gpu_memory=30, num_devices=2),
                task("p-3", gpus=0),
            ],
            min_available=1,
        ),
    ]
    return Session(cluster(nodes, jobs))


op_strategy = st.lists(
    st.tuples(st.sampled_from(["allocate", "pipeline", "evict", "checkpoint"]), st.integers(0, 99)),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(op_strategy)
def test_rollback_restores_exact_state(ops: list[tuple[str, int]]) -> None:
    session = _session()
    original = _state(session)
    stmt = Statement(session, "test")
    checkpoints: list[tuple[int, tuple[Any, ...]]] = []
    tasks = list(session.tasks.values())
    for kind, pick in ops:
        if kind == "checkpoint":
            checkpoints.append((stmt.checkpoint(), _state(session)))
            continue
        if kind == "evict":
            placed = [t for t in tasks if t.node >= 0 and t.status is not TaskStatus.RELEASING]
            if placed:
                stmt.evict(placed[pick % len(placed)], "test")
            continue
        pending = [t for t in tasks if t.status is TaskStatus.PENDING]
        if not pending:
            continue
        target = pending[pick % len(pending)]
        node_index = pick % len(session.nodes)
        groups: tuple[str, ...] = ()
        if target.is_shared:
            existing = sorted(session.nodes.devices[node_index])
            fresh = [f"{session.nodes.names[node_index]}/x{pick}-{i}" for i in range(2)]
            pool = existing + fresh
            groups = tuple(pool[(pick + i) % len(pool)] for i in range(target.spec.gpu.num_devices))
            if len(set(groups)) < len(groups):
                groups = tuple(fresh[: target.spec.gpu.num_devices])
        if kind == "allocate":
            stmt.allocate(target, node_index, groups)
        else:
            stmt.pipeline(target, node_index, groups)
    for checkpoint, state in reversed(checkpoints):
        stmt.rollback(checkpoint)
        assert _state(session) == state
    stmt.discard()
    assert _state(session) == original


def test_convert_allocated_to_pipelined_moves_accounting() -> None:
    session = _session()
    stmt = Statement(session, "test")
    t = session.tasks["p-0"]
    before_idle = session.nodes.idle[0].copy()
    stmt.allocate(t, 0)
    stmt.convert_allocated_to_pipelined(t.job)
    assert t.status is TaskStatus.PIPELINED
    assert np.allclose(session.nodes.idle[0], before_idle)
    assert session.nodes.releasing[0][2] == -1
    stmt.discard()
    assert t.status is TaskStatus.PENDING and t.node == -1


def test_shared_device_opened_and_closed() -> None:
    session = _session()
    stmt = Statement(session, "test")
    t = session.tasks["p-1"]
    gpu_idle = session.nodes.idle[0][2]
    stmt.allocate(t, 0, ("n0/0",))
    assert "n0/0" in session.nodes.devices[0]
    assert session.nodes.idle[0][2] == gpu_idle - 1
    stmt.rollback(0)
    assert session.nodes.devices[0] == {}
    assert session.nodes.idle[0][2] == gpu_idle


def test_evicting_every_task_of_a_device_releases_its_gpu() -> None:
    session = _session()
    stmt = Statement(session, "test")
    n1 = session.nodes.index["n1"]
    released = session.nodes.releasing[n1][2]
    stmt.evict(session.tasks["run-1"], "test")
    assert session.nodes.releasing[n1][2] == released + 1
    stmt.discard()
    assert session.nodes.releasing[n1][2] == released


@settings(max_examples=60, deadline=None)
@given(op_strategy)
def test_cached_classes_match_fresh_ones_after_any_changes(ops: list[tuple[str, int]]) -> None:
    """The equivalence-class cache recomputes only touched nodes: after any sequence of changes
    (rollbacks included) every cached class must equal one computed from scratch."""
    from kai.scheduler.placement import EqClass

    session = _session()
    engine = session.engine
    tasks = list(session.tasks.values())
    for t in tasks:
        engine.class_of(t)  # warm every class before the changes
    stmt = Statement(session, "test")
    for kind, pick in ops:
        pending = [t for t in tasks if t.status is TaskStatus.PENDING]
        placed = [t for t in tasks if t.node >= 0 and t.status is not TaskStatus.RELEASING]
        if kind == "checkpoint" and stmt.operations:
            stmt.rollback(pick % (len(stmt.operations) + 1))
        elif kind == "evict" and placed:
            stmt.evict(placed[pick % len(placed)], "test")
        elif pending:
            target = pending[pick % len(pending)]
            choice = engine.choose(target)
            if choice is not None:
                if kind == "allocate" and choice.fits_now:
                    stmt.allocate(target, choice.node, choice.gpu_groups)
                else:
                    stmt.pipeline(target, choice.node, choice.gpu_groups)
        for t in tasks:
            cached = engine.class_of(t)
            cached.sync()
            fresh = EqClass(engine, t, -1)
            assert np.array_equal(cached.key, fresh.key)
            assert np.array_equal(cached.fits_now, fresh.fits_now)
            assert np.array_equal(cached.fits_future, fresh.fits_future)
            assert np.array_equal(cached.reason_code, fresh.reason_code)
