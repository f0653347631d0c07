"""What every grouper shares: the :class:`Plan` a grouper returns, the owner chain it gets, and
the PodGroup manifest built from both (queue, priority class, preemptibility, topology, node
pool, preemption delay, staleness grace period).

Pure module: plain mappings in, plain data out; :class:`GroupingError` names the object and
the field on bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai.api.namespace_queues import NamespaceQueues, resolve_queue
from kai.kube.resources import PODGROUPS
from kai.reconcilers.segments import SegmentPlan

QUEUE_LABEL = "kai.scheduler/queue"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
PRIORITY_LABEL = "priorityClassName"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
POD_GROUP_ANNOTATION = "pod-group-name"
SKIP_ANNOTATION = "kai.scheduler/skip-podgrouper"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
TOP_OWNER_METADATA = "kai.scheduler/top-owner-metadata"
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
PREEMPTION_DELAY = "kai.scheduler/preemption-delay"
STALENESS_GRACE = "kai.scheduler/staleness-grace-period"
DEFAULT_QUEUE = "default-queue"
TRAIN, INFERENCE, BUILD = "train", "inference", "build"

#: reads one more object: (apiVersion, kind, namespace, name) -> the object or None
Reader = Callable[[str, str, str, str], dict[str, Any] | None]
#: the pods of a namespace matching all the given labels
PodLister = Callable[[str, Mapping[str, str]], list[dict[str, Any]]]


class GroupingError(ValueError):
    """A workload the pod-grouper cannot group; the message names the object and the field."""


_EMPTY: Mapping[str, Any] = {}


def md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's metadata (not a copy: read only)."""
    return obj.get("metadata") or _EMPTY


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return md(obj).get("labels") or _EMPTY


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return md(obj).get("annotations") or _EMPTY


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind ns/name`` of an object, for messages."""
    m = md(obj)
    where = f"{m['namespace']}/" if m.get("namespace") else ""
    return f"{obj.get('kind') or 'object'} {where}{m.get('name', '?')}"


def group_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("apiVersion") or "v1").rpartition("/")[0]


def dig(obj: Any, *path: str | int) -> Any:
    """``obj[path[0]][path[1]]...`` or None where a step is missing."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or not -len(obj) <= step < len(obj):
                return None
        elif not isinstance(obj, Mapping):
            return None
        obj = obj[step] if isinstance(step, int) else obj.get(step)
        if obj is None:
            return None
    return obj


