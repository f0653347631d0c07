"""Validating the ``expected`` block of a scenario."""

from __future__ import annotations

from typing import Any

from kai.scenario import model
from kai.scenario.field_checks import Checker, describe
from kai.scenario.source import Path
from kai.scenario.validate_tasks import Context


def check_expected(c: Checker, value: Any, ctx: Context) -> model.Expected | None:
    path: Path = ("expected",)
    spec = c.mapping(value, path, ("tasks",), ("nodes",))
    if spec is None:
        return None
    tasks: dict[str, model.TaskExpectation] = {}
    good = "tasks" in spec
    raw_tasks = spec.get("tasks", {})
    if not isinstance(raw_tasks, dict):
        c.fail(
            (*path, "tasks"),
            f"must be a mapping of task name to expectation, got {describe(raw_tasks)}",
        )
        good = False
        raw_tasks = {}
    for name, raw in raw_tasks.items():
        task_path: Path = (*path, "tasks", str(name))
        if not isinstance(name, str) or (ctx.tasks_known and name not in ctx.task_names):
            c.fail(task_path, f"task {str(name)!r} does not exist", at_key=True)
            good = False
            continue
        expectation = _check_task_expectation(c, raw, task_path, ctx)
        if expectation is None:
            good = False
        else:
            tasks[name] = expectation
    nodes: dict[str, model.NodeFigures] = {}
    raw_nodes = spec.get("nodes", {})
    if not isinstance(raw_nodes, dict):
        c.fail(
            (*path, "nodes"),
            f"must be a mapping of node name to figures, got {describe(raw_nodes)}",
        )
        good = False
        raw_nodes = {}
    for name, raw in raw_nodes.items():
        node_path: Path = (*path, "nodes", str(name))
        if not isinstance(name, str) or (ctx.nodes_known and name not in ctx.node_names):
            c.fail(node_path, f"node {str(name)!r} does not exist", at_key=True)
            good = False
            continue
        figures = c.mapping(raw, node_path, ("idleGpus", "releasingGpus"))
        if figures is None:
            good = False
            continue
        idle = (
            c.any_number(figures["idleGpus"], (*node_path, "idleGpus"))
            if "idleGpus" in figures
            else None
        )
        releasing = (
            c.any_number(figures["releasingGpus"], (*node_path, "releasingGpus"))
            if "releasingGpus" in figures
            else None
        )
        if idle is None or releasing is None:
            good = False
            continue
        nodes[name] = model.NodeFigures(idle_gpus=idle, releasing_gpus=releasing)
    return model.Expected(tasks=tasks, nodes=nodes) if good else None


def _check_task_expectation(
    c: Checker, value: Any, path: Path, ctx: Context
) -> model.TaskExpectation | None:
    spec = c.mapping(value, path, ("status",), ("node", "kaiNode", "kaiGpuGroups"))
    if spec is None:
        return None
    status = (
        c.choice(spec["status"], (*path, "status"), model.STATUSES) if "status" in spec else None
    )
    good = status is not None
    found: dict[str, str | None] = {}
    for key in ("node", "kaiNode"):
        if key not in spec:
            found[key] = None
            continue
        node = c.string(spec[key], (*path, key))
        found[key] = node
        if node is None:
            good = False
        elif ctx.nodes_known and node not in ctx.node_names:
            c.fail((*path, key), f"node {node!r} does not exist")
            good = False
    if "node" in spec and "kaiNode" in spec:
        c.fail((*path, "kaiNode"), "an expectation has node or kaiNode, not both")
        good = False
    if "node" in spec and status is not None and status not in model.PLACED_STATUSES:
        c.fail((*path, "node"), f"a task expected {status} is not placed and has no node")
        good = False
    groups: tuple[str, ...] | None = None
    if "kaiGpuGroups" in spec:
        checked = c.string_list(spec["kaiGpuGroups"], (*path, "kaiGpuGroups"))
        if checked is None:
            good = False
        else:
            groups = tuple(checked)
    if not good or status is None:
        return None
    return model.TaskExpectation(
        status=status, node=found["node"], kai_node=found["kaiNode"], kai_gpu_groups=groups
    )
