"""Building the scheduler core's :class:`~kai.scheduler.snapshot.Snapshot` from raw objects.

Input: the informer caches (plain dicts as the API serves them). Output: a Snapshot plus the
list of objects that could not be understood (:class:`SkippedObject`), each naming the object and
the field; such an object is left out of the snapshot and the caller reports it (Event,
condition) instead of crashing.

What a pod's scheduler status is:

- terminal pods hold nothing: Failed ones are left out, Succeeded ones of a PodGroup stay in
  it as Succeeded tasks (a gang that is finishing is not stale);
- ``spec.nodeName`` set: Running (phase Running) or Bound; Releasing when being deleted;
- no node but a live (not Failed) BindRequest: Binding on the BindRequest's node, with its GPU
  groups -- the scheduler's own decision counts until the binder has acted;
- scheduling gates: Gated; otherwise Pending;
- reservation pods (namespace ``kai-resource-reservation``) are not tasks: they hold their
  node's pod slot, cpu and memory, and their whole GPU while their GPU group has no placed
  task of ours on that node (see :func:`_count_reservations`).

Parsing a pod (quantities, GPU annotations, affinity) is cached by uid and resourceVersion, so
a cycle over 10,000 unchanged pods costs little.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from kai.api.duration import DurationError
from kai.api.duration import parse_duration as _parse_go_duration
from kai.api.gpu_request import GPU_RESOURCE, GpuRequestError, gpu_request_from_pod
from kai.api.pod_requests import effective_requests, is_sidecar
from kai.api.quantity import QuantityError, parse_quantity
from kai.reconcilers.group_by_owner import derived_group, podgroup_lookup
from kai.reconcilers.shard import NodePool
from kai.scheduler.selectors import SELECTOR_OPERATORS
from kai.scheduler.sharing_modes import node_sharing_modes
from kai.scheduler.snapshot import (
    GpuRequest,
    JobSpec,
    MigSpec,
    NodeSelectorTerm,
    NodeSpec,
    PodAffinityTerm,
    QueueResource,
    QueueSpec,
    Requirement,
    SchedulerConfig,
    Snapshot,
    SubGroupSpec,
    Taint,
    TaskSpec,
    TaskStatus,
    Toleration,
    TopologyConstraint,
    TopologySpec,
    WeightedNodeTerm,
    WeightedPodAffinityTerm,
)

POD_GROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
GPU_GROUP_LABEL = "runai-gpu-group"
LAST_START = "kai.scheduler/last-start-timestamp"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"
STALE_SINCE = "kai.scheduler/stale-podgroup-timestamp"
RESERVATION_NAMESPACE = "kai-resource-reservation"
DEFAULT_PRIORITY = 50
NON_PREEMPTIBLE_THRESHOLD = 100
if TYPE_CHECKING:
    from kai.reconcilers.volume_claims import VolumeIndex

_SKIPPED_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", GPU_RESOURCE})


@dataclass(frozen=True)
class SkippedObject:
    """An object left out of the snapshot, and why."""

    obj: dict[str, Any]
    field: str
    message: str

    @property
    def text(self) -> str:
        md = self.obj.get("metadata") or {}
        name = f"{md.get('namespace')}/{md.get('name')}" if md.get("namespace") else md.get("name")
        return f"{self.obj.get('kind', 'object')} {name}: {self.field}: {self.message}"


class ObjectError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_time(value: Any) -> float | None:
    """RFC 3339 (``2026-01-01T00:00:00Z``, optional fraction or offset) -> epoch seconds."""
    if not value or not isinstance(value, str):
        return None
    return _parse_time(value)


@functools.lru_cache(maxsize=65536)
def _parse_time(value: str) -> float | None:
    text = value.strip()
    if text.endswith("Z") and len(text) == 20 and "." not in text:
        try:
            return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
        except ValueError:
            return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _quantity(value: Any, where: str) -> float:
    if isinstance(value, str):
        known = _QUANTITIES.get(value)
        if known is not None:
            return known
    try:
        amount = float(parse_quantity(value))
    except QuantityError as exc:
        raise ObjectError(where, f"bad quantity {value!r}: {exc}") from exc
    if isinstance(value, str) and len(_QUANTITIES) < 4096:
        _QUANTITIES[value] = amount  # pods repeat a handful of request strings
    return amount


_QUANTITIES: dict[str, float] = {}


_T = TypeVar("_T")


def _shallow_copy(obj: _T) -> _T:
    """``copy.copy`` of a plain dataclass instance, without the ``__reduce_ex__`` detour
    (which cost a tenth of the snapshot build with thousands of PodGroups)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


