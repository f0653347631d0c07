"""Validating the jobs of a scenario, with their subgroups and topology constraints."""

from __future__ import annotations

from typing import Any

from kai.scenario import model
from kai.scenario.field_checks import Checker
from kai.scenario.source import Path
from kai.scenario.validate_tasks import Context, SubGroupInfo, check_task

_JOB_REQUIRED = ("name", "queue", "priority", "preemptible", "createdMinutesAgo", "tasks")
_JOB_OPTIONAL = (
    "minAvailable",
    "minSubGroup",
    "subGroups",
    "topology",
    "staleForSeconds",
    "deleted",
    "namespace",
)


def check_jobs(c: Checker, value: Any, ctx: Context) -> list[model.Job] | None:
    items = c.sequence(value, ("jobs",), non_empty=True)
    if items is None:
        ctx.tasks_known = False
        return None
    out: list[model.Job] = []
    seen: dict[str, int] = {}
    task_seen: dict[str, Path] = {}
    good = True
    for i, item in enumerate(items):
        job = _check_job(c, item, ("jobs", i), ctx, seen, task_seen)
        if job is None:
            good = False
        else:
            out.append(job)
    return out if good else None


def _check_job(
    c: Checker,
    item: Any,
    path: Path,
    ctx: Context,
    seen: dict[str, int],
    task_seen: dict[str, Path],
) -> model.Job | None:
    spec = c.mapping(item, path, _JOB_REQUIRED, _JOB_OPTIONAL)
    if spec is None:
        return None
    name = _check_job_name(c, spec, path, seen)
    queue = _check_job_queue(c, spec, path, ctx)
    priority = c.integer(spec["priority"], (*path, "priority")) if "priority" in spec else None
    preemptible = (
        c.boolean(spec["preemptible"], (*path, "preemptible")) if "preemptible" in spec else None
    )
    created = (
        c.number(spec["createdMinutesAgo"], (*path, "createdMinutesAgo"))
        if "createdMinutesAgo" in spec
        else None
    )
    raw_tasks = c.sequence(spec["tasks"], (*path, "tasks")) if "tasks" in spec else None
    if raw_tasks is None:
        ctx.tasks_known = False

    gang_ok, min_available, subgroups, info = _check_gang(c, spec, path, ctx, raw_tasks)
    min_subgroup_ok, min_subgroup = _check_min_subgroup(c, spec, path)
    topology = (
        _check_topology_ref(c, spec["topology"], (*path, "topology"), ctx)
        if "topology" in spec
        else None
    )
    stale = (
        c.number(spec["staleForSeconds"], (*path, "staleForSeconds"))
        if "staleForSeconds" in spec
        else None
    )
    deleted = c.boolean(spec["deleted"], (*path, "deleted")) if "deleted" in spec else False
    namespace = c.text(spec["namespace"], (*path, "namespace")) if "namespace" in spec else ""

    tasks: list[model.Task] = []
    tasks_ok = raw_tasks is not None
    for t, raw in enumerate(raw_tasks or ()):
        task = check_task(c, raw, (*path, "tasks", t), ctx, name or "", info, task_seen)
        if task is None:
            tasks_ok = False
        else:
            tasks.append(task)
    if (
        name is None
        or queue is None
        or priority is None
        or preemptible is None
        or created is None
        or not gang_ok
        or not min_subgroup_ok
        or not tasks_ok
        or ("topology" in spec and topology is None)
        or ("staleForSeconds" in spec and stale is None)
        or deleted is None
        or namespace is None
    ):
        return None
    return model.Job(
        name=name,
        queue=queue,
        priority=priority,
        preemptible=preemptible,
        created_minutes_ago=created,
        min_available=min_available,
        min_subgroup=min_subgroup,
        subgroups=subgroups,
        topology=topology,
        stale_for_seconds=stale,
        deleted=deleted,
        namespace=namespace,
        tasks=tuple(tasks),
    )


def _check_job_name(
    c: Checker, spec: dict[str, Any], path: Path, seen: dict[str, int]
) -> str | None:
    name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
    if name is not None:
        if name in seen:
            c.fail((*path, "name"), f"job {name!r} is defined twice (first at jobs[{seen[name]}])")
        else:
            seen[name] = int(path[-1])
    return name


