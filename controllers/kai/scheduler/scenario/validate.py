"""Validating a scenario document and building the typed :class:`Scenario` from it.

This module checks the top level and the cluster (config, topologies, nodes, queues); jobs, tasks
and ``expected`` are checked in :mod:`kai.scheduler.scenario.validate_jobs`. Every problem of the
file is reported, each as ``FILE:LINE:COL: FIELD-PATH: message``.
"""

from __future__ import annotations

from typing import Any

from kai.scheduler.scenario import model
from kai.scheduler.scenario.checks import Checker, describe
from kai.scheduler.scenario.source import Document, Path, ScenarioError, read_document
from kai.scheduler.scenario.validate_jobs import Context, check_expected, check_jobs

_TOP_REQUIRED = ("formatVersion", "id", "mode", "actions", "config", "nodes", "queues", "jobs")
_TOP_OPTIONAL = ("source", "notes", "rounds", "topologies", "expected")
_CONFIG_KEYS = (
    "kaiPlugins",
    "predicates",
    "proportion",
    "placement",
    "gpuSharingPlacement",
    "stalenessGracePeriodSeconds",
    "maxConsolidationPreemptees",
    "allowConsolidatingReclaim",
    "fairShareKValue",
)
_KAI_PLUGIN_SETS = ("default", "default-without-predicates")
_NODE_REQUIRED = ("name", "gpus", "cpuMillis", "memoryBytes", "gpuMemoryMiB", "maxPods", "labels")
_QUEUE_REQUIRED = (
    "name",
    "parent",
    "priority",
    "creationRank",
    "gpu",
    "cpuMillis",
    "memoryBytes",
)
_QUEUE_RESOURCE_KEYS = ("quota", "limit", "overQuotaWeight")


def load_scenario(filename: str, *, require_expected: bool = False) -> model.Scenario:
    """Read and validate one scenario file; raises :class:`ScenarioError` listing every problem."""
    return validate_document(read_document(filename), require_expected=require_expected)


def validate_document(document: Document, *, require_expected: bool = False) -> model.Scenario:
    checker = Checker()
    checker.problems.extend(document.problems)
    scenario = _check_top(checker, document.data, require_expected)
    if checker.problems or scenario is None:
        located = sorted(
            ((document.position(p), i, p) for i, p in enumerate(checker.problems)),
            key=lambda item: (item[0], item[1]),
        )
        lines: list[str] = []
        for _, _, problem in located:
            line = document.format(problem)
            if line not in lines:
                lines.append(line)
        raise ScenarioError(lines or [f"{document.filename}:1:1: (document): invalid scenario"])
    return scenario


def _check_top(c: Checker, data: Any, require_expected: bool) -> model.Scenario | None:
    if not isinstance(data, dict):
        c.fail((), f"the top level must be a mapping, got {describe(data)}")
        return None
    top = c.mapping(data, (), _TOP_REQUIRED, _TOP_OPTIONAL)
    assert top is not None
    if "formatVersion" in top and not (
        isinstance(top["formatVersion"], int)
        and not isinstance(top["formatVersion"], bool)
        and top["formatVersion"] == 1
    ):
        c.fail(("formatVersion",), f"must be 1, got {describe(top['formatVersion'])}")
    scenario_id = c.string(top.get("id"), ("id",)) if "id" in top else None
    source = c.text(top["source"], ("source",)) if "source" in top else None
    notes = c.text(top["notes"], ("notes",)) if "notes" in top else None
    mode = c.choice(top["mode"], ("mode",), model.MODES) if "mode" in top else None
    actions = _check_actions(c, top.get("actions")) if "actions" in top else None
    rounds = _check_rounds(c, top, mode)
    config = _check_config(c, top["config"]) if "config" in top else None
    topologies = _check_topologies(c, top.get("topologies", []))
    nodes = _check_nodes(c, top["nodes"]) if "nodes" in top else None
    queues = _check_queues(c, top["queues"]) if "queues" in top else None

    context = Context(
        topologies={t.name: t for t in topologies},
        topology_names=_raw_names(top.get("topologies")),
        node_names=_raw_names(top.get("nodes")),
        nodes_known=nodes is not None,
        queue_names=_raw_names(top.get("queues")),
        parent_queues=_raw_names(top.get("queues"), "parent"),
        queues_known=queues is not None,
    )
    jobs = check_jobs(c, top["jobs"], context) if "jobs" in top else None
    expected = None
    if "expected" in top:
        expected = check_expected(c, top["expected"], context)
    elif require_expected:
        c.fail_missing((), "expected", "required by --check (the file has no expected block)")
    if (
        scenario_id is None
        or mode is None
        or actions is None
        or config is None
        or nodes is None
        or queues is None
        or jobs is None
        or (mode == "rounds" and rounds is None)
    ):
        return None
    return model.Scenario(
        id=scenario_id,
        source=source,
        notes=notes,
        mode=mode,
        actions=actions,
        rounds=rounds,
        config=config,
        topologies=tuple(topologies),
        nodes=tuple(nodes),
        queues=tuple(queues),
        jobs=tuple(jobs),
        expected=expected,
    )