_EMPTY: Mapping[str, Any] = {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else _EMPTY  # objects from the API are dicts


# -- pods ---------------------------------------------------------------------------------
@dataclass
class PodInfo:
    """What a pod asks for: parsed once per resourceVersion."""

    uid: str
    name: str
    namespace: str
    pod_group: str | None
    cpu_millis: float
    memory_bytes: float
    gpu: GpuRequest
    extended: dict[str, float]
    subgroup: str | None
    priority: int | None
    labels: dict[str, str]
    node_selector: dict[str, str]
    node_affinity: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]
    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]
    created_at: float
    gpu_groups: tuple[str, ...] = ()
    host_ports: tuple[tuple[str, str, int], ...] = ()
    preferred_node_affinity: tuple[WeightedNodeTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    claims: tuple[str, ...] = ()  # names of the PersistentVolumeClaims its volumes use
    movable: bool = True  # it has a controller that makes it again after an eviction


def _pod_requests(spec: Mapping[str, Any], pod: str) -> dict[str, float]:
    """Effective requests by Kubernetes' rule (:mod:`kai.api.pod_requests`): main containers
    and native sidecars summed, each other init container max'ed, plus ``spec.overhead``."""

    def requests_of(container: Any, where: str) -> dict[str, float]:
        res = _mapping(_mapping(container).get("resources"))
        requests = dict(_mapping(res.get("limits")))
        requests.update(_mapping(res.get("requests")))
        return {
            str(key): _quantity(value, f"{where}.resources.requests.{key}")
            for key, value in requests.items()
        }

    total = effective_requests(
        (
            requests_of(c, f"spec.containers[{i}]")
            for i, c in enumerate(spec.get("containers") or [])
        ),
        (
            (requests_of(c, f"spec.initContainers[{i}]"), is_sidecar(_mapping(c)))
            for i, c in enumerate(spec.get("initContainers") or [])
        ),
        0.0,
    )
    overhead = _mapping(spec.get("overhead"))
    for key, value in overhead.items():
        total[key] = total.get(key, 0.0) + _quantity(value, f"spec.overhead.{key}")
    return total


def _selector_terms(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return node_selector_terms(required, "spec.affinity.nodeAffinity")


def node_selector_terms(selector: Mapping[str, Any], where: str) -> tuple[NodeSelectorTerm, ...]:
    """The terms of a Kubernetes NodeSelector (``nodeSelectorTerms``) at ``where``."""
    return tuple(
        _node_selector_term(_mapping(term), where)
        for term in selector.get("nodeSelectorTerms") or []
    )


def _node_selector_term(term: Mapping[str, Any], where: str) -> NodeSelectorTerm:
    reqs = []
    for expr in term.get("matchExpressions") or []:
        expr = _mapping(expr)
        op = str(expr.get("operator") or "")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise ObjectError(where, f"unknown operator {op!r} in a node selector")
        reqs.append(
            Requirement(
                str(expr.get("key") or ""), op, tuple(str(v) for v in expr.get("values") or [])
            )
        )
    for expr in term.get("matchFields") or []:
        expr = _mapping(expr)
        if expr.get("key") == "metadata.name":
            reqs.append(
                Requirement(
                    "kubernetes.io/hostname",
                    str(expr.get("operator") or "In"),
                    tuple(str(v) for v in expr.get("values") or []),
                )
            )
    return NodeSelectorTerm(tuple(reqs))


def _weight(term: Mapping[str, Any], where: str) -> int:
    weight = term.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise ObjectError(f"{where}.weight", f"must be an integer from 1 to 100, not {weight!r}")
    return weight


def _preferred_node_terms(spec: Mapping[str, Any]) -> tuple[WeightedNodeTerm, ...]:
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    out = []
    for index, raw in enumerate(
        affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ):
        term = _mapping(raw)
        where = (
            f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{index}]"
        )
        weight = _weight(term, where)
        preference = _node_selector_term(_mapping(term.get("preference")), f"{where}.preference")
        out.append(WeightedNodeTerm(weight, preference))
    return tuple(out)


def _preferred_pod_terms(spec: Mapping[str, Any], kind: str) -> tuple[WeightedPodAffinityTerm, ...]:
    section = _mapping(_mapping(spec.get("affinity")).get(kind))
    out = []
    for index, raw in enumerate(
        section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ):
        term = _mapping(raw)
        where = f"spec.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{index}]"
        weight = _weight(term, where)
        out.append(
            WeightedPodAffinityTerm(
                weight, _pod_term(_mapping(term.get("podAffinityTerm")), f"{where}.podAffinityTerm")
            )
        )
    return tuple(out)


def _pod_term(term: Mapping[str, Any], where: str) -> PodAffinityTerm:
    raw = term.get("labelSelector")
    labels, expressions = _label_selector(raw, f"{where}.labelSelector")
    return PodAffinityTerm(
        str(term.get("topologyKey") or ""),
        labels,
        expressions,
        # no selector at all selects no pod (an empty one selects every pod)
        selects_nothing=raw is None,
    )


def pod_claims(spec: Mapping[str, Any], pod_name: str) -> tuple[str, ...]:
    """Names of the PersistentVolumeClaims the pod's volumes use: ``persistentVolumeClaim``
    volumes, and generic ephemeral volumes (their claim is ``<pod>-<volume>``)."""
    out = []
    for volume in spec.get("volumes") or []:
        volume = _mapping(volume)
        claim = _mapping(volume.get("persistentVolumeClaim")).get("claimName")
        if claim:
            out.append(str(claim))
        elif volume.get("ephemeral") is not None and volume.get("name"):
            out.append(f"{pod_name}-{volume['name']}")
    return tuple(out)


def _label_selector(
    raw: Any, where: str
) -> tuple[tuple[tuple[str, str], ...], tuple[Requirement, ...]]:
    """``matchLabels`` pairs and ``matchExpressions`` requirements of a label selector."""
    selector = _mapping(raw)
    labels = tuple(
        sorted((str(k), str(v)) for k, v in _mapping(selector.get("matchLabels")).items())
    )
    expressions = []
    for index, expr in enumerate(selector.get("matchExpressions") or []):
        expr = _mapping(expr)
        op = str(expr.get("operator") or "")
        if op not in SELECTOR_OPERATORS:
            raise ObjectError(
                f"{where}.matchExpressions[{index}].operator",
                f"unknown operator {op!r}: a label selector takes {', '.join(SELECTOR_OPERATORS)}",
            )
        values = tuple(str(v) for v in expr.get("values") or [])
        if op in ("In", "NotIn") and not values:
            raise ObjectError(
                f"{where}.matchExpressions[{index}].values",
                f"operator {op} needs at least one value",
            )
        expressions.append(Requirement(str(expr.get("key") or ""), op, values))
    return labels, tuple(expressions)


def _affinity_terms(spec: Mapping[str, Any], kind: str) -> tuple[PodAffinityTerm, ...]:
    section = _mapping(_mapping(spec.get("affinity")).get(kind))
    terms = section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return tuple(
        _pod_term(
            _mapping(term),
            f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{index}]",
        )
        for index, term in enumerate(terms)
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    """(protocol, hostIP, hostPort) of the containers' ports that ask for a host port."""
    out = []
    for index, container in enumerate(spec.get("containers") or []):
        for pindex, port in enumerate(_mapping(container).get("ports") or []):
            port = _mapping(port)
            raw = port.get("hostPort")
            if raw in (None, 0):
                continue
            if not isinstance(raw, int) or not 0 < raw < 65536:
                raise ObjectError(
                    f"spec.containers[{index}].ports[{pindex}].hostPort",
                    f"must be a port number (1-65535), not {raw!r}",
                )
            out.append((str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), raw))
    return tuple(out)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    out = []
    for tol in spec.get("tolerations") or []:
        tol = _mapping(tol)
        out.append(
            Toleration(
                key=tol.get("key") or None,
                operator=str(tol.get("operator") or "Equal"),
                value=tol.get("value"),
                effect=tol.get("effect") or None,
            )
        )
    return tuple(out)


