"""Validating the tasks of a scenario (requests, placement, GPU groups, subgroups, affinity)
and the names they may refer to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai.scenario import model
from kai.scenario.field_checks import Checker, describe, is_integer, is_number
from kai.scenario.source import Path, format_path

_TASK_OPTIONAL = (
    "node",
    "gpuGroups",
    "subGroup",
    "priority",
    "nodeAffinity",
    "labels",
    "podAffinity",
    "podAntiAffinity",
    "preferredNodeAffinity",
    "preferredPodAffinity",
    "preferredPodAntiAffinity",
)
_PREFERRED = ("preferredNodeAffinity", "preferredPodAffinity", "preferredPodAntiAffinity")
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
    #: requests already found valid, by content (generated files repeat a few requests many times)
    valid_requests: dict[tuple[tuple[str, type, Any], ...], model.Request] = field(
        default_factory=dict
    )


@dataclass
class SubGroupInfo:
    """How a job's tasks must name their subgroup: ``leaves`` is None when the job has none."""

    leaves: set[str] | None
    names: set[str]
    broken: bool = False


def check_task(
    c: Checker,
    item: Any,
    path: Path,
    ctx: Context,
    job: str,
    info: SubGroupInfo,
    task_seen: dict[str, Path],
) -> model.Task | None:
    spec = c.mapping(item, path, ("name", "status", "request"), _TASK_OPTIONAL)
    if spec is None:
        return None
    name_ok, name = _check_task_name(c, spec, path, ctx, task_seen)
    status = (
        c.choice(spec["status"], (*path, "status"), model.STATUSES) if "status" in spec else None
    )
    node_ok, node = _check_task_node(c, spec, path, ctx, status)
    good = name_ok and node_ok
    request = _request(c, spec["request"], (*path, "request"), ctx) if "request" in spec else None
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
    preferred = {
        key: _check_preferred(c, spec[key], (*path, key), key == "preferredNodeAffinity")
        if key in spec
        else ()
        for key in _PREFERRED
    }
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
        or any(found is None for found in preferred.values())
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
        preferred_node_affinity=preferred["preferredNodeAffinity"] or (),
        preferred_pod_affinity=preferred["preferredPodAffinity"] or (),
        preferred_pod_anti_affinity=preferred["preferredPodAntiAffinity"] or (),
    )


def _check_task_name(
    c: Checker, spec: dict[str, Any], path: Path, ctx: Context, task_seen: dict[str, Path]
) -> tuple[bool, str | None]:
    """(unique, name): task names are unique across the scenario."""
    name = c.string(spec["name"], (*path, "name")) if "name" in spec else None
    if name is None:
        return True, None
    ctx.task_names.add(name)
    if name in task_seen:
        first = format_path(task_seen[name])
        c.fail((*path, "name"), f"task {name!r} is defined twice (first at {first})")
        return False, name
    task_seen[name] = path
    return True, name


def _check_task_node(
    c: Checker, spec: dict[str, Any], path: Path, ctx: Context, status: str | None
) -> tuple[bool, str | None]:
    """(acceptable, node): a placed task names an existing node, a pending one none."""
    placed = status in model.PLACED_STATUSES
    if spec.get("node") is None:
        if not placed:
            return True, None
        if "node" in spec:
            c.fail((*path, "node"), f"required for a task with status {status}, got null")
        else:
            c.fail_missing(path, "node", f"required for a task with status {status}")
        return False, None
    node = c.string(spec["node"], (*path, "node"))
    good = node is not None
    if node is not None and ctx.nodes_known and node not in ctx.node_names:
        c.fail((*path, "node"), f"node {node!r} does not exist")
        good = False
        node = None  # no further complaints about gpuGroups prefixes
    if status is not None and not placed:
        c.fail((*path, "node"), f"a task with status {status} is not placed and has no node")
        good = False
    return good, node


def _request(c: Checker, value: Any, path: Path, ctx: Context) -> model.Request | None:
    """``_check_request`` with a memo of valid contents (validity depends on the content only;
    the value types are part of the key so that ``true`` never passes for ``1``)."""
    key = None
    if isinstance(value, dict):
        key = tuple((k, type(v), v) for k, v in value.items())
        try:
            hash(key)
        except TypeError:  # a nested mapping (mig): no memo
            key = None
    if key is not None and key in ctx.valid_requests:
        return ctx.valid_requests[key]
    request = _check_request(c, value, path)
    if request is not None and key is not None:
        ctx.valid_requests[key] = request
    return request


def _check_request(c: Checker, value: Any, path: Path) -> model.Request | None:
    spec = c.mapping(value, path, ("cpuMillis", "memoryBytes"), (*_GPU_FORMS, "mig", "gpuDevices"))
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
    mig_ok, mig = _check_mig(c, spec, path)
    good = good and mig_ok
    devices = 1
    if "gpuDevices" in spec:
        checked_devices = c.integer(spec["gpuDevices"], (*path, "gpuDevices"), 1)
        if checked_devices is None:
            good = False
        elif "gpuFraction" not in spec and "gpuMemoryMiB" not in spec:
            c.fail(
                (*path, "gpuDevices"),
                "only together with gpuFraction or gpuMemoryMiB (the number of shared devices)",
            )
            good = False
        else:
            devices = checked_devices
    good = _one_gpu_form(c, spec, path, gpus) and good
    if not good or cpu is None or memory is None:
        return None
    return model.Request(
        cpu_millis=cpu,
        memory_bytes=memory,
        gpus=gpus,
        gpu_fraction=fraction,
        gpu_memory_mib=memory_mib,
        mig=mig,
        gpu_devices=devices,
    )