def _check_job_queue(c: Checker, spec: dict[str, Any], path: Path, ctx: Context) -> str | None:
    """The job's queue: it must exist and be a leaf (when the queues could be read)."""
    queue = c.string(spec["queue"], (*path, "queue")) if "queue" in spec else None
    if queue is None or not ctx.queues_known:
        return queue
    if queue not in ctx.queue_names:
        c.fail((*path, "queue"), f"queue {queue!r} does not exist")
        return None
    if queue in ctx.parent_queues:
        c.fail((*path, "queue"), f"queue {queue!r} has child queues; jobs belong to leaf queues")
        return None
    return queue


def _check_gang(
    c: Checker,
    spec: dict[str, Any],
    path: Path,
    ctx: Context,
    raw_tasks: list[Any] | None,
) -> tuple[bool, int | None, tuple[model.SubGroup, ...], SubGroupInfo]:
    """The job's gang: ``minAvailable`` or ``subGroups`` (exactly one), as (acceptable,
    minAvailable, subgroups, what the tasks need to know about the subgroups)."""
    info = SubGroupInfo(leaves=None, names=set())
    if "minAvailable" in spec and "subGroups" in spec:
        c.fail((*path, "subGroups"), "a job has minAvailable or subGroups, not both")
        info.broken = True
        return False, None, (), info
    if "minAvailable" not in spec and "subGroups" not in spec:
        c.fail_missing(
            path, "minAvailable", "a job needs minAvailable or subGroups (neither is given)"
        )
        return False, None, (), info
    if "minAvailable" in spec:
        min_available = c.integer(spec["minAvailable"], (*path, "minAvailable"), 0)
        if min_available is None:
            return False, None, (), info
        if raw_tasks is not None and min_available > len(raw_tasks):
            c.fail(
                (*path, "minAvailable"),
                f"must not exceed the number of tasks ({len(raw_tasks)}), got {min_available}",
            )
            return False, min_available, (), info
        return True, min_available, (), info
    checked = _check_subgroups(c, spec["subGroups"], (*path, "subGroups"), ctx)
    if checked is None:
        info.broken = True
        return False, None, (), info
    subgroups, info = checked
    return True, None, subgroups, info


def _check_min_subgroup(c: Checker, spec: dict[str, Any], path: Path) -> tuple[bool, int | None]:
    """A job's ``minSubGroup`` (root threshold) as (acceptable, value; None when absent)."""
    if "minSubGroup" not in spec:
        return True, None
    if "subGroups" not in spec:
        c.fail(
            (*path, "minSubGroup"),
            "only on a job with subGroups (the number of top-level subgroups that must be "
            "satisfied); this job has none",
        )
        return False, None
    value = c.integer(spec["minSubGroup"], (*path, "minSubGroup"), 0)
    return value is not None, value


def _check_topology_ref(
    c: Checker, value: Any, path: Path, ctx: Context
) -> model.TopologyRef | None:
    spec = c.mapping(value, path, ("topology",), ("requiredLevel", "preferredLevel"))
    if spec is None:
        return None
    good = True
    name = c.string(spec["topology"], (*path, "topology")) if "topology" in spec else None
    if name is not None and name not in ctx.topology_names:
        c.fail((*path, "topology"), f"topology {name!r} does not exist")
        good = False
    if "requiredLevel" not in spec and "preferredLevel" not in spec:
        c.fail(path, "needs requiredLevel or preferredLevel (or both)")
        good = False
    levels: dict[str, str | None] = {}
    for key in ("requiredLevel", "preferredLevel"):
        if key not in spec:
            levels[key] = None
            continue
        level = c.string(spec[key], (*path, key))
        levels[key] = level
        if level is None:
            good = False
        elif name is not None and name in ctx.topologies:
            topology = ctx.topologies[name]
            if topology.level_label(level) is None:
                known = f"levels: {', '.join(topology.levels)}"
                if topology.aliases:
                    known += f"; aliases: {', '.join(alias for alias, _ in topology.aliases)}"
                c.fail((*path, key), f"{level!r} is not a level of topology {name!r} ({known})")
                good = False
    if name is None or not good:
        return None
    return model.TopologyRef(
        topology=name,
        required_level=levels["requiredLevel"],
        preferred_level=levels["preferredLevel"],
    )