def parse_pod(pod: dict[str, Any]) -> PodInfo:
    md = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    name = str(md.get("name") or "")
    labels = {str(k): str(v) for k, v in _mapping(md.get("labels")).items()}
    annotations = _mapping(md.get("annotations"))
    requests = _pod_requests(spec, name)
    try:
        gpu = gpu_request_from_pod(pod).request
    except GpuRequestError as exc:
        raise ObjectError(exc.field, str(exc)) from exc
    extended = {
        k: v
        for k, v in requests.items()
        if k not in _SKIPPED_RESOURCES and not k.startswith("nvidia.com/mig-") and v
    }
    priority = None
    if TASK_PRIORITY_LABEL in labels:
        try:
            priority = int(labels[TASK_PRIORITY_LABEL])
        except ValueError as exc:
            raise ObjectError(
                f"metadata.labels[{TASK_PRIORITY_LABEL}]", "must be an integer"
            ) from exc
    groups: list[str] = []
    if labels.get(GPU_GROUP_LABEL):
        groups.append(labels[GPU_GROUP_LABEL])
    prefix = GPU_GROUP_LABEL + "/"
    groups.extend(sorted(k[len(prefix) :] for k in labels if k.startswith(prefix)))
    return PodInfo(
        uid=str(md.get("uid") or f"{md.get('namespace')}/{name}"),
        name=name,
        namespace=str(md.get("namespace") or ""),
        pod_group=str(annotations[POD_GROUP_ANNOTATION])
        if annotations.get(POD_GROUP_ANNOTATION)
        else None,
        cpu_millis=requests.get("cpu", 0.0) * 1000.0,
        memory_bytes=requests.get("memory", 0.0),
        gpu=gpu,
        extended=extended,
        subgroup=labels.get(SUBGROUP_LABEL) or None,
        priority=priority,
        labels=labels,
        node_selector={str(k): str(v) for k, v in _mapping(spec.get("nodeSelector")).items()},
        node_affinity=_selector_terms(spec),
        tolerations=_tolerations(spec),
        pod_affinity=_affinity_terms(spec, "podAffinity"),
        pod_anti_affinity=_affinity_terms(spec, "podAntiAffinity"),
        created_at=parse_time(md.get("creationTimestamp")) or 0.0,
        gpu_groups=tuple(groups),
        host_ports=_host_ports(spec),
        preferred_node_affinity=_preferred_node_terms(spec),
        preferred_pod_affinity=_preferred_pod_terms(spec, "podAffinity"),
        preferred_pod_anti_affinity=_preferred_pod_terms(spec, "podAntiAffinity"),
        claims=pod_claims(spec, name),
        movable=has_controller(md),
    )


def has_controller(md: Mapping[str, Any]) -> bool:
    """Whether the pod has a controller (an owner reference with ``controller: true``) that
    makes it again when it is evicted: only such a pod can be moved by consolidation."""
    refs = md.get("ownerReferences")
    return any(isinstance(r, dict) and r.get("controller") is True for r in refs or ())


def pod_status(
    pod: dict[str, Any], bind_request: dict[str, Any] | None
) -> tuple[TaskStatus, str | None, tuple[str, ...] | None]:
    """(status, node, GPU groups from the BindRequest or None) of a non-terminal pod."""
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    node = spec.get("nodeName") or None
    if node:
        if _mapping(pod.get("metadata")).get("deletionTimestamp"):
            return TaskStatus.RELEASING, node, None
        if status.get("phase") == "Running":
            return TaskStatus.RUNNING, node, None
        return TaskStatus.BOUND, node, None
    if bind_request is not None and bind_request_live(bind_request):
        br_spec = _mapping(bind_request.get("spec"))
        groups = tuple(str(g) for g in br_spec.get("selectedGPUGroups") or [])
        return TaskStatus.BINDING, str(br_spec.get("selectedNode") or "") or None, groups
    if spec.get("schedulingGates"):
        return TaskStatus.GATED, None, None
    return TaskStatus.PENDING, None, None


_STARTED = (TaskStatus.RUNNING, TaskStatus.BOUND)


def pod_started_at(pod: Mapping[str, Any]) -> float | None:
    """When a bound pod started: its ``PodScheduled=True`` transition (the binding), else its
    ``status.startTime`` (the kubelet's); None when neither is known."""
    status = _mapping(pod.get("status"))
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled":
            if cond.get("status") == "True":
                found = parse_time(cond.get("lastTransitionTime"))
                if found is not None:
                    return found
            break
    return parse_time(status.get("startTime"))


def started_from_pods(
    tasks: Iterable[TaskSpec], pod_of: Callable[[TaskSpec], Mapping[str, Any] | None]
) -> float | None:
    """A running job's start as the cluster shows it, for a PodGroup without
    ``kai.scheduler/last-start-timestamp`` (it started while no min runtime was in force, so
    none was written): the earliest start of its bound pods. Min-runtime protection then
    applies at once when a min runtime is switched on, not only to jobs started after."""
    starts = []
    for task in tasks:
        if task.status in _STARTED:
            pod = pod_of(task)
            start = pod_started_at(pod) if pod is not None else None
            if start is not None:
                starts.append(start)
    return min(starts) if starts else None


def bind_request_live(br: dict[str, Any]) -> bool:
    phase = _mapping(br.get("status")).get("phase")
    return phase != "Failed" and not _mapping(br.get("metadata")).get("deletionTimestamp")


def is_terminal(pod: dict[str, Any]) -> bool:
    return _mapping(pod.get("status")).get("phase") in ("Succeeded", "Failed")