def count(obj: Mapping[str, Any], where: str, value: Any, default: int | None = None) -> int:
    """A non-negative integer field (``where`` names it in the error)."""
    if value is None:
        if default is None:
            raise GroupingError(f"{describe(obj)}: {where} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise GroupingError(f"{describe(obj)}: {where}: must be a whole number, got {value!r}")
    try:
        number = int(value)
    except ValueError as exc:
        raise GroupingError(
            f"{describe(obj)}: {where}: must be a whole number, got {value!r}"
        ) from exc
    if number < 0:
        raise GroupingError(f"{describe(obj)}: {where}: must not be negative, got {number}")
    return number


def min_member_annotation(obj: Mapping[str, Any], source: Mapping[str, str] | None = None) -> int:
    """``kai.scheduler/batch-min-member`` (a positive integer) of ``obj``, 0 when absent."""
    values = annotations_of(obj) if source is None else source
    if BATCH_MIN_MEMBER not in values:
        return 0
    raw = values[BATCH_MIN_MEMBER]
    try:
        number = int(raw)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(raw).strip() != str(number):
        raise GroupingError(
            f"{describe(obj)}: annotation {BATCH_MIN_MEMBER}={raw!r}: must be a positive integer"
        )
    return number


def topology_of(values: Mapping[str, str]) -> dict[str, str] | None:
    """The ``topologyConstraint`` the ``kai.scheduler/topology*`` annotations ask for."""
    if not values.get(TOPOLOGY):
        return None
    constraint = {"topology": values[TOPOLOGY]}
    if values.get(TOPOLOGY_REQUIRED):
        constraint["requiredTopologyLevel"] = values[TOPOLOGY_REQUIRED]
    if values.get(TOPOLOGY_PREFERRED):
        constraint["preferredTopologyLevel"] = values[TOPOLOGY_PREFERRED]
    return constraint


def leaf(
    name: str, min_member: int, parent: str | None = None, topology: dict[str, str] | None = None
) -> dict[str, Any]:
    """A leaf subgroup of a PodGroup spec."""
    sub: dict[str, Any] = {"name": name, "minMember": min_member}
    if parent:
        sub["parent"] = parent
    if topology:
        sub["topologyConstraint"] = topology
    return sub


def segment_subgroups(plan: SegmentPlan) -> list[dict[str, Any]]:
    """The segment planner's subgroups as PodGroup ``spec.subGroups`` entries."""
    out: list[dict[str, Any]] = []
    for spec in plan.subgroups():
        sub: dict[str, Any] = {"name": spec.name}
        if spec.parent:
            sub["parent"] = spec.parent
        if spec.min_subgroup is not None:
            sub["minSubGroup"] = spec.min_subgroup
        else:
            sub["minMember"] = spec.min_available or 0
        if spec.topology is not None:
            sub["topologyConstraint"] = {
                k: v
                for k, v in (
                    ("topology", spec.topology.topology),
                    ("requiredTopologyLevel", spec.topology.required_level),
                    ("preferredTopologyLevel", spec.topology.preferred_level),
                )
                if v
            }
        out.append(sub)
    return out


@dataclass
class Chain:
    """A pod and its owners: ``owners[0]`` owns the pod, ``owners[-1]`` is the top owner."""

    pod: dict[str, Any]
    owners: list[dict[str, Any]]
    read: Reader = field(default=lambda *_: None)
    pods: PodLister = field(default=lambda *_: [])

    @property
    def top(self) -> dict[str, Any]:
        return self.owners[-1] if self.owners else self.pod

    @property
    def namespace(self) -> str:
        return str(md(self.pod).get("namespace") or "")

    def find(self, group: str, kind: str) -> dict[str, Any] | None:
        """The nearest owner of that group and kind."""
        for owner in self.owners:
            if owner.get("kind") == kind and group_of(owner) == group:
                return owner
        return None

    def below(self, obj: Mapping[str, Any]) -> Chain:
        """The chain cut just below ``obj`` (``obj``'s child becomes the top owner)."""
        index = next(i for i, o in enumerate(self.owners) if o is obj)
        return Chain(self.pod, self.owners[:index], self.read, self.pods)


@dataclass
class Plan:
    """How one pod is grouped: a grouper's answer."""

    owner: dict[str, Any]  # the object the PodGroup is named after and owned by
    min_member: int | None = 1
    min_subgroup: int | None = None
    subgroups: list[dict[str, Any]] = field(default_factory=list)
    subgroup: str | None = None  # the pod's leaf subgroup
    default_priority: str = TRAIN
    kind_name: str = ""  # the workload kind the defaults ConfigMap knows it by
    kind_group: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)  # labels/annotations, first wins
    name: str | None = None  # default pg-<owner>-<ownerUID>
    topology: dict[str, str] | None = None  # default from the sources' annotations
    unknown_kind: str | None = None  # set by the default grouper for an unknown top owner

    @property
    def podgroup_name(self) -> str:
        if self.name:
            return self.name[:253]
        m = md(self.owner)
        return f"pg-{m['name']}-{m['uid']}"[:253]


@dataclass(frozen=True)
class KindDefault:
    priority: str | None
    preemptibility: str | None


