"""Validating the jobs (with their subgroups and tasks) and the ``expected`` block of a scenario."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai.scheduler.scenario import model
from kai.scheduler.scenario.checks import Checker, describe, is_number
from kai.scheduler.scenario.source import Path, format_path

_JOB_REQUIRED = ("name", "queue", "priority", "preemptible", "createdMinutesAgo", "tasks")
_JOB_OPTIONAL = ("minAvailable", "subGroups", "topology", "staleForSeconds", "deleted", "namespace")
_TASK_OPTIONAL = (
    "node",
    "gpuGroups",
    "subGroup",
    "priority",
    "nodeAffinity",
    "labels",
    "podAffinity",
    "podAntiAffinity",
)
_GPU_FORMS = ("gpus", "gpuFraction", "gpuMemoryMiB")


@dataclass
class Context:
    """Names the jobs and expectations may refer to (raw names, so one bad field of a queue or
    node does not make every reference to it an error too)."""

    topologies: dict[str, model.Topology]
    topology_names: set[str]
    node_names: set[str]
    nodes_known: bool
    queue_names: set[str]
    parent_queues: set[str]
    queues_known: bool
    task_names: set[str] = field(default_factory=set)
    tasks_known: bool = True


@dataclass
class _SubGroupInfo:
    """How a job's tasks must name their subgroup: ``leaves`` is None when the job has none."""

    leaves: set[str] | None
    names: set[str]
    broken: bool = False


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
    name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
    if name is not None:
        if name in seen:
            c.fail((*path, "name"), f"job {name!r} is defined twice (first at jobs[{seen[name]}])")
        else:
            seen[name] = int(path[-1])
    queue = c.string(spec["queue"], (*path, "queue")) if "queue" in spec else None
    if queue is not None and ctx.queues_known:
        if queue not in ctx.queue_names:
            c.fail((*path, "queue"), f"queue {queue!r} does not exist")
            queue = None
        elif queue in ctx.parent_queues:
            c.fail(
                (*path, "queue"), f"queue {queue!r} has child queues; jobs belong to leaf queues"
            )
            queue = None
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

    gang_ok = True
    min_available: int | None = None
    subgroups: tuple[model.SubGroup, ...] = ()
    info = _SubGroupInfo(leaves=None, names=set())
    if "minAvailable" in spec and "subGroups" in spec:
        c.fail((*path, "subGroups"), "a job has minAvailable or subGroups, not both")
        gang_ok = False
        info.broken = True
    elif "minAvailable" not in spec and "subGroups" not in spec:
        c.fail_missing(
            path, "minAvailable", "a job needs minAvailable or subGroups (neither is given)"
        )
        gang_ok = False
    elif "minAvailable" in spec:
        min_available = c.integer(spec["minAvailable"], (*path, "minAvailable"), 0)
        if min_available is None:
            gang_ok = False
        elif raw_tasks is not None and min_available > len(raw_tasks):
            c.fail(
                (*path, "minAvailable"),
                f"must not exceed the number of tasks ({len(raw_tasks)}), got {min_available}",
            )
            gang_ok = False
    else:
        checked = _check_subgroups(c, spec["subGroups"], (*path, "subGroups"), ctx)
        if checked is None:
            gang_ok = False
            info.broken = True
        else:
            subgroups, info = checked
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
        task = _check_task(c, raw, (*path, "tasks", t), ctx, name or "", info, task_seen)
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
        subgroups=subgroups,
        topology=topology,
        stale_for_seconds=stale,
        deleted=deleted,
        namespace=namespace,
        tasks=tuple(tasks),
    )


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
            known = ctx.topologies[name].levels
            if level not in known:
                c.fail(
                    (*path, key),
                    f"{level!r} is not a level of topology {name!r} (levels: {', '.join(known)})",
                )
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
) -> tuple[tuple[model.SubGroup, ...], _SubGroupInfo] | None:
    items = c.sequence(value, path, non_empty=True)
    if items is None:
        return None
    good = True
    entries: list[tuple[int, str, str | None, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        sub_path: Path = (*path, i)
        spec = c.mapping(item, sub_path, ("name", "parent"), ("minAvailable", "topology"))
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
        if parent is not None and parent not in names:
            c.fail((*sub_path, "parent"), f"subgroup {parent!r} does not exist in this job")
            good = False
        elif parent == name:
            c.fail((*sub_path, "parent"), "a subgroup cannot be its own parent")
            good = False
        elif parent is not None and _in_cycle(name, parent_of):
            c.fail((*sub_path, "parent"), "the subgroup tree has a cycle")
            good = False
        min_available: int | None = None
        if name in parents:
            if "minAvailable" in spec:
                c.fail(
                    (*sub_path, "minAvailable"),
                    "an inner subgroup (the parent of another subgroup) has no minAvailable",
                )
                good = False
        elif "minAvailable" not in spec:
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
            model.SubGroup(name=name, parent=parent, min_available=min_available, topology=topology)
        )
    info = _SubGroupInfo(leaves=names - parents, names=names, broken=not good)
    return (tuple(out), info) if good else None


def _in_cycle(start: str, parent_of: dict[str, str | None]) -> bool:
    seen = {start}
    current = parent_of.get(start)
    while current is not None:
        if current in seen:
            return current == start or _in_cycle(current, parent_of)
        seen.add(current)
        current = parent_of.get(current)
    return False


def _check_task(
    c: Checker,
    item: Any,
    path: Path,
    ctx: Context,
    job: str,
    info: _SubGroupInfo,
    task_seen: dict[str, Path],
) -> model.Task | None:
    spec = c.mapping(item, path, ("name", "status", "request"), _TASK_OPTIONAL)
    if spec is None:
        return None
    good = True
    name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
    if name is not None:
        ctx.task_names.add(name)
        if name in task_seen:
            first = format_path(task_seen[name])
            c.fail((*path, "name"), f"task {name!r} is defined twice (first at {first})")
            good = False
        else:
            task_seen[name] = path
    status = (
        c.choice(spec["status"], (*path, "status"), model.STATUSES) if "status" in spec else None
    )
    placed = status in model.PLACED_STATUSES
    node: str | None = None
    if spec.get("node") is not None:
        node = c.string(spec["node"], (*path, "node"))
        good = good and node is not None
        if node is not None and ctx.nodes_known and node not in ctx.node_names:
            c.fail((*path, "node"), f"node {node!r} does not exist")
            good = False
            node = None  # no further complaints about gpuGroups prefixes
        if status is not None and not placed:
            c.fail((*path, "node"), f"a task with status {status} is not placed and has no node")
            good = False
    elif placed:
        if "node" in spec:
            c.fail((*path, "node"), f"required for a task with status {status}, got null")
        else:
            c.fail_missing(path, "node", f"required for a task with status {status}")
        good = False
    request = _check_request(c, spec["request"], (*path, "request")) if "request" in spec else None
    gpu_groups = _check_gpu_groups(c, spec, path, status, node, request)
    subgroup = _check_task_subgroup(c, spec, path, info, job)
    priority = c.integer(spec["priority"], (*path, "priority")) if "priority" in spec else None
    affinity = (
        _check_node_affinity(c, spec["nodeAffinity"], (*path, "nodeAffinity"))
        if "nodeAffinity" in spec
        else None
    )
    labels = c.string_map(spec["labels"], (*path, "labels")) if "labels" in spec else {}
    terms: dict[str, model.AffinityTerm | None] = {}
    for key in ("podAffinity", "podAntiAffinity"):
        terms[key] = _check_pod_affinity(c, spec[key], (*path, key)) if key in spec else None
    if (
        not good
        or name is None
        or status is None
        or request is None
        or gpu_groups is None
        or subgroup is False
        or ("priority" in spec and priority is None)
        or ("nodeAffinity" in spec and affinity is None)
        or labels is None
        or any(key in spec and terms[key] is None for key in terms)
    ):
        return None
    return model.Task(
        name=name,
        job=job,
        status=status,
        node=node,
        gpu_groups=gpu_groups,
        request=request,
        subgroup=subgroup if isinstance(subgroup, str) and subgroup else None,
        priority=priority,
        node_affinity=affinity,
        labels=dict(labels),
        pod_affinity=terms["podAffinity"],
        pod_anti_affinity=terms["podAntiAffinity"],
    )


def _check_request(c: Checker, value: Any, path: Path) -> model.Request | None:
    spec = c.mapping(value, path, ("cpuMillis", "memoryBytes"), (*_GPU_FORMS, "mig"))
    if spec is None:
        return None
    cpu = c.number(spec["cpuMillis"], (*path, "cpuMillis")) if "cpuMillis" in spec else None
    memory = (
        c.number(spec["memoryBytes"], (*path, "memoryBytes")) if "memoryBytes" in spec else None
    )
    good = cpu is not None and memory is not None
    gpus = None
    if "gpus" in spec:
        gpus = c.integer(spec["gpus"], (*path, "gpus"), 0)
        good = good and gpus is not None
    fraction = None
    if "gpuFraction" in spec:
        raw = spec["gpuFraction"]
        if is_number(raw) and 0 < raw < 1:
            fraction = float(raw)
        else:
            c.fail((*path, "gpuFraction"), f"must be > 0 and < 1, got {describe(raw)}")
            good = False
    memory_mib = None
    if "gpuMemoryMiB" in spec:
        memory_mib = c.number(spec["gpuMemoryMiB"], (*path, "gpuMemoryMiB"))
        good = good and memory_mib is not None
    mig: tuple[tuple[str, int], ...] = ()
    if "mig" in spec:
        counts = c.count_map(spec["mig"], (*path, "mig"), 1)
        if counts is None:
            good = False
        elif not counts:
            c.fail((*path, "mig"), "must name at least one MIG profile")
            good = False
        else:
            mig = counts
    forms = [key for key in _GPU_FORMS if key in spec]
    if len(forms) > 1:
        c.fail(
            (*path, forms[1]),
            f"at most one of gpus, gpuFraction, gpuMemoryMiB; found {', '.join(forms)}",
        )
        good = False
    if "mig" in spec and (
        "gpuFraction" in spec or "gpuMemoryMiB" in spec or (gpus is not None and gpus != 0)
    ):
        c.fail(
            (*path, "mig"),
            "a MIG request comes with gpus: 0 or without gpus, and no other GPU form",
        )
        good = False
    if not good or cpu is None or memory is None:
        return None
    return model.Request(
        cpu_millis=cpu,
        memory_bytes=memory,
        gpus=gpus,
        gpu_fraction=fraction,
        gpu_memory_mib=memory_mib,
        mig=mig,
    )


def _check_gpu_groups(
    c: Checker,
    spec: dict[str, Any],
    path: Path,
    status: str | None,
    node: str | None,
    request: model.Request | None,
) -> tuple[str, ...] | None:
    """``gpuGroups`` is on placed shared-GPU tasks only, each group on the task's node."""
    shared = (
        request.is_shared
        if request is not None
        else isinstance(spec.get("request"), dict)
        and ("gpuFraction" in spec["request"] or "gpuMemoryMiB" in spec["request"])
    )
    placed = status in model.PLACED_STATUSES
    if "gpuGroups" not in spec:
        if shared and placed:
            c.fail_missing(path, "gpuGroups", "required on a placed shared-GPU task")
            return None
        return ()
    groups = c.string_list(spec["gpuGroups"], (*path, "gpuGroups"))
    if groups is None:
        return None
    if status is not None and not (shared and placed):
        why = "not placed" if not placed else "not a shared-GPU task (gpuFraction or gpuMemoryMiB)"
        c.fail(
            (*path, "gpuGroups"), f"only placed shared-GPU tasks have gpuGroups; this task is {why}"
        )
        return None
    if not groups:
        c.fail((*path, "gpuGroups"), "must name the device of a placed shared-GPU task")
        return None
    good = True
    for i, group in enumerate(groups):
        if node is not None and (not group.startswith(node + "/") or group == node + "/"):
            c.fail(
                (*path, "gpuGroups", i), f"must be '{node}/<id>' (the task's node), got {group!r}"
            )
            good = False
    return tuple(groups) if good else None


def _check_task_subgroup(
    c: Checker, spec: dict[str, Any], path: Path, info: _SubGroupInfo, job: str
) -> str | bool:
    """The task's leaf subgroup name; '' when the job has no subgroups; False on a problem."""
    if info.leaves is None and not info.broken:
        if "subGroup" in spec:
            c.fail((*path, "subGroup"), f"job {job!r} has no subGroups")
            return False
        return ""
    if "subGroup" not in spec:
        if info.broken:
            return False
        c.fail_missing(path, "subGroup", f"required: job {job!r} has subGroups")
        return False
    name = c.string(spec["subGroup"], (*path, "subGroup"))
    if name is None:
        return False
    if info.broken:
        return name
    assert info.leaves is not None
    if name not in info.names:
        c.fail((*path, "subGroup"), f"subgroup {name!r} does not exist in job {job!r}")
        return False
    if name not in info.leaves:
        c.fail((*path, "subGroup"), f"subgroup {name!r} is not a leaf subgroup of job {job!r}")
        return False
    return name


def _check_node_affinity(c: Checker, value: Any, path: Path) -> model.NodeAffinity | None:
    spec = c.mapping(value, path, ("key", "operator", "values"))
    if spec is None:
        return None
    key = c.string(spec["key"], (*path, "key")) if "key" in spec else None
    operator = (
        c.choice(spec["operator"], (*path, "operator"), ("In",)) if "operator" in spec else None
    )
    values = (
        c.string_list(spec["values"], (*path, "values"), non_empty=True)
        if "values" in spec
        else None
    )
    if key is None or operator is None or values is None:
        return None
    return model.NodeAffinity(key=key, values=tuple(values))


def _check_pod_affinity(c: Checker, value: Any, path: Path) -> model.AffinityTerm | None:
    spec = c.mapping(value, path, ("topologyKey", "matchLabels"))
    if spec is None:
        return None
    key = c.string(spec["topologyKey"], (*path, "topologyKey")) if "topologyKey" in spec else None
    labels = (
        c.string_map(spec["matchLabels"], (*path, "matchLabels")) if "matchLabels" in spec else None
    )
    if key is None or labels is None:
        return None
    return model.AffinityTerm(topology_key=key, match_labels=tuple(labels.items()))


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