def _check_mig(
    c: Checker, spec: dict[str, Any], path: Path
) -> tuple[bool, tuple[tuple[str, int], ...]]:
    if "mig" not in spec:
        return True, ()
    counts = c.count_map(spec["mig"], (*path, "mig"), 1)
    if counts is None:
        return False, ()
    if not counts:
        c.fail((*path, "mig"), "must name at least one MIG profile")
        return False, ()
    return True, counts


def _one_gpu_form(c: Checker, spec: dict[str, Any], path: Path, gpus: int | None) -> bool:
    """At most one of gpus, gpuFraction, gpuMemoryMiB; MIG only with gpus: 0 or none."""
    good = True
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
    return good


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
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if node is not None and (not group.startswith(node + "/") or group == node + "/"):
            c.fail(
                (*path, "gpuGroups", i), f"must be '{node}/<id>' (the task's node), got {group!r}"
            )
            good = False
        elif group in seen:
            c.fail((*path, "gpuGroups", i), f"device {group!r} is listed twice")
            good = False
        seen.add(group)
    if good and request is not None and len(groups) != request.gpu_devices:
        wanted = (
            "exactly one device (the request has no gpuDevices)"
            if request.gpu_devices == 1 and not _has_devices_key(spec)
            else f"{request.gpu_devices} distinct devices (gpuDevices: {request.gpu_devices})"
        )
        c.fail((*path, "gpuGroups"), f"must name {wanted}, got {len(groups)}")
        good = False
    return tuple(groups) if good else None


def _has_devices_key(spec: dict[str, Any]) -> bool:
    request = spec.get("request")
    return isinstance(request, dict) and "gpuDevices" in request


def _check_task_subgroup(
    c: Checker, spec: dict[str, Any], path: Path, info: SubGroupInfo, job: str
) -> str | bool:
    """The task's leaf subgroup name; '' when the job has no subgroups; False on a problem."""
    if info.leaves is None and not info.broken:
        if "subGroup" in spec:
            c.fail((*path, "subGroup"), f"job {job!r} has no subGroups")
            return False
        return ""
    if "subGroup" not in spec:
        if not info.broken:
            c.fail_missing(path, "subGroup", f"required: job {job!r} has subGroups")
        return False
    name = c.string(spec["subGroup"], (*path, "subGroup"))
    if name is None:
        return False
    if info.broken or _is_leaf_subgroup(c, (*path, "subGroup"), name, info, job):
        return name
    return False


def _is_leaf_subgroup(c: Checker, path: Path, name: str, info: SubGroupInfo, job: str) -> bool:
    assert info.leaves is not None
    if name not in info.names:
        c.fail(path, f"subgroup {name!r} does not exist in job {job!r}")
        return False
    if name not in info.leaves:
        c.fail(path, f"subgroup {name!r} is not a leaf subgroup of job {job!r}")
        return False
    return True


def _check_node_affinity(c: Checker, value: Any, path: Path) -> model.NodeAffinity | None:
    spec = c.mapping(value, path, ("key", "operator", "values"))
    if spec is None:
        return None
    return _node_affinity_fields(c, spec, path)


def _node_affinity_fields(
    c: Checker, spec: dict[str, Any], path: Path
) -> model.NodeAffinity | None:
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


def _check_preferred(
    c: Checker, value: Any, path: Path, node: bool
) -> tuple[model.Preferred, ...] | None:
    """A list of preferred terms: ``{weight, <a nodeAffinity or podAffinity term's keys>}``."""
    items = c.sequence(value, path, non_empty=True)
    if items is None:
        return None
    out: list[model.Preferred] = []
    ok = True
    term_keys = ("key", "operator", "values") if node else ("topologyKey", "matchLabels")
    for index, item in enumerate(items):
        where = (*path, index)
        spec = c.mapping(item, where, ("weight", *term_keys))
        if spec is None:
            ok = False
            continue
        raw: Any = spec.get("weight")
        weight: int | None = int(raw) if is_integer(raw) and 1 <= raw <= 100 else None
        if "weight" in spec and weight is None:
            c.fail((*where, "weight"), f"must be an integer from 1 to 100, got {describe(raw)}")
        term_value = {k: spec[k] for k in term_keys if k in spec}
        term: model.NodeAffinity | model.AffinityTerm | None = (
            _node_affinity_fields(c, term_value, where)
            if node
            else _pod_affinity_fields(c, term_value, where)
        )
        if weight is None or term is None:
            ok = False
            continue
        out.append(model.Preferred(weight=weight, term=term))
    return tuple(out) if ok else None


def _check_pod_affinity(c: Checker, value: Any, path: Path) -> model.AffinityTerm | None:
    spec = c.mapping(value, path, ("topologyKey", "matchLabels"))
    if spec is None:
        return None
    return _pod_affinity_fields(c, spec, path)


def _pod_affinity_fields(c: Checker, spec: dict[str, Any], path: Path) -> model.AffinityTerm | None:
    key = c.string(spec["topologyKey"], (*path, "topologyKey")) if "topologyKey" in spec else None
    labels = (
        c.string_map(spec["matchLabels"], (*path, "matchLabels")) if "matchLabels" in spec else None
    )
    if key is None or labels is None:
        return None
    return model.AffinityTerm(topology_key=key, match_labels=tuple(labels.items()))