# -- nodes --------------------------------------------------------------------------------
def gpu_memory_mib(labels: Mapping[str, str]) -> float:
    """``nvidia.com/gpu.memory`` in MiB (values >= 1024^2 are bytes), floored to 100 MiB."""
    raw = labels.get("nvidia.com/gpu.memory")
    if raw is None:
        return 100.0
    value = float(raw)
    if value >= 1024**2:
        value = value / 1024**2
    return float(int(value // 100) * 100)


def parse_node(node: dict[str, Any], foreign: Mapping[str, float] | None = None) -> NodeSpec:
    md = _mapping(node.get("metadata"))
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    labels = {str(k): str(v) for k, v in _mapping(md.get("labels")).items()}
    alloc = _mapping(status.get("allocatable")) or _mapping(status.get("capacity"))
    values = {k: _quantity(v, f"status.allocatable.{k}") for k, v in alloc.items()}
    foreign = foreign or {}
    try:
        memory = gpu_memory_mib(labels)
    except ValueError as exc:
        raise ObjectError("metadata.labels[nvidia.com/gpu.memory]", "must be a number") from exc
    mig_devices = tuple(
        sorted((k, int(v)) for k, v in values.items() if k.startswith("nvidia.com/mig-") and v)
    )
    mig = None
    if mig_devices or labels.get("node-role.kubernetes.io/mig-enabled") == "true":
        try:
            physical = int(labels.get("nvidia.com/gpu.count") or values.get(GPU_RESOURCE, 0))
        except ValueError as exc:
            raise ObjectError(
                "metadata.labels[nvidia.com/gpu.count]", "must be an integer"
            ) from exc
        mig = MigSpec(
            strategy=labels.get("nvidia.com/mig.strategy") or "mixed",
            physical_gpus=physical,
            devices=mig_devices,
        )
    ready = False
    for cond in status.get("conditions") or []:
        cond = _mapping(cond)
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(
            str(_mapping(t).get("key") or ""),
            _mapping(t).get("value"),
            str(_mapping(t).get("effect") or "NoSchedule"),
        )
        for t in spec.get("taints") or []
    )
    extended = {
        k: v - foreign.get(k, 0.0)
        for k, v in values.items()
        if k not in _SKIPPED_RESOURCES and not k.startswith("nvidia.com/mig-")
    }
    return NodeSpec(
        name=str(md.get("name") or ""),
        cpu_millis=values.get("cpu", 0.0) * 1000.0 - foreign.get("cpu", 0.0) * 1000.0,
        memory_bytes=values.get("memory", 0.0) - foreign.get("memory", 0.0),
        gpus=int(values.get(GPU_RESOURCE, 0.0) - foreign.get(GPU_RESOURCE, 0.0))
        if not mig_devices
        else 0,
        gpu_memory_mib=memory,
        max_pods=int(values.get("pods", 110) - foreign.get("pods", 0.0)),
        labels=labels,
        extended=extended,
        mig=mig,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
    )


# -- queues, podgroups, topologies --------------------------------------------------------
def parse_queue(queue: dict[str, Any], rank: float) -> QueueSpec:
    md = _mapping(queue.get("metadata"))
    spec = _mapping(queue.get("spec"))
    resources: dict[str, QueueResource] = {}
    raw = _mapping(spec.get("resources"))
    if not raw:
        raise ObjectError("spec.resources", "required (gpu, cpu, memory quotas)")
    for key in ("gpu", "cpu", "memory"):
        item = _mapping(raw.get(key))
        try:
            quota = float(item.get("quota", 0) or 0)
            limit = float(item.get("limit", 0) or 0)
            weight = float(item.get("overQuotaWeight", 0) or 0)
        except (TypeError, ValueError) as exc:
            raise ObjectError(f"spec.resources.{key}", f"not a number: {exc}") from exc
        if key == "memory":  # megabytes (10^6) in the CRD, bytes in the core
            quota = quota * 1e6 if quota != -1 else -1.0
            limit = limit * 1e6 if limit != -1 else -1.0
        resources[key] = QueueResource(quota=quota, limit=limit, over_quota_weight=weight)
    try:
        priority = int(spec.get("priority", 100) if spec.get("priority") is not None else 100)
    except (TypeError, ValueError) as exc:
        raise ObjectError("spec.priority", "must be an integer") from exc
    return QueueSpec(
        name=str(md.get("name") or ""),
        parent=str(spec.get("parentQueue")) if spec.get("parentQueue") else None,
        priority=priority,
        creation_rank=rank,
        resources=resources,
        preempt_min_runtime=parse_duration(spec.get("preemptMinRuntime"), "spec.preemptMinRuntime"),
        reclaim_min_runtime=parse_duration(spec.get("reclaimMinRuntime"), "spec.reclaimMinRuntime"),
    )


def parse_duration(value: Any, where: str) -> float | None:
    """A Go duration (``1h30m``, ``90s``, ``500ms``) in seconds; None when absent."""
    if value is None or value == "":
        return None
    try:
        return _parse_go_duration(str(value))
    except DurationError:
        raise ObjectError(
            where, f"bad duration {value!r} (expected e.g. 90s, 10m, 1h30m)"
        ) from None


def _topology_constraint(raw: Any) -> TopologyConstraint | None:
    raw = _mapping(raw)
    if not raw or not raw.get("topology"):
        return None
    return TopologyConstraint(
        topology=str(raw["topology"]),
        required_level=raw.get("requiredTopologyLevel") or None,
        preferred_level=raw.get("preferredTopologyLevel") or None,
    )


def priority_of(class_name: str | None, classes: Mapping[str, int], default: int) -> int:
    if class_name and class_name in classes:
        return classes[class_name]
    return default


def parse_podgroup(
    pg: dict[str, Any], classes: Mapping[str, int], default_priority: int
) -> JobSpec:
    md = _mapping(pg.get("metadata"))
    spec = _mapping(pg.get("spec"))
    annotations = _mapping(md.get("annotations"))
    queue = spec.get("queue")
    if not queue:
        raise ObjectError("spec.queue", "required: the leaf queue of the workload")
    priority = priority_of(spec.get("priorityClassName"), classes, default_priority)
    preemptibility = spec.get("preemptibility") or ""
    if preemptibility not in ("", "preemptible", "non-preemptible"):
        raise ObjectError(
            "spec.preemptibility",
            f"unknown value {preemptibility!r} (preemptible, non-preemptible or empty)",
        )
    preemptible = (
        preemptibility == "preemptible" if preemptibility else priority < NON_PREEMPTIBLE_THRESHOLD
    )
    subgroups = []
    for index, sub in enumerate(spec.get("subGroups") or []):
        sub = _mapping(sub)
        if not sub.get("name"):
            raise ObjectError(f"spec.subGroups[{index}].name", "required")
        subgroups.append(
            SubGroupSpec(
                name=str(sub["name"]),
                parent=str(sub["parent"]).lower() if sub.get("parent") else None,
                min_available=int(sub["minMember"]) if sub.get("minMember") is not None else None,
                min_subgroup=int(sub["minSubGroup"])
                if sub.get("minSubGroup") is not None
                else None,
                topology=_topology_constraint(sub.get("topologyConstraint")),
            )
        )
    min_member = spec.get("minMember")
    try:
        min_available = int(min_member) if min_member is not None else None
    except (TypeError, ValueError) as exc:
        raise ObjectError("spec.minMember", "must be an integer") from exc
    namespace = str(md.get("namespace") or "")
    name = str(md.get("name") or "")
    return JobSpec(
        uid=f"{namespace}/{name}",
        name=name,
        queue=str(queue),
        priority=priority,
        preemptible=preemptible,
        created_at=parse_time(md.get("creationTimestamp")) or 0.0,
        tasks=[],
        namespace=namespace,
        min_available=min_available,
        min_subgroup=int(spec["minSubGroup"]) if spec.get("minSubGroup") is not None else None,
        subgroups=subgroups,
        topology=_topology_constraint(spec.get("topologyConstraint")),
        stale_since=parse_time(annotations.get(STALE_SINCE)),
        last_start_time=parse_time(annotations.get(LAST_START)),
        last_eviction_time=parse_time(annotations.get(LAST_EVICTION)),
        preemption_delay=parse_duration(spec.get("preemptionDelay"), "spec.preemptionDelay"),
        # "-1s": never evicted as stale; absent: the scheduler's staleGangGracePeriod
        staleness_grace_period=parse_duration(
            spec.get("stalenessGracePeriod"), "spec.stalenessGracePeriod"
        ),
    )


def parse_topology(obj: dict[str, Any]) -> TopologySpec:
    md = _mapping(obj.get("metadata"))
    levels: list[str] = []
    aliases: dict[str, str] = {}
    for index, level in enumerate(_mapping(obj.get("spec")).get("levels") or []):
        level = _mapping(level)
        label = level.get("nodeLabel")
        if not label:
            raise ObjectError(f"spec.levels[{index}].nodeLabel", "required")
        levels.append(str(label))
        if level.get("alias"):
            aliases[str(level["alias"])] = str(label)
    return TopologySpec(name=str(md.get("name") or ""), levels=levels, aliases=aliases)


def _pod_key(md: Mapping[str, Any]) -> Any:
    """What a pod's (or PodGroup's) parse depends on. A pod changes resourceVersion several
    times on its way (grouped, bound, Running) without changing what it asks for: with
    ``metadata.generation`` (bumped on every spec change) plus labels and annotations the parse
    is reused across those updates; without a generation, the resourceVersion decides."""
    generation = md.get("generation")
    if generation is None:
        return str(md.get("resourceVersion") or "")
    labels = md.get("labels") or {}
    annotations = md.get("annotations") or {}
    return (generation, tuple(labels.items()), tuple(annotations.items()))


def _count_reservations(
    reservations: list[dict[str, Any]],
    tasks_by_group: Mapping[tuple[str, str], list[TaskSpec]],
    foreign: dict[str, dict[str, float]],
) -> None:
    """A reservation pod holds its node's resources until it is gone (as the kubelet counts
    it): its pod slot, cpu and memory always; its whole GPU only while no placed task of ours
    is in its GPU group on that node -- then the group's device already stands for that GPU.
    A group whose fractional pods all finished (or whose BindRequests failed) but whose
    reservation pod still runs therefore keeps its device used, never offered to anyone."""
    live: set[tuple[str, str]] = set()
    for tasks in tasks_by_group.values():
        for task in tasks:
            if task.node is not None:
                for group in task.gpu_groups:
                    live.add((task.node, group))
    for pod in reservations:
        md = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        node = str(spec["nodeName"])
        try:
            requests = _pod_requests(spec, str(md.get("name") or ""))
        except ObjectError:
            requests = {GPU_RESOURCE: 1.0}  # a reservation is one device whatever it says
        group = str(_mapping(md.get("labels")).get(GPU_GROUP_LABEL) or "")
        if group and (node, group) in live:
            requests.pop(GPU_RESOURCE, None)
        acc = foreign.setdefault(node, {})
        for k, v in requests.items():
            acc[k] = acc.get(k, 0.0) + v
        acc["pods"] = acc.get("pods", 0.0) + 1


# -- the whole snapshot -------------------------------------------------------------------
@dataclass
class BuiltSnapshot:
    snapshot: Snapshot
    problems: list[SkippedObject] = field(default_factory=list)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # task uid -> pod
    podgroups: dict[str, dict[str, Any]] = field(default_factory=dict)  # job uid -> PodGroup
    bind_requests: dict[str, dict[str, Any]] = field(default_factory=dict)  # task uid -> BR
    stale_bind_requests: list[dict[str, Any]] = field(default_factory=list)
    ungrouped: list[dict[str, Any]] = field(default_factory=list)  # pods without a PodGroup
    existing_groups: dict[str, set[str]] = field(default_factory=dict)  # node -> GPU groups


class SnapshotBuilder:
    """Turns cache contents into Snapshots; keeps the per-pod parse cache between cycles."""

    def __init__(
        self,
        scheduler_name: str,
        config: SchedulerConfig | None = None,
        pool: NodePool | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.config = config or SchedulerConfig()
        # the shard's node pool: only its nodes, Queues and PodGroups (and their pods) are seen
        self.pool = pool or NodePool()
        # GPU sharing modes per node pool (the SharingPolicies); empty = every mode everywhere
        self.sharing_modes: Mapping[str, Collection[str]] = {}
        # parsed pods and PodGroups by uid: (resourceVersion, cache key, result); the same
        # resourceVersion is the same object, so an unchanged one is found without its key
        self._pods: dict[str, tuple[Any, Any, PodInfo | ObjectError]] = {}
        self._podgroups: dict[str, tuple[Any, tuple[Any, ...], JobSpec | ObjectError]] = {}
        # parsed nodes by uid: (cache key, result)
        self._nodes: dict[str, tuple[tuple[Any, ...], NodeSpec | ObjectError]] = {}

    def _node_spec(self, node: dict[str, Any], foreign: Mapping[str, float] | None) -> NodeSpec:
        md = node.get("metadata") or {}
        key = (md.get("resourceVersion"), tuple(sorted((foreign or {}).items())))
        uid = str(md.get("uid") or md.get("name"))
        hit = self._nodes.get(uid)
        if hit is None or hit[0] != key:
            try:
                value: NodeSpec | ObjectError = parse_node(node, foreign)
            except ObjectError as exc:
                value = exc
            hit = self._nodes[uid] = (key, value)
        if isinstance(hit[1], ObjectError):
            raise hit[1]
        # the core may keep references: every cycle gets its own object
        node_spec = _shallow_copy(hit[1])
        node_spec.labels = dict(node_spec.labels)
        return node_spec

    def _job_spec(
        self,
        pg: dict[str, Any],
        classes: Mapping[str, int],
        default_priority: int,
        classes_key: tuple[Any, ...] | None = None,
    ) -> JobSpec:
        md = pg.get("metadata") or {}
        if classes_key is None:
            classes_key = (tuple(sorted(classes.items())), default_priority)
        uid = str(md.get("uid") or f"{md.get('namespace')}/{md.get('name')}")
        rv = md.get("resourceVersion")
        hit = self._podgroups.get(uid)
        if hit is None or rv is None or hit[0] != rv or hit[1][1] != classes_key:
            # the parse reads metadata and spec, never status: a status write
            # (resourcesStatus, schedulingConditions) keeps the parse, as for pods (_pod_key)
            key = (_pod_key(md), classes_key)
            if hit is None or hit[1] != key:
                try:
                    value: JobSpec | ObjectError = parse_podgroup(pg, classes, default_priority)
                except (ValueError, TypeError) as exc:
                    value = exc if isinstance(exc, ObjectError) else ObjectError("spec", str(exc))
                hit = (rv, key, value)
            else:
                hit = (rv, key, hit[2])
            self._podgroups[uid] = hit
        if isinstance(hit[2], ObjectError):
            raise hit[2]
        job = _shallow_copy(hit[2])
        job.tasks = []
        return job

    def _pod_info(self, pod: dict[str, Any]) -> PodInfo | ObjectError:
        md = pod.get("metadata") or {}
        uid = str(md.get("uid") or "")
        rv = md.get("resourceVersion")
        hit = self._pods.get(uid)
        if hit is not None and rv is not None and hit[0] == rv:
            return hit[2]  # the very version parsed before: not even the key to build
        key = _pod_key(md)
        if hit is not None and hit[1] == key:
            self._pods[uid] = (rv, key, hit[2])
            return hit[2]
        try:
            info: PodInfo | ObjectError = parse_pod(pod)
        except ObjectError as exc:
            info = exc
        self._pods[uid] = (rv, key, info)
        return info

    def build(
        self,
        *,
        pods: Iterable[dict[str, Any]],
        nodes: Iterable[dict[str, Any]],
        podgroups: Iterable[dict[str, Any]],
        queues: Iterable[dict[str, Any]],
        bind_requests: Iterable[dict[str, Any]],
        topologies: Iterable[dict[str, Any]] = (),
        priority_classes: Iterable[dict[str, Any]] = (),
        now: float | None = None,
        volumes: VolumeIndex | None = None,
    ) -> BuiltSnapshot:
        problems: list[SkippedObject] = []
        built = BuiltSnapshot(snapshot=Snapshot(now=0.0, nodes=[], queues=[], jobs=[]))
        classes, default_priority = _priority_classes(priority_classes)
        other_pools: set[tuple[str, str]] = set()
        # every scheduler serves one pool (without a shard: the unlabelled one)
        nodes = [n for n in nodes if self.pool.holds(_labels_of(n))]
        queues = [q for q in queues if self.pool.holds(_labels_of(q))]
        podgroups, other_pools = self._own_podgroups(podgroups)
        # PodGroups first: a pod counts as a task only when its PodGroup is understood
        parsed_jobs = self._parse_podgroups(podgroups, classes, default_priority, problems)
        brs_by_pod = _bind_requests_by_pod(bind_requests)
        pod_tasks = _PodTasks()
        self._parse_pods(pods, parsed_jobs, brs_by_pod, built, pod_tasks, problems, other_pools)
        # BindRequests whose pod is gone (or terminal) are left for the caller to delete
        built.stale_bind_requests = [br for br in brs_by_pod.values() if br is not None]
        node_specs = self._parse_nodes(nodes, pod_tasks.foreign, problems)
        if self.sharing_modes:
            modes = node_sharing_modes(self.sharing_modes, node_specs, self.pool.label_key)
            for node_spec, allowed in zip(node_specs, modes, strict=True):
                node_spec.sharing_modes = allowed
        node_names = {n.name for n in node_specs}
        jobs = _assemble_jobs(parsed_jobs, pod_tasks.by_group, node_names, built)
        jobs = _attach_volumes(self._pods, jobs, built, volumes, problems)
        built.snapshot = Snapshot(
            now=time.time() if now is None else now,
            nodes=sorted(node_specs, key=lambda n: n.name),
            queues=_parse_queues(queues, problems),
            jobs=sorted(jobs, key=lambda j: j.uid),
            topologies=_parse_topologies(topologies, problems),
            config=self.config,
        )
        built.problems = problems
        return built

    def _own_podgroups(
        self, podgroups: Iterable[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
        """The PodGroups of this pool, and the (namespace, name) of the others: their pods are
        another shard's business (they are neither tasks nor "waiting for the pod-grouper")."""
        own: list[dict[str, Any]] = []
        others: set[tuple[str, str]] = set()
        for pg in podgroups:
            md = pg.get("metadata") or {}
            if self.pool.holds(md.get("labels")):
                own.append(pg)
            else:
                others.add((str(md.get("namespace") or ""), str(md.get("name") or "")))
        return own, others

    def _parse_podgroups(
        self,
        podgroups: Iterable[dict[str, Any]],
        classes: Mapping[str, int],
        default_priority: int,
        problems: list[SkippedObject],
    ) -> dict[tuple[str, str], tuple[JobSpec, dict[str, Any]]]:
        parsed_jobs: dict[tuple[str, str], tuple[JobSpec, dict[str, Any]]] = {}
        classes_key = (tuple(sorted(classes.items())), default_priority)
        for pg in podgroups:
            md = pg.get("metadata") or {}
            try:
                job = self._job_spec(pg, classes, default_priority, classes_key)
            except ObjectError as exc:
                problems.append(SkippedObject(pg, exc.field, exc.message))
                continue
            parsed_jobs[(md.get("namespace") or "", md.get("name") or "")] = (job, pg)
        return parsed_jobs

    def _parse_pods(
        self,
        pods: Iterable[dict[str, Any]],
        parsed_jobs: Mapping[tuple[str, str], object],
        brs_by_pod: dict[tuple[str, str], dict[str, Any] | None],
        built: BuiltSnapshot,
        out: _PodTasks,
        problems: list[SkippedObject],
        other_pools: Collection[tuple[str, str]] = (),
    ) -> None:
        """Ours become tasks of their PodGroup; others on nodes reduce the node's capacity."""
        seen_uids: set[str] = set()
        reservations: list[dict[str, Any]] = []
        for pod in pods:
            md = pod.get("metadata") or {}
            seen_uids.add(str(md.get("uid") or ""))
            if is_terminal(pod):
                self._finished_task(pod, parsed_jobs, out)
                continue
            spec = pod.get("spec") or {}
            ns = md.get("namespace") or ""
            ours = spec.get("schedulerName") == self.scheduler_name
            if ns == RESERVATION_NAMESPACE and ours:
                if spec.get("nodeName"):
                    reservations.append(pod)  # counted below, once the live groups are known
                continue
            # (another scheduler's reservation pods hold a whole GPU, like any foreign pod)
            if not ours:
                if spec.get("nodeName"):
                    out.add_foreign_pod(spec, md)
                continue
            group = _mapping(md.get("annotations")).get(POD_GROUP_ANNOTATION)
            if (ns, str(group)) in other_pools or (
                group is None and not self.pool.holds(md.get("labels"))
            ):
                # another shard's pod: on a node it holds that node's capacity (nodes are
                # partitioned, so only if someone bound it across pools)
                if spec.get("nodeName"):
                    out.add_foreign_pod(spec, md)
                brs_by_pod.pop((ns, str(md.get("name"))), None)
                continue
            info = self._pod_info(pod)
            if isinstance(info, ObjectError):
                problems.append(SkippedObject(pod, info.field, info.message))
                continue
            info = _with_derived_group(info, pod, ns, parsed_jobs)  # unannotated pods
            br = brs_by_pod.pop((ns, info.name), None)
            status, node, br_groups = pod_status(pod, br)
            grouped = info.pod_group is not None and (ns, info.pod_group) in parsed_jobs
            if not grouped and node is None:
                built.ungrouped.append(pod)  # waits for the pod-grouper (or a valid PodGroup)
                continue
            built.pods[info.uid] = pod
            if br is not None:
                built.bind_requests[info.uid] = br
            if not grouped:
                # placed without a (valid) PodGroup: it holds its node's capacity all the same
                out.add_ungrouped_pod(node or "", info)
                continue
            groups = br_groups if br_groups is not None else info.gpu_groups
            task = _task(info, ns, status, node, groups)
            out.by_group.setdefault((ns, str(info.pod_group)), []).append(task)
        _count_reservations(reservations, out.by_group, out.foreign)
        for uid in [u for u in self._pods if u not in seen_uids]:
            del self._pods[uid]

    def _finished_task(
        self, pod: dict[str, Any], parsed_jobs: Mapping[tuple[str, str], object], out: _PodTasks
    ) -> None:
        """A Succeeded pod of ours stays in its PodGroup as a Succeeded task that holds
        nothing: a gang whose members are finishing is not stale (KAI). Failed pods are
        left out."""
        if _mapping(pod.get("status")).get("phase") != "Succeeded":
            return
        if _mapping(pod.get("spec")).get("schedulerName") != self.scheduler_name:
            return
        ns = str(_mapping(pod.get("metadata")).get("namespace") or "")
        info = self._pod_info(pod)
        if isinstance(info, ObjectError):
            return
        info = _with_derived_group(info, pod, ns, parsed_jobs)
        if info.pod_group is None:
            return
        if (ns, info.pod_group) not in parsed_jobs:
            return
        task = _task(info, ns, TaskStatus.SUCCEEDED, None, ())
        out.by_group.setdefault((ns, info.pod_group), []).append(task)

    def _parse_nodes(
        self,
        nodes: Iterable[dict[str, Any]],
        foreign: Mapping[str, dict[str, float]],
        problems: list[SkippedObject],
    ) -> list[NodeSpec]:
        node_specs: list[NodeSpec] = []
        for node_obj in nodes:
            md = node_obj.get("metadata") or {}
            node_name = str(md.get("name") or "")
            try:
                spec_node = self._node_spec(node_obj, foreign.get(node_name))
            except ObjectError as exc:
                problems.append(SkippedObject(node_obj, exc.field, exc.message))
                continue
            node_specs.append(spec_node)
        return node_specs


class _PodTasks:
    """What the pod pass collects: tasks by PodGroup, and per node the requests of the pods
    that hold its capacity without being tasks (other schedulers', or without a PodGroup)."""

    def __init__(self) -> None:
        self.by_group: dict[tuple[str, str], list[TaskSpec]] = {}
        self.foreign: dict[str, dict[str, float]] = {}

    def add_foreign_pod(self, spec: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        try:
            req = _pod_requests(spec, md.get("name") or "")
        except ObjectError:
            return
        acc = self.foreign.setdefault(spec["nodeName"], {})
        for k, v in req.items():
            acc[k] = acc.get(k, 0.0) + v
        acc["pods"] = acc.get("pods", 0.0) + 1

    def add_ungrouped_pod(self, node: str, info: PodInfo) -> None:
        acc = self.foreign.setdefault(node, {})
        acc["cpu"] = acc.get("cpu", 0.0) + info.cpu_millis / 1000.0
        acc["memory"] = acc.get("memory", 0.0) + info.memory_bytes
        acc[GPU_RESOURCE] = acc.get(GPU_RESOURCE, 0.0) + info.gpu.whole
        acc["pods"] = acc.get("pods", 0.0) + 1


def _task(
    info: PodInfo,
    ns: str,
    status: TaskStatus,
    node: str | None,
    groups: tuple[str, ...],
) -> TaskSpec:
    return TaskSpec(
        uid=info.uid,
        name=info.name,
        job=f"{ns}/{info.pod_group}",
        status=status,
        cpu_millis=info.cpu_millis,
        memory_bytes=info.memory_bytes,
        gpu=info.gpu,
        node=node,
        gpu_groups=groups if status is not TaskStatus.PENDING else (),
        extended=info.extended,
        subgroup=info.subgroup,
        priority=info.priority,
        labels=info.labels,
        node_selector=info.node_selector,
        node_affinity=info.node_affinity,
        tolerations=info.tolerations,
        pod_affinity=info.pod_affinity,
        pod_anti_affinity=info.pod_anti_affinity,
        created_at=info.created_at,
        namespace=ns,
        host_ports=info.host_ports,
        preferred_node_affinity=info.preferred_node_affinity,
        preferred_pod_affinity=info.preferred_pod_affinity,
        preferred_pod_anti_affinity=info.preferred_pod_anti_affinity,
        movable=info.movable,
    )


def _attach_volumes(
    parsed: Mapping[str, tuple[Any, Any, PodInfo | ObjectError]],
    jobs: list[JobSpec],
    built: BuiltSnapshot,
    volumes: VolumeIndex | None,
    problems: list[SkippedObject],
) -> list[JobSpec]:
    """Each task whose pod uses PersistentVolumeClaims gets its
    :class:`~kai.scheduler.snapshot.VolumeConstraint` (see
    :mod:`kai.reconcilers.volume_claims`; no index: no claim exists); a pod whose volume cannot
    be read is left out (with its job, when it was the job's only task) and reported."""
    from kai.reconcilers.volume_claims import VolumeIndex

    index = volumes if volumes is not None else VolumeIndex()
    kept: list[JobSpec] = []
    for job in jobs:
        tasks = []
        for task in job.tasks:
            hit = parsed.get(task.uid)
            info = hit[2] if hit is not None else None
            if isinstance(info, PodInfo) and info.claims:
                try:
                    task.volumes = index.constraint(task.namespace, info.claims)
                except ObjectError as exc:
                    pod = built.pods.pop(task.uid, None)
                    problems.append(SkippedObject(pod or {}, exc.field, exc.message))
                    continue
            tasks.append(task)
        if tasks:
            job.tasks = tasks
            kept.append(job)
        else:
            built.podgroups.pop(job.uid, None)
    return kept


def _with_derived_group(
    info: PodInfo, pod: Mapping[str, Any], ns: str, parsed_jobs: Mapping[tuple[str, str], Any]
) -> PodInfo:
    """``info`` of an unannotated pod with the PodGroup found from its owner
    (:mod:`kai.reconcilers.group_by_owner`); unchanged when annotated or there is none."""
    if info.pod_group is not None:
        return info
    name = derived_group(pod, podgroup_lookup(ns, parsed_jobs))
    return info if name is None else dataclasses.replace(info, pod_group=name)


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(obj.get("metadata")).get("labels"))


def _priority_classes(priority_classes: Iterable[dict[str, Any]]) -> tuple[dict[str, int], int]:
    """PriorityClass values by name, and the global default (or DEFAULT_PRIORITY)."""
    classes: dict[str, int] = {}
    default_priority = DEFAULT_PRIORITY
    for pc in priority_classes:
        name = (pc.get("metadata") or {}).get("name")
        try:
            value = int(pc.get("value", 0))
        except (TypeError, ValueError):
            continue
        if name:
            classes[str(name)] = value
        if pc.get("globalDefault"):
            default_priority = value
    return classes, default_priority


def _bind_requests_by_pod(
    bind_requests: Iterable[dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any] | None]:
    brs_by_pod: dict[tuple[str, str], dict[str, Any] | None] = {}
    for request in bind_requests:
        md = request.get("metadata") or {}
        pod_name = (request.get("spec") or {}).get("podName") or md.get("name")
        brs_by_pod[(md.get("namespace") or "", str(pod_name))] = request
    return brs_by_pod


def _parse_queues(
    queues: Iterable[dict[str, Any]], problems: list[SkippedObject]
) -> list[QueueSpec]:
    """Queues ranked by creation (then uid): the rank breaks fair-share ties."""
    queue_specs: list[QueueSpec] = []
    ordered = sorted(
        queues,
        key=lambda q: (
            str((q.get("metadata") or {}).get("creationTimestamp") or ""),
            str((q.get("metadata") or {}).get("uid") or ""),
        ),
    )
    for rank, queue in enumerate(ordered):
        try:
            queue_specs.append(parse_queue(queue, float(rank)))
        except ObjectError as exc:
            problems.append(SkippedObject(queue, exc.field, exc.message))
    return queue_specs


def _parse_topologies(
    topologies: Iterable[dict[str, Any]], problems: list[SkippedObject]
) -> list[TopologySpec]:
    topo_specs = []
    for topo in topologies:
        try:
            topo_specs.append(parse_topology(topo))
        except ObjectError as exc:
            problems.append(SkippedObject(topo, exc.field, exc.message))
    return topo_specs


def _assemble_jobs(
    parsed_jobs: Mapping[tuple[str, str], tuple[JobSpec, dict[str, Any]]],
    tasks_by_group: Mapping[tuple[str, str], list[TaskSpec]],
    node_names: set[str],
    built: BuiltSnapshot,
) -> list[JobSpec]:
    """Each understood PodGroup with at least one task on a known node (or pending)."""
    jobs: list[JobSpec] = []
    for key, (job, pg) in parsed_jobs.items():
        valid = []
        for task in tasks_by_group.get(key, ()):
            if task.node is not None and task.node not in node_names:
                if task.status is TaskStatus.BINDING:
                    # its BindRequest names a node that is gone: pending again
                    task.status, task.node, task.gpu_groups = TaskStatus.PENDING, None, ()
                else:
                    continue  # on an unknown node: holds nothing we schedule
            valid.append(task)
        if not valid:
            continue
        job.tasks = valid
        if job.last_start_time is None:
            job.last_start_time = started_from_pods(valid, lambda t: built.pods.get(t.uid))
        jobs.append(job)
        built.podgroups[job.uid] = pg
        for task in valid:
            if task.node is not None and task.gpu_groups:
                built.existing_groups.setdefault(task.node, set()).update(task.gpu_groups)
    return jobs