def parse_default_priorities(text: str, where: str) -> dict[tuple[str, str], KindDefault]:
    """KAI's per-kind default priorities ConfigMap ``types`` value: a JSON list of
    ``{typeName, group, priorityName, preemptibility}``, keyed by (group, lower-case kind)."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GroupingError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(items, list):
        raise GroupingError(f"{where}: must be a JSON list of {{typeName, group, priorityName}}")
    out: dict[tuple[str, str], KindDefault] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("typeName"), str):
            raise GroupingError(f"{where}[{index}]: an object with a string typeName is required")
        preemptibility = item.get("preemptibility") or None
        if preemptibility not in (None, "preemptible", "non-preemptible"):
            raise GroupingError(
                f"{where}[{index}].preemptibility: {preemptibility!r} is not preemptible or "
                "non-preemptible"
            )
        key = (str(item.get("group") or ""), item["typeName"].lower())
        out[key] = KindDefault(item.get("priorityName") or None, preemptibility)
    return out


@dataclass
class Settings:
    queue_label: str = QUEUE_LABEL
    namespaces: NamespaceQueues | None = None
    kind_defaults: Mapping[tuple[str, str], KindDefault] = field(default_factory=dict)
    node_pool_label: str = NODE_POOL_LABEL  # KAI's nodePoolLabelKey: the shard of a workload


def _first(sources: list[dict[str, Any]], key: str, *, annotation: bool = False) -> str | None:
    for obj in sources:
        value = (annotations_of(obj) if annotation else labels_of(obj)).get(key)
        if value:
            return str(value)
    return None


def manifest(chain: Chain, plan: Plan, settings: Settings) -> dict[str, Any]:
    """The PodGroup the pod belongs to."""
    pod = chain.pod
    namespace = chain.namespace
    sources = plan.sources or [chain.top, pod]
    owner_sources = [s for s in sources if s is not pod]
    owner_labels: dict[str, str] = {}
    for obj in reversed(owner_sources):
        owner_labels.update(labels_of(obj))
    queue = resolve_queue(
        namespace,
        labels_of(pod),
        owner_labels if owner_sources else None,
        settings.namespaces,
        queue_label=settings.queue_label,
        default_queue=DEFAULT_QUEUE,
    )
    kind_default = settings.kind_defaults.get((plan.kind_group, plan.kind_name.lower()))
    priority = (
        _first(sources, PRIORITY_LABEL)
        or (pod.get("spec") or {}).get("priorityClassName")
        or (kind_default.priority if kind_default else None)
        or plan.default_priority
    )
    preemptibility = _first(sources, PREEMPTIBILITY_LABEL) or (
        kind_default.preemptibility if kind_default else None
    )
    if preemptibility not in (None, "preemptible", "non-preemptible"):
        raise GroupingError(
            f"label {PREEMPTIBILITY_LABEL}={preemptibility!r}: "
            "must be preemptible or non-preemptible"
        )
    spec: dict[str, Any] = {
        "queue": queue,
        "priorityClassName": priority,
        "markUnschedulable": True,
        "schedulingBackoff": -1,
    }
    if plan.subgroups:
        if plan.min_subgroup is not None:
            spec["minSubGroup"] = plan.min_subgroup
        elif plan.min_member is not None:
            spec["minMember"] = plan.min_member
        spec["subGroups"] = plan.subgroups
    else:
        spec["minMember"] = plan.min_member if plan.min_member is not None else 1
    if preemptibility:
        spec["preemptibility"] = preemptibility
    topology = plan.topology
    if topology is None:
        for obj in sources:
            topology = topology_of(annotations_of(obj))
            if topology:
                break
    if topology:
        spec["topologyConstraint"] = topology
    delay = _first(sources, PREEMPTION_DELAY, annotation=True)
    if delay:
        spec["preemptionDelay"] = delay
    grace = _first(sources, STALENESS_GRACE, annotation=True)
    if grace:
        spec["stalenessGracePeriod"] = grace
    owner = plan.owner
    om = md(owner)
    api_version = str(owner.get("apiVersion") or "v1")
    kind = str(owner.get("kind") or "Pod")
    group, _, version = api_version.rpartition("/")
    pg_labels = {settings.queue_label: queue}
    node_pool = _first(sources, settings.node_pool_label)
    if node_pool:  # copied from the owners (else the pod), as KAI: the PodGroup's shard
        pg_labels[settings.node_pool_label] = node_pool
    user = _first(sources, "user")
    if user:
        pg_labels["user"] = user
    top = chain.top
    tm = md(top)
    top_version = str(top.get("apiVersion") or "v1")
    top_group, _, top_ver = top_version.rpartition("/")
    owner_md = (
        f"name: {tm.get('name')}\nuid: {tm.get('uid')}\ngroup: {top_group}\n"
        f"version: {top_ver}\nkind: {top.get('kind') or 'Pod'}\n"
    )
    del group, version
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": plan.podgroup_name,
            "namespace": namespace,
            "labels": pg_labels,
            "annotations": {TOP_OWNER_METADATA: owner_md},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": om["name"],
                    "uid": om["uid"],
                    "controller": False,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }
