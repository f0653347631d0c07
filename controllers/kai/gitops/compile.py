"""Compile validated GitOps documents into the objects KAI's scheduler reads.

- every QueueTree queue becomes a ``scheduling.run.ai/v2`` Queue with every field spelled out:
  tree defaults merged resource by resource, the documented defaults filled in (quota 0,
  limit -1, overQuotaWeight 1, priority 100), parentQueue from the nesting or ``spec.parent``,
  and KAI's units (cpu in millicores and memory in megabytes = 10^6 bytes, both rounded up;
  gpu as a number; -1 kept);
- a raw KAI Queue is normalised: every field spelled out with KAI's meaning (an omitted number
  is 0), status dropped;
- a TopologyPolicy becomes a ``kai.scheduler/v1alpha1`` Topology; a raw Topology passes through;
- SchedulerPolicy and SharingPolicy settings (with KAI's defaults filled in) and the
  namespace -> queue bindings go into one ConfigMap, ``kai-scheduler/kai-scheduler-config``,
  one YAML document per data key.

Every object carries the label ``app.kubernetes.io/managed-by: kai`` and the annotation
``gitops.kai.scheduler/source`` naming the document it came from. Output order and formatting
are fixed, so the same documents always give byte-identical YAML. Call only on documents that
validated without errors.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from kai.api.quantity import format_number, to_megabytes_ceil, to_millicores_ceil
from kai.gitops.loader import Document
from kai.gitops.queue_records import QUEUE_TREE, RAW_QUEUE, tree_amount
from kai.gitops.yaml_out import dump_queue, dump_yaml

__all__ = [
    "CONFIGMAP_NAME",
    "CONFIGMAP_NAMESPACE",
    "MANAGED_BY",
    "SOURCE_ANNOTATION",
    "compile_documents",
    "dump_objects",
    "iter_compiled",
    "object_file_name",
]

MANAGED_BY = ("app.kubernetes.io/managed-by", "kai")
SOURCE_ANNOTATION = "gitops.kai.scheduler/source"
NAMESPACES_ANNOTATION = "gitops.kai.scheduler/namespaces"
CONFIGMAP_NAME = "kai-scheduler-config"
CONFIGMAP_NAMESPACE = "kai-scheduler"

TOPOLOGY = ("kai.scheduler/v1alpha1", "Topology")
TOPOLOGY_POLICY = ("gitops.kai.scheduler/v1alpha1", "TopologyPolicy")
SHARING_POLICY = ("gitops.kai.scheduler/v1alpha1", "SharingPolicy")
SCHEDULER_POLICY = ("gitops.kai.scheduler/v1alpha1", "SchedulerPolicy")

RESOURCES = ("gpu", "cpu", "memory")
_IMPLIED = {"quota": Fraction(0), "limit": Fraction(-1), "overQuotaWeight": Fraction(1)}
# KAI's default action priorities (higher runs first).
DEFAULT_ACTIONS = {
    "allocate": 500,
    "consolidation": 400,
    "reclaim": 300,
    "preempt": 200,
    "stalegangeviction": 100,
}


def _metadata(name: str, source: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    labels = dict(sorted((extra or {}).get("labels", {}).items()))
    labels[MANAGED_BY[0]] = MANAGED_BY[1]
    annotations = dict(sorted((extra or {}).get("annotations", {}).items()))
    annotations[SOURCE_ANNOTATION] = source
    return {"name": name, "labels": labels, "annotations": annotations}


def _kai_units(resource: str, value: Fraction) -> int | float:
    if resource == "cpu":
        return to_millicores_ceil(value)
    if resource == "memory":
        return to_megabytes_ceil(value)
    return format_number(value)


def _rendered(resource: str, kind: str, raw: Any) -> int | float:
    """The KAI Queue number for a QueueTree amount as written (None: not written)."""
    try:  # keyed by the type too: 1 and 1.0 are equal keys but render alike only by luck
        return _rendered_cached(resource, kind, type(raw).__name__, raw)
    except TypeError:  # not hashable (validation refuses such a value anyway)
        return _rendered_cached.__wrapped__(resource, kind, type(raw).__name__, raw)


@functools.lru_cache(maxsize=4096)
def _rendered_cached(resource: str, kind: str, _type: str, raw: Any) -> int | float:
    if kind == "overQuotaWeight":
        weight = _IMPLIED[kind] if raw is None else Fraction(repr(raw))
        return format_number(weight)
    value = _IMPLIED[kind] if raw is None else tree_amount(resource, raw)
    assert value is not None, "compile only validated documents"
    return _kai_units(resource, Fraction(value))


# --------------------------------------------------------------------------------------------
# Queues


def _tree_queues(doc: Document) -> list[dict[str, Any]]:
    spec = doc.data["spec"]
    defaults = spec.get("defaults") or {}
    source = f"QueueTree/{doc.name}"
    out: list[dict[str, Any]] = []

    def setting(item: dict[str, Any], key: str) -> Any:
        return item[key] if key in item else defaults.get(key)

    def visit(item: dict[str, Any], parent: str | None) -> None:
        resources: dict[str, dict[str, int | float]] = {}
        for resource in RESOURCES:
            entry: dict[str, int | float] = {}
            for kind in ("quota", "overQuotaWeight", "limit"):
                own = item.get(kind) or {}
                default = defaults.get(kind) or {}
                if resource in own:
                    raw = own[resource]
                elif resource in default:
                    raw = default[resource]
                else:
                    raw = None
                entry[kind] = _rendered(resource, kind, raw)
            resources[resource] = entry
        queue_spec: dict[str, Any] = {}
        if item.get("displayName") is not None:
            queue_spec["displayName"] = item["displayName"]
        if parent is not None:
            queue_spec["parentQueue"] = parent
        priority = setting(item, "priority")
        queue_spec["priority"] = 100 if priority is None else priority
        for key in ("preemptMinRuntime", "reclaimMinRuntime"):
            if setting(item, key) is not None:
                queue_spec[key] = setting(item, key)
        queue_spec["resources"] = resources
        metadata = _metadata(item["name"], source)
        if item.get("namespaces"):
            metadata["annotations"][NAMESPACES_ANNOTATION] = ",".join(item["namespaces"])
            metadata["annotations"] = dict(sorted(metadata["annotations"].items()))
        out.append(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": metadata,
                "spec": queue_spec,
            }
        )
        for child in item.get("children") or []:
            visit(child, item["name"])

    for top in spec["queues"]:
        visit(top, spec.get("parent"))
    return out


def _raw_queue(doc: Document) -> dict[str, Any]:
    data = doc.data
    spec = data.get("spec") or {}
    queue_spec: dict[str, Any] = {}
    if spec.get("displayName") is not None:
        queue_spec["displayName"] = spec["displayName"]
    if spec.get("parentQueue"):
        queue_spec["parentQueue"] = spec["parentQueue"]
    queue_spec["priority"] = spec.get("priority", 100)
    for key in ("preemptMinRuntime", "reclaimMinRuntime"):
        if spec.get(key) is not None:
            queue_spec[key] = spec[key]
    resources: dict[str, dict[str, int | float]] = {}
    given = spec.get("resources") or {}
    for resource in RESOURCES:
        entry = given.get(resource) or {}
        resources[resource] = {
            kind: format_number(Fraction(repr(entry.get(kind, 0))))
            if isinstance(entry.get(kind, 0), float)
            else int(entry.get(kind, 0))
            for kind in ("quota", "overQuotaWeight", "limit")
        }
    queue_spec["resources"] = resources
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": _metadata(doc.name or "", f"Queue/{doc.name}", data.get("metadata")),
        "spec": queue_spec,
    }


# --------------------------------------------------------------------------------------------
# Topologies


def _topology(doc: Document, *, raw: bool) -> dict[str, Any]:
    levels = []
    for level in doc.data["spec"]["levels"]:
        entry = {"nodeLabel": level["nodeLabel"]}
        if level.get("alias") is not None:
            entry["alias"] = level["alias"]
        levels.append(entry)
    source = f"{doc.kind}/{doc.name}"
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": _metadata(doc.name or "", source, doc.data.get("metadata") if raw else None),
        "spec": {"levels": levels},
    }


# --------------------------------------------------------------------------------------------
# The scheduler ConfigMap


def scheduler_settings(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A SchedulerPolicy's settings with KAI's defaults filled in and the action order resolved."""
    strategy = {"gpu": "binpack", "cpu": "binpack", **(spec.get("placementStrategy") or {})}
    priorities = dict(DEFAULT_ACTIONS)
    enabled = dict.fromkeys(DEFAULT_ACTIONS, True)
    for action, override in (spec.get("actions") or {}).items():
        override = override or {}
        if override.get("priority") is not None:
            priorities[action] = override["priority"]
        if override.get("enabled") is not None:
            enabled[action] = override["enabled"]
    if "spread" in strategy.values():
        enabled["consolidation"] = False  # KAI runs consolidation only when bin-packing
    if spec.get("maxConsolidationPreemptees") == 0:
        enabled["consolidation"] = False
    order = sorted((a for a in priorities if enabled[a]), key=lambda a: (-priorities[a], a))
    min_runtime = spec.get("minRuntime") or {}
    fairshare = spec.get("fairshare") or {}
    settings: dict[str, Any] = {
        "name": name,
        "nodePool": spec.get("nodePool", ""),
        "placementStrategy": {"gpu": strategy["gpu"], "cpu": strategy["cpu"]},
        "actions": order,
        # mappings sorted by key: the API server does not keep the order they were written in,
        # and the controller must write what `kai render` writes
        "plugins": {
            plugin: {
                k: dict(sorted(v.items())) if isinstance(v, dict) else v
                for k, v in sorted((values or {}).items())
                if v is not None
            }
            for plugin, values in sorted((spec.get("plugins") or {}).items())
        },
        "queueDepthPerAction": {
            k: v
            for k, v in sorted((spec.get("queueDepthPerAction") or {}).items())
            if v is not None
        },
        "minRuntime": {
            "preemptMinRuntime": min_runtime.get("preemptMinRuntime") or "0s",
            "reclaimMinRuntime": min_runtime.get("reclaimMinRuntime") or "0s",
            "reclaimResolveMethod": min_runtime.get("reclaimResolveMethod") or "lca",
        },
        "fairshare": {
            "kValue": fairshare["kValue"] if fairshare.get("kValue") is not None else 1.0,
            "windowSize": fairshare.get("windowSize") or "1w",
            "windowType": fairshare.get("windowType") or "sliding",
        },
        "staleGangGracePeriod": spec.get("staleGangGracePeriod") or "60s",
        "reclaimerUtilizationMultiplier": (
            spec["reclaimerUtilizationMultiplier"]
            if spec.get("reclaimerUtilizationMultiplier") is not None
            else 1.0
        ),
    }
    if fairshare.get("halfLifePeriod") is not None:
        settings["fairshare"]["halfLifePeriod"] = fairshare["halfLifePeriod"]
    if spec.get("maxConsolidationPreemptees") is not None:
        settings["maxConsolidationPreemptees"] = spec["maxConsolidationPreemptees"]
    return settings