def _raw_names(items: Any, key: str = "name") -> set[str]:
    """Every string ``key`` of a list of mappings, whatever else is wrong with them."""
    if not isinstance(items, list):
        return set()
    return {
        item[key] for item in items if isinstance(item, dict) and isinstance(item.get(key), str)
    }


def _check_actions(c: Checker, value: Any) -> tuple[str, ...] | None:
    items = c.sequence(value, ("actions",), non_empty=True)
    if items is None:
        return None
    actions = [c.choice(item, ("actions", i), model.ACTIONS) for i, item in enumerate(items)]
    if any(a is None for a in actions):
        return None
    return tuple(a for a in actions if a is not None)


def _check_rounds(c: Checker, top: dict[str, Any], mode: str | None) -> model.Rounds | None:
    if "rounds" not in top:
        if mode == "rounds":
            c.fail_missing((), "rounds", "required key is missing (mode is rounds)")
        return None
    if mode == "single-session":
        c.fail(("rounds",), "only allowed with mode: rounds (mode is single-session)")
        return None
    path: Path = ("rounds",)
    spec = c.mapping(top["rounds"], path, ("untilMatch", "afterMatch"))
    if spec is None:
        return None
    until = (
        c.integer(spec["untilMatch"], (*path, "untilMatch"), 1) if "untilMatch" in spec else None
    )
    after = (
        c.integer(spec["afterMatch"], (*path, "afterMatch"), 0) if "afterMatch" in spec else None
    )
    if until is None or after is None:
        return None
    return model.Rounds(until_match=until, after_match=after)


def _check_config(c: Checker, value: Any) -> model.Config | None:
    path: Path = ("config",)
    spec = c.mapping(value, path, _CONFIG_KEYS)
    if spec is None:
        return None
    got: dict[str, Any] = {}
    if "kaiPlugins" in spec:
        plugins = spec["kaiPlugins"]
        if isinstance(plugins, list):
            got["kaiPlugins"] = c.string_list(plugins, (*path, "kaiPlugins"), non_empty=True)
            if got["kaiPlugins"] is not None:
                got["kaiPlugins"] = tuple(got["kaiPlugins"])
        else:
            got["kaiPlugins"] = c.choice(plugins, (*path, "kaiPlugins"), _KAI_PLUGIN_SETS)
    for key in ("predicates", "proportion", "allowConsolidatingReclaim"):
        if key in spec:
            got[key] = c.boolean(spec[key], (*path, key))
    if "placement" in spec:
        got["placement"] = _check_placement(c, spec["placement"], (*path, "placement"))
    if "gpuSharingPlacement" in spec:
        got["gpuSharingPlacement"] = c.choice(
            spec["gpuSharingPlacement"], (*path, "gpuSharingPlacement"), model.SHARING_PLACEMENTS
        )
    if "stalenessGracePeriodSeconds" in spec:
        got["stalenessGracePeriodSeconds"] = c.number(
            spec["stalenessGracePeriodSeconds"], (*path, "stalenessGracePeriodSeconds")
        )
    if "maxConsolidationPreemptees" in spec:
        got["maxConsolidationPreemptees"] = c.number(
            spec["maxConsolidationPreemptees"],
            (*path, "maxConsolidationPreemptees"),
            minus_one=True,
        )
    if "fairShareKValue" in spec:
        got["fairShareKValue"] = c.any_number(spec["fairShareKValue"], (*path, "fairShareKValue"))
    if len(got) != len(_CONFIG_KEYS) or any(v is None for v in got.values()):
        return None
    placement_gpu, placement_cpu = got["placement"]
    return model.Config(
        kai_plugins=got["kaiPlugins"],
        predicates=got["predicates"],
        proportion=got["proportion"],
        placement_gpu=placement_gpu,
        placement_cpu=placement_cpu,
        gpu_sharing_placement=got["gpuSharingPlacement"],
        staleness_grace_period_seconds=got["stalenessGracePeriodSeconds"],
        max_consolidation_preemptees=got["maxConsolidationPreemptees"],
        allow_consolidating_reclaim=got["allowConsolidatingReclaim"],
        fair_share_k_value=got["fairShareKValue"],
    )


