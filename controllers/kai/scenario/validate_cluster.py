"""Validating the cluster part of a scenario: topologies, nodes and the queue tree."""

from __future__ import annotations

from typing import Any

from kai.scenario import model
from kai.scenario.field_checks import Checker
from kai.scenario.source import Path

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


def _duplicate(c: Checker, seen: dict[str, int], name: str, path: Path, what: str) -> None:
    """Record a name at ``path`` (``(section, index, "name")``), or report it as a repeat."""
    section, index = path[0], path[1]
    if name in seen:
        c.fail(path, f"{what} {name!r} is defined twice (first at {section}[{seen[name]}])")
    else:
        seen[name] = int(index)


def check_topologies(c: Checker, value: Any) -> list[model.Topology]:
    items = c.sequence(value, ("topologies",))
    out: list[model.Topology] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items or ()):
        path: Path = ("topologies", i)
        spec = c.mapping(item, path, ("name", "levels"), ("aliases",))
        if spec is None:
            continue
        name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
        levels = (
            c.string_list(spec["levels"], (*path, "levels"), non_empty=True)
            if "levels" in spec
            else None
        )
        aliases: tuple[tuple[str, str], ...] | None = ()
        if "aliases" in spec:
            aliases = _check_aliases(c, spec["aliases"], (*path, "aliases"), levels)
        if name is not None:
            _duplicate(c, seen, name, (*path, "name"), "topology")
        if name is not None and levels is not None and aliases is not None:
            out.append(model.Topology(name=name, levels=tuple(levels), aliases=aliases))
    return out


def _check_aliases(
    c: Checker, value: Any, path: Path, levels: list[str] | None
) -> tuple[tuple[str, str], ...] | None:
    """``{alias: level}``: each alias names a level of the topology (KAI ``levels[].alias``, so
    at most one alias per level) and differs from every level's label key."""
    labels = c.string_map(value, path)
    if labels is None:
        return None
    good = True
    alias_of: dict[str, str] = {}
    for alias, level in labels.items():
        if not level:
            c.fail((*path, alias), "must be a level of the topology, got ''")
            good = False
            continue
        if levels is None:
            continue  # the levels themselves are wrong: already reported
        if alias in levels:
            c.fail(
                (*path, alias),
                f"alias {alias!r} equals the node label key of a level; an alias must "
                "differ from every level",
                at_key=True,
            )
            good = False
        if level not in levels:
            c.fail(
                (*path, alias),
                f"{level!r} is not a level of this topology (levels: {', '.join(levels)})",
            )
            good = False
        elif level in alias_of:
            c.fail(
                (*path, alias),
                f"level {level!r} already has the alias {alias_of[level]!r} (one alias per level)",
            )
            good = False
        else:
            alias_of[level] = alias
    return tuple(labels.items()) if good and levels is not None else None


def check_nodes(c: Checker, value: Any) -> list[model.Node] | None:
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


def check_queues(c: Checker, value: Any) -> list[model.Queue] | None:
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