def sharing_settings(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A SharingPolicy's settings with the defaults filled in."""
    return {
        "name": name,
        "nodePool": spec.get("nodePool", ""),
        "modes": list(spec.get("modes") or []),
        "defaultPlacement": spec.get("defaultPlacement", "pack"),
        "reservationRuntimeClassName": spec.get("reservationRuntimeClassName", "nvidia"),
    }


def _bound(queue: dict[str, Any], bindings: dict[str, str], sources: set[str]) -> None:
    """Notes the namespaces a compiled Queue is bound to (and the document it came from)."""
    annotations = queue["metadata"]["annotations"]
    if NAMESPACES_ANNOTATION not in annotations:
        return
    sources.add(annotations[SOURCE_ANNOTATION])
    name = queue["metadata"]["name"]
    bound = annotations[NAMESPACES_ANNOTATION]
    for namespace in bound.split(",") if bound else []:
        # Of two queues naming one namespace, the last by name (in any order of visits).
        if namespace not in bindings or bindings[namespace] < name:
            bindings[namespace] = name


def _configmap(
    documents: list[Document], bindings: dict[str, str], queue_sources: set[str]
) -> dict[str, Any] | None:
    data: dict[str, str] = {}
    sources: list[str] = []
    for doc in documents:
        identity = (doc.api_version, doc.kind)
        spec = doc.data.get("spec") or {}
        if identity == SCHEDULER_POLICY:
            data[f"scheduler-policy.{doc.name}.yaml"] = _dump(
                scheduler_settings(doc.name or "", spec)
            )
            sources.append(f"SchedulerPolicy/{doc.name}")
        elif identity == SHARING_POLICY:
            data[f"sharing-policy.{doc.name}.yaml"] = _dump(sharing_settings(doc.name or "", spec))
            sources.append(f"SharingPolicy/{doc.name}")
    if bindings:
        data["namespace-queues.yaml"] = _dump(dict(sorted(bindings.items())))
    if not data:
        return None
    sources.extend(sorted(queue_sources))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": CONFIGMAP_NAMESPACE,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
            "annotations": {SOURCE_ANNOTATION: ", ".join(sorted(set(sources)))},
        },
        "data": dict(sorted(data.items())),
    }