def _check_subgroups(
    c: Checker, value: Any, path: Path, ctx: Context
) -> tuple[tuple[model.SubGroup, ...], SubGroupInfo] | None:
    items = c.sequence(value, path, non_empty=True)
    if items is None:
        return None
    good = True
    entries: list[tuple[int, str, str | None, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        sub_path: Path = (*path, i)
        spec = c.mapping(
            item, sub_path, ("name", "parent"), ("minAvailable", "minSubGroup", "topology")
        )
        if spec is None:
            good = False
            continue
        name = c.string(spec["name"], (*sub_path, "name")) if "name" in spec else None
        parent_ok, parent = (
            c.optional_name(spec["parent"], (*sub_path, "parent"))
            if "parent" in spec
            else (False, None)
        )
        if name is None or not parent_ok:
            good = False
            continue
        if name in seen:
            c.fail((*sub_path, "name"), f"subgroup {name!r} is defined twice in this job")
            good = False
            continue
        seen[name] = i
        entries.append((i, name, parent, spec))
    names = set(seen)
    parents = {parent for _, _, parent, _ in entries if parent is not None}
    parent_of = {name: parent for _, name, parent, _ in entries}
    out: list[model.SubGroup] = []
    for i, name, parent, spec in entries:
        sub_path = (*path, i)
        good = _check_subgroup_parent(c, (*sub_path, "parent"), name, parent, parent_of) and good
        min_available: int | None = None
        min_subgroup: int | None = None
        if name in parents:
            if "minAvailable" in spec:
                c.fail(
                    (*sub_path, "minAvailable"),
                    "an inner subgroup (the parent of another subgroup) has no minAvailable",
                )
                good = False
            if "minSubGroup" in spec:
                min_subgroup = c.integer(spec["minSubGroup"], (*sub_path, "minSubGroup"), 0)
                good = good and min_subgroup is not None
        else:
            if "minSubGroup" in spec:
                c.fail(
                    (*sub_path, "minSubGroup"),
                    "only on an inner subgroup (the parent of another subgroup); a leaf has "
                    "minAvailable",
                )
                good = False
            if "minAvailable" not in spec:
                c.fail_missing(sub_path, "minAvailable", "required on a leaf subgroup")
                good = False
            else:
                min_available = c.integer(spec["minAvailable"], (*sub_path, "minAvailable"), 0)
                good = good and min_available is not None
        topology = None
        if "topology" in spec:
            topology = _check_topology_ref(c, spec["topology"], (*sub_path, "topology"), ctx)
            good = good and topology is not None
        out.append(
            model.SubGroup(
                name=name,
                parent=parent,
                min_available=min_available,
                topology=topology,
                min_subgroup=min_subgroup,
            )
        )
    info = SubGroupInfo(leaves=names - parents, names=names, broken=not good)
    return (tuple(out), info) if good else None


def _check_subgroup_parent(
    c: Checker, path: Path, name: str, parent: str | None, parent_of: dict[str, str | None]
) -> bool:
    """The parent must be another subgroup of the job, and the tree must have no cycle."""
    if parent is not None and parent not in parent_of:
        c.fail(path, f"subgroup {parent!r} does not exist in this job")
        return False
    if parent == name:
        c.fail(path, "a subgroup cannot be its own parent")
        return False
    if parent is not None and _in_cycle(name, parent_of):
        c.fail(path, "the subgroup tree has a cycle")
        return False
    return True


def _in_cycle(start: str, parent_of: dict[str, str | None]) -> bool:
    seen = {start}
    current = parent_of.get(start)
    while current is not None:
        if current in seen:
            return current == start or _in_cycle(current, parent_of)
        seen.add(current)
        current = parent_of.get(current)
    return False