def _check_placement(c: Checker, value: Any, path: Path) -> tuple[str, str] | None:
    if value == "none":
        return ("none", "none")
    if not isinstance(value, dict):
        c.fail(
            path,
            f"must be none or a mapping {{gpu: binpack|spread, cpu: ...}}, got {describe(value)}",
        )
        return None
    spec = c.mapping(value, path, ("gpu", "cpu"))
    assert spec is not None
    gpu = c.choice(spec["gpu"], (*path, "gpu"), model.PLACEMENTS) if "gpu" in spec else None
    cpu = c.choice(spec["cpu"], (*path, "cpu"), model.PLACEMENTS) if "cpu" in spec else None
    if gpu is None or cpu is None:
        return None
    return (gpu, cpu)


def _duplicate(c: Checker, seen: dict[str, int], name: str, path: Path, what: str) -> None:
    if name in seen:
        c.fail(path, f"{what} {name!r} is defined twice (first at index {seen[name]})")
    else:
        seen[name] = path[-2] if isinstance(path[-2], int) else 0


def _check_topologies(c: Checker, value: Any) -> list[model.Topology]:
    items = c.sequence(value, ("topologies",))
    out: list[model.Topology] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items or ()):
        path: Path = ("topologies", i)
        spec = c.mapping(item, path, ("name", "levels"))
        if spec is None:
            continue
        name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
        levels = (
            c.string_list(spec["levels"], (*path, "levels"), non_empty=True)
            if "levels" in spec
            else None
        )
        if name is not None:
            _duplicate(c, seen, name, (*path, "name"), "topology")
        if name is not None and levels is not None:
            out.append(model.Topology(name=name, levels=tuple(levels)))
    return out


def _check_nodes(c: Checker, value: Any) -> list[model.Node] | None:
    items = c.sequence(value, ("nodes",))
    if items is None:
        return None
    out: list[model.Node] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        path: Path = ("nodes", i)
        spec = c.mapping(item, path, _NODE_REQUIRED, ("mig",))
        if spec is None:
            continue
        name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
        gpus = c.integer(spec["gpus"], (*path, "gpus"), 0) if "gpus" in spec else None
        numbers = {
            key: c.number(spec[key], (*path, key)) if key in spec else None
            for key in ("cpuMillis", "memoryBytes", "gpuMemoryMiB")
        }
        max_pods = c.integer(spec["maxPods"], (*path, "maxPods"), 0) if "maxPods" in spec else None
        labels = c.string_map(spec["labels"], (*path, "labels")) if "labels" in spec else None
        mig = _check_mig(c, spec["mig"], (*path, "mig")) if "mig" in spec else None
        if name is not None:
            _duplicate(c, seen, name, (*path, "name"), "node")
        if mig is not None and mig.strategy == "mixed" and gpus is not None and gpus != 0:
            c.fail((*path, "gpus"), f"must be 0 on a node with MIG strategy mixed, got {gpus}")
        if (
            name is None
            or gpus is None
            or max_pods is None
            or labels is None
            or any(v is None for v in numbers.values())
            or ("mig" in spec and mig is None)
        ):
            continue
        out.append(
            model.Node(
                name=name,
                gpus=gpus,
                cpu_millis=numbers["cpuMillis"] or 0,
                memory_bytes=numbers["memoryBytes"] or 0,
                gpu_memory_mib=numbers["gpuMemoryMiB"] or 0,
                max_pods=max_pods,
                labels=dict(labels),
                mig=mig,
            )
        )
    return out


