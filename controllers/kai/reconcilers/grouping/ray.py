"""KubeRay (ray.io): RayCluster, and RayJob / RayService through the RayCluster they run.

KubeRay's pods carry ``ray.io/cluster``, ``ray.io/node-type`` (head, worker) and
``ray.io/group`` (the worker group's name; ``headgroup`` for the head).
"""

from __future__ import annotations

from typing import Any

from kai.reconcilers.grouping.base import (
    Chain,
    GroupingError,
    Plan,
    annotations_of,
    count,
    describe,
    dig,
    labels_of,
    leaf,
    topology_of,
)
from kai.reconcilers.grouping.registry import default_plan, register

NODE_TYPE = "ray.io/node-type"
GROUP = "ray.io/group"
RAY_PRIORITY = "ray.io/priority-class-name"


def _cluster_spec(chain: Chain) -> tuple[dict[str, Any], str]:
    """The RayCluster spec the pod runs in, and where it was found (for messages)."""
    top = chain.top
    cluster = chain.find("ray.io", "RayCluster")
    if cluster is not None:
        return dict(cluster.get("spec") or {}), describe(cluster)
    if top.get("kind") == "RayJob":
        name = dig(top, "status", "rayClusterName")
        if name:
            found = chain.read(str(top["apiVersion"]), "RayCluster", chain.namespace, name)
            if found is not None:
                return dict(found.get("spec") or {}), describe(found)
        spec = dig(top, "spec", "rayClusterSpec")
        if isinstance(spec, dict):
            return spec, f"{describe(top)} spec.rayClusterSpec"
    if top.get("kind") == "RayService":
        spec = dig(top, "spec", "rayClusterConfig")
        if isinstance(spec, dict):
            return spec, f"{describe(top)} spec.rayClusterConfig"
    raise GroupingError(f"{describe(top)}: cannot find the RayCluster of {describe(chain.pod)}")


@register("ray.io/*", "RayCluster", "RayJob", "RayService")
def ray(chain: Chain) -> Plan:
    """One gang: the head plus, per worker group that is not suspended, ``minReplicas`` (or
    ``replicas`` when 0) times ``numOfHosts``; one subgroup for the head and one per group."""
    top = chain.top
    spec, where = _cluster_spec(chain)
    if top.get("kind") == "RayService":
        cluster = chain.find("ray.io", "RayCluster")
        plan = default_plan(chain)
        if cluster is not None:
            plan.owner = cluster
            plan.sources = [top, cluster, chain.pod]
    else:
        plan = default_plan(chain)
    subgroups = [
        leaf(
            "head",
            1,
            topology=topology_of(annotations_of(dig(spec, "headGroupSpec", "template") or {})),
        )
    ]
    total = 1
    by_group = {"headgroup": "head"}
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise GroupingError(f"{where}: workerGroupSpecs must be a list")
    for index, group in enumerate(groups):
        group = group if isinstance(group, dict) else {}
        path = f"{where}: workerGroupSpecs[{index}]"
        name = str(group.get("groupName") or f"worker-group-{index}")
        hosts = count(top, f"{path}.numOfHosts", group.get("numOfHosts"), 1) or 1
        replicas = count(top, f"{path}.replicas", group.get("replicas"), 0)
        minimum = count(top, f"{path}.minReplicas", group.get("minReplicas"), 0)
        needed = 0 if group.get("suspend") else (minimum or replicas) * hosts
        total += needed
        sub = name.lower()
        by_group[name] = sub
        subgroups.append(
            leaf(sub, needed, topology=topology_of(annotations_of(group.get("template") or {})))
        )
    plan.min_member = total
    plan.subgroups = subgroups
    pod_labels = labels_of(chain.pod)
    if pod_labels.get(NODE_TYPE) == "head":
        plan.subgroup = "head"
    elif pod_labels.get(GROUP) in by_group:
        plan.subgroup = by_group[pod_labels[GROUP]]
    ray_priority = next(
        (labels_of(o).get(RAY_PRIORITY) for o in plan.sources if labels_of(o).get(RAY_PRIORITY)),
        None,
    )
    if ray_priority:
        plan.default_priority = ray_priority
    return plan