# --------------------------------------------------------------------------------------------


def compile_documents(documents: list[Document]) -> list[dict[str, Any]]:
    """The compiled objects: Queues, then Topologies (each sorted by name), then the ConfigMap."""
    queues: list[dict[str, Any]] = []
    topologies: list[dict[str, Any]] = []
    for doc in documents:
        identity = (doc.api_version, doc.kind)
        if identity == QUEUE_TREE:
            queues.extend(_tree_queues(doc))
        elif identity == RAW_QUEUE:
            queues.append(_raw_queue(doc))
        elif identity == TOPOLOGY_POLICY:
            topologies.append(_topology(doc, raw=False))
        elif identity == TOPOLOGY:
            topologies.append(_topology(doc, raw=True))
    queues.sort(key=lambda q: str(q["metadata"]["name"]))
    topologies.sort(key=lambda t: str(t["metadata"]["name"]))
    bindings: dict[str, str] = {}
    sources: set[str] = set()
    for queue in queues:
        _bound(queue, bindings, sources)
    ordered = sorted(documents, key=lambda d: (str(d.kind), str(d.name)))
    configmap = _configmap(ordered, bindings, sources)
    return queues + topologies + ([configmap] if configmap else [])


def iter_compiled(documents: list[Document]) -> Iterator[dict[str, Any]]:
    """The objects of :func:`compile_documents` one at a time, in document order (the
    ConfigMap last), for writing them one file each without holding them all: the same
    objects, as validated documents bind each namespace to one queue only."""
    bindings: dict[str, str] = {}
    sources: set[str] = set()
    for doc in documents:
        identity = (doc.api_version, doc.kind)
        if identity == QUEUE_TREE:
            for queue in _tree_queues(doc):
                _bound(queue, bindings, sources)
                yield queue
        elif identity == RAW_QUEUE:
            queue = _raw_queue(doc)
            _bound(queue, bindings, sources)
            yield queue
        elif identity == TOPOLOGY_POLICY:
            yield _topology(doc, raw=False)
        elif identity == TOPOLOGY:
            yield _topology(doc, raw=True)
    ordered = sorted(documents, key=lambda d: (str(d.kind), str(d.name)))
    configmap = _configmap(ordered, bindings, sources)
    if configmap:
        yield configmap


def object_file_name(obj: dict[str, Any]) -> str:
    """``<kind>-<name>.yaml`` in lower case, e.g. ``queue-nlp.yaml``."""
    return f"{str(obj['kind']).lower()}-{obj['metadata']['name']}.yaml"


def _dump(value: dict[str, Any]) -> str:
    if value.get("kind") == "Queue":
        return dump_queue(value)  # the same bytes, faster
    return dump_yaml(value)


def dump_objects(objects: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream (``---`` before each object)."""
    return "".join(f"---\n{_dump(obj)}" for obj in objects)


def dump_object(obj: dict[str, Any]) -> str:
    return _dump(obj)