def _check_mig(c: Checker, value: Any, path: Path) -> model.Mig | None:
    spec = c.mapping(value, path, ("strategy", "physicalGpus", "devices"))
    if spec is None:
        return None
    strategy = (
        c.choice(spec["strategy"], (*path, "strategy"), model.MIG_STRATEGIES)
        if "strategy" in spec
        else None
    )
    physical = (
        c.integer(spec["physicalGpus"], (*path, "physicalGpus"), 0)
        if "physicalGpus" in spec
        else None
    )
    devices = c.count_map(spec["devices"], (*path, "devices"), 0) if "devices" in spec else None
    if strategy is None or physical is None or devices is None:
        return None
    return model.Mig(strategy=strategy, physical_gpus=physical, devices=devices)


def _check_queues(c: Checker, value: Any) -> list[model.Queue] | None:
    items = c.sequence(value, ("queues",), non_empty=True)
    if items is None:
        return None
    out: list[model.Queue] = []
    seen: dict[str, int] = {}
    index_of: dict[str, int] = {}
    for i, item in enumerate(items):
        path: Path = ("queues", i)
        spec = c.mapping(item, path, _QUEUE_REQUIRED, ("implicit",))
        if spec is None:
            continue
        name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
        parent_ok, parent = (
            c.optional_name(spec["parent"], (*path, "parent"))
            if "parent" in spec
            else (False, None)
        )
        priority = c.integer(spec["priority"], (*path, "priority")) if "priority" in spec else None
        rank = (
            c.integer(spec["creationRank"], (*path, "creationRank"))
            if "creationRank" in spec
            else None
        )
        resources = {
            key: _check_queue_resource(c, spec[key], (*path, key)) if key in spec else None
            for key in ("gpu", "cpuMillis", "memoryBytes")
        }
        implicit = c.boolean(spec["implicit"], (*path, "implicit")) if "implicit" in spec else False
        if name is not None:
            _duplicate(c, seen, name, (*path, "name"), "queue")
            index_of.setdefault(name, i)
        gpu, cpu, memory = resources["gpu"], resources["cpuMillis"], resources["memoryBytes"]
        if (
            name is None
            or not parent_ok
            or priority is None
            or rank is None
            or gpu is None
            or cpu is None
            or memory is None
            or implicit is None
        ):
            continue
        out.append(
            model.Queue(
                name=name,
                parent=parent,
                priority=priority,
                creation_rank=rank,
                gpu=gpu,
                cpu_millis=cpu,
                memory_bytes=memory,
                implicit=implicit,
            )
        )
    _check_queue_tree(c, items, out, index_of)
    return out


def _check_queue_resource(c: Checker, value: Any, path: Path) -> model.QueueResource | None:
    spec = c.mapping(value, path, _QUEUE_RESOURCE_KEYS)
    if spec is None:
        return None
    got = [
        c.number(spec[key], (*path, key), minus_one=True) if key in spec else None
        for key in _QUEUE_RESOURCE_KEYS
    ]
    quota, limit, weight = got
    if quota is None or limit is None or weight is None:
        return None
    return model.QueueResource(quota=quota, limit=limit, over_quota_weight=weight)


def _check_queue_tree(
    c: Checker, items: list[Any], queues: list[model.Queue], index_of: dict[str, int]
) -> None:
    """Parents resolve, and following parents never comes back to a queue (no cycle)."""
    parent_of: dict[str, str | None] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        parent = item.get("parent")
        if isinstance(parent, str) and parent:
            if parent not in index_of:
                c.fail(("queues", i, "parent"), f"queue {parent!r} does not exist")
            elif parent == item["name"]:
                c.fail(("queues", i, "parent"), "a queue cannot be its own parent")
                continue
            parent_of.setdefault(item["name"], parent)
    reported: set[str] = set()
    for queue in queues:
        chain = [queue.name]
        current = parent_of.get(queue.name)
        while current is not None and current not in chain:
            chain.append(current)
            current = parent_of.get(current)
        if current is not None and current == queue.name and not reported & set(chain):
            reported.update(chain)
            cycle = " -> ".join([*chain, queue.name])
            c.fail(
                ("queues", index_of[queue.name], "parent"), f"the queue tree has a cycle: {cycle}"
            )
