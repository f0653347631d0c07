"""Rules for the policy documents that JSON Schema cannot express.

- ``topology``: a Topology or TopologyPolicy has unique node labels, ``kubernetes.io/hostname``
  only as its last level, unique aliases that differ from every node label (KAI's own CEL and
  webhook rules); Topology names are unique across both kinds (one compiles into the other).
- ``policy``: at most one SchedulerPolicy and one SharingPolicy per node pool; a warning when a
  SchedulerPolicy enables consolidation while a placement strategy is ``spread`` (KAI turns
  consolidation off then).

Reading is tolerant of values the schema check already reported.
"""

from __future__ import annotations

import re
from typing import Any

from kai.gitops.loader import Document, FieldPath
from kai.gitops.problems import Problem

__all__ = ["check_policies"]

TOPOLOGY = ("kai.scheduler/v1alpha1", "Topology")
TOPOLOGY_POLICY = ("gitops.kai.scheduler/v1alpha1", "TopologyPolicy")
SHARING_POLICY = ("gitops.kai.scheduler/v1alpha1", "SharingPolicy")
SCHEDULER_POLICY = ("gitops.kai.scheduler/v1alpha1", "SchedulerPolicy")

_LEVEL_PATH = re.compile(r"^levels\[(\d+)\]\.(nodeLabel|alias)$")


def _spec(doc: Document) -> dict[str, Any]:
    spec = doc.data.get("spec")
    return spec if isinstance(spec, dict) else {}


def _topology(doc: Document) -> list[Problem]:
    from kai.api.topology import TopologyLevel, TopologySpec, topology_problems

    levels = _spec(doc).get("levels")
    if not isinstance(levels, list):
        return []
    parsed: list[TopologyLevel] = []
    for item in levels:
        if not isinstance(item, dict) or not isinstance(item.get("nodeLabel"), str):
            return []  # the schema check reports it; the rules need every level
        alias = item.get("alias")
        parsed.append(
            TopologyLevel.model_construct(
                nodeLabel=item["nodeLabel"], alias=alias if isinstance(alias, str) else None
            )
        )
    problems = []
    for field, message in topology_problems(TopologySpec.model_construct(levels=parsed)):
        match = _LEVEL_PATH.match(field)
        path: FieldPath = (
            ("spec", "levels", int(match[1]), match[2]) if match else ("spec", "levels")
        )
        problems.append(
            Problem.at(doc.value_at(path), "topology", message, object=doc.object_name, path=field)
        )
    return problems


def _first_place(doc: Document, path: FieldPath) -> str:
    at = doc.value_at(path)
    return f"{doc.object_name} ({at.file}:{at.line})"


def check_policies(documents: list[Document]) -> list[Problem]:
    """Problems of the Topology, TopologyPolicy, SharingPolicy and SchedulerPolicy documents."""
    problems: list[Problem] = []
    topologies: dict[str, Document] = {}
    pools: dict[tuple[str, str], Document] = {}
    for doc in sorted(documents, key=Document.order):
        identity = (doc.api_version, doc.kind)
        if identity in (TOPOLOGY, TOPOLOGY_POLICY):
            problems.extend(_topology(doc))
            name = doc.name or ""
            if name in topologies:
                problems.append(
                    Problem.at(
                        doc.value_at(("metadata", "name")),
                        "topology",
                        f"a Topology named {name!r} is already defined by "
                        f"{_first_place(topologies[name], ('metadata', 'name'))}",
                        object=doc.object_name,
                        path="metadata.name",
                    )
                )
            else:
                topologies[name] = doc
        elif identity in (SHARING_POLICY, SCHEDULER_POLICY):
            spec = _spec(doc)
            pool = spec.get("nodePool", "")
            if not isinstance(pool, str):
                continue
            key = (doc.kind or "", pool)
            where: FieldPath = ("spec", "nodePool") if "nodePool" in spec else ("metadata", "name")
            if key in pools:
                shown = repr(pool) if pool else '"" (the default pool)'
                problems.append(
                    Problem.at(
                        doc.value_at(where),
                        "policy",
                        f"node pool {shown} already has a {doc.kind}: "
                        f"{_first_place(pools[key], ('metadata', 'name'))}; "
                        "write one per node pool",
                        object=doc.object_name,
                        path="nodePool",
                    )
                )
            else:
                pools[key] = doc
            if identity == SCHEDULER_POLICY:
                problems.extend(_consolidation(doc, spec))
    return problems


def _consolidation(doc: Document, spec: dict[str, Any]) -> list[Problem]:
    strategy = spec.get("placementStrategy")
    actions = spec.get("actions")
    if not isinstance(strategy, dict) or not isinstance(actions, dict):
        return []
    consolidation = actions.get("consolidation")
    if not isinstance(consolidation, dict) or consolidation.get("enabled") is not True:
        return []
    spread = [r for r in ("gpu", "cpu") if strategy.get(r) == "spread"]
    if not spread:
        return []
    return [
        Problem.at(
            doc.value_at(("spec", "actions", "consolidation", "enabled")),
            "policy",
            f"consolidation is enabled but the {' and '.join(spread)} placement strategy is "
            "spread; the scheduler runs consolidation only when both strategies are binpack",
            object=doc.object_name,
            path="actions.consolidation.enabled",
            severity="warning",
        )
    ]
