"""A scenario file built as a live cluster: the same nodes, queues, jobs and running tasks as API
objects, so that the live system can schedule what ``kai simulate`` simulates and the two can be
compared (the parity harness of ``tests/e2e/test_parity.py``).

Mapping (docs/design/live.md, "Live = simulated"):

- everything is in a node pool of its own, ``<prefix>`` (a SchedulingShard and the node-pool label
  on nodes, queues, PodGroups and pods), so that a scheduler of that shard sees the scenario's
  cluster and nothing else of a shared API server;
- a node -> a simulated Node named ``<prefix>-<index>`` (file order = name order, which is the
  order the live snapshot lists nodes in) with the file's capacity, GPU memory and labels only;
- a queue -> a KAI ``scheduling.run.ai/v2`` Queue named ``<prefix>-<name>`` (cpu in millicores,
  memory in MB, as KAI);
- a job -> a PodGroup (``minMember``, ``queue``, a PriorityClass of the job's priority,
  ``preemptibility`` as the file says) and one pod per task (``pod-group-name``, the PodGroup as
  its controller: the harness makes an evicted pod again, so it may be moved), Running tasks
  created on their node (``spec.nodeName``) for the simulated kubelet to start;
- ages: queues in the order of their ``creationRank`` and jobs oldest first, each one of a later
  rank or a younger age in a later second (creationTimestamp has whole seconds; ties go to the
  random uid), so that the live queue and job orders are the file's.

Labels and required and preferred node and pod (anti-)affinity become the pod's; a pending
fractional or GPU-memory task becomes a pod with KAI's annotations (the binder shares the device).
What cannot be built live is refused by :func:`unsupported` with the reason, never approximated:
a *placed* shared-GPU task (the devices a running pod holds are the binder's choice, not a pod
field), MIG, per-task priorities, statuses other than Running and Pending,
staleness and deletion (they read the file's fixed clock).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kai.api.gpu_request import GPU_FRACTION, GPU_FRACTION_NUM_DEVICES, GPU_MEMORY
from kai.kube.client import ApiError, Kube
from kai.kube.resources import (
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    SCHEDULING_SHARDS,
    TOPOLOGIES,
)
from kai.kube.writes import create_if_absent
from kai.reconcilers.shard import NODE_POOL_LABEL
from kai.reconcilers.snapshot_builder import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
from kai.scenario import model
from kai.sim.nodes import SIMULATED_LABEL, NodeShape, node_manifest
from kai.sim.workloads import QUEUE_LABEL, ensure_namespace

PRIORITY_PREFIX = "kai-scenario-priority-"


def unsupported(scenario: model.Scenario) -> str | None:
    """Why the scenario cannot be built live as it is written, or None."""
    for node in scenario.nodes:
        if node.mig is not None:
            return f"MIG node {node.name}"
    for job in scenario.jobs:
        if job.stale_for_seconds is not None or job.deleted:
            return f"job {job.name}: staleness or deletion (the file's fixed clock)"
        for task in job.tasks:
            reason = _unsupported_task(task)
            if reason is not None:
                return f"task {task.name}: {reason}"
    return None


def _unsupported_task(task: model.Task) -> str | None:
    request = task.request
    if request.mig:
        return "MIG request"
    if request.is_shared and task.status != "Pending":
        return "a placed shared-GPU task (its devices are the binder's choice, not a pod field)"
    if task.priority is not None:
        return "a task priority"
    if task.status not in ("Running", "Pending"):
        return f"status {task.status}"
    return None


@dataclass
class LiveScenario:
    """The live objects of one scenario: names to map live state back to the file's."""

    scenario: model.Scenario
    namespace: str
    prefix: str
    #: job name -> its PodGroup's uid: the controller of the job's pods (a pod that comes back
    #: after an eviction is one consolidation may move; the harness plays that controller)
    owners: dict[str, str] = field(default_factory=dict)

    def node_name(self, index: int) -> str:
        return f"{self.prefix}-{index:03d}"

    def queue_name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def topology_name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def constraint(self, ref: model.TopologyRef | None) -> dict[str, Any] | None:
        """A PodGroup's (or subgroup's) ``topologyConstraint``."""
        if ref is None:
            return None
        out: dict[str, Any] = {"topology": self.topology_name(ref.topology)}
        if ref.required_level:
            out["requiredTopologyLevel"] = ref.required_level
        if ref.preferred_level:
            out["preferredTopologyLevel"] = ref.preferred_level
        return out

    @property
    def pool_labels(self) -> dict[str, str]:
        return {NODE_POOL_LABEL: self.prefix}

    @property
    def node_names(self) -> dict[str, str]:
        """Live node name -> the file's node name."""
        return {self.node_name(i): node.name for i, node in enumerate(self.scenario.nodes)}

    def pod_manifest(self, job: model.Job, task: model.Task, node: str | None) -> dict[str, Any]:
        request = task.request
        resources: dict[str, Any] = {
            "requests": {
                "cpu": f"{int(request.cpu_millis)}m",
                "memory": str(int(request.memory_bytes)),
            }
        }
        if request.whole_gpus:
            resources["limits"] = {"nvidia.com/gpu": str(request.whole_gpus)}
        annotations = {POD_GROUP_ANNOTATION: job.name}
        if request.gpu_fraction is not None:
            annotations[GPU_FRACTION] = repr(request.gpu_fraction)
        if request.gpu_memory_mib is not None:
            annotations[GPU_MEMORY] = str(int(request.gpu_memory_mib))
        if request.is_shared and request.gpu_devices != 1:
            annotations[GPU_FRACTION_NUM_DEVICES] = str(request.gpu_devices)
        spec: dict[str, Any] = {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
            "priorityClassName": priority_class(job.priority),
        }
        if node is not None:
            spec["nodeName"] = node
        affinity = _affinity(task)
        if affinity:
            spec["affinity"] = affinity
        labels = {**task.labels, QUEUE_LABEL: self.queue_name(job.queue), **self.pool_labels}
        if task.subgroup is not None:
            labels[SUBGROUP_LABEL] = task.subgroup
        metadata: dict[str, Any] = {
            "name": task.name,
            "namespace": self.namespace,
            "labels": labels,
            "annotations": annotations,
        }
        owner = self.owners.get(job.name)
        if owner:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "name": job.name,
                    "uid": owner,
                    "controller": True,
                }
            ]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _node_term(term: model.NodeAffinity) -> dict[str, Any]:
    return {"matchExpressions": [{"key": term.key, "operator": "In", "values": list(term.values)}]}


def _pod_term(term: model.AffinityTerm) -> dict[str, Any]:
    return {
        "labelSelector": {"matchLabels": dict(term.match_labels)},
        "topologyKey": term.topology_key,
    }


def _affinity(task: model.Task) -> dict[str, Any]:
    """The pod's ``spec.affinity`` for the task's required and preferred terms."""
    out: dict[str, Any] = {}
    node: dict[str, Any] = {}
    if task.node_affinity is not None:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [_node_term(task.node_affinity)]
        }
    preferred_nodes = [
        {"weight": p.weight, "preference": _node_term(p.term)}
        for p in task.preferred_node_affinity
        if isinstance(p.term, model.NodeAffinity)
    ]
    if preferred_nodes:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred_nodes
    if node:
        out["nodeAffinity"] = node
    for kind, required, preferred in (
        ("podAffinity", task.pod_affinity, task.preferred_pod_affinity),
        ("podAntiAffinity", task.pod_anti_affinity, task.preferred_pod_anti_affinity),
    ):
        pods: dict[str, Any] = {}
        if required is not None:
            pods["requiredDuringSchedulingIgnoredDuringExecution"] = [_pod_term(required)]
        weighted = [
            {"weight": p.weight, "podAffinityTerm": _pod_term(p.term)}
            for p in preferred
            if isinstance(p.term, model.AffinityTerm)
        ]
        if weighted:
            pods["preferredDuringSchedulingIgnoredDuringExecution"] = weighted
        if pods:
            out[kind] = pods
    return out


def priority_class(value: int) -> str:
    return f"{PRIORITY_PREFIX}{value}"


def build(kube: Kube, scenario: model.Scenario, namespace: str, prefix: str) -> LiveScenario:
    """Create the scenario's objects (nodes, PriorityClasses, queues, PodGroups, pods)."""
    reason = unsupported(scenario)
    if reason is not None:
        raise ValueError(f"scenario {scenario.id} cannot be built live: {reason}")
    live = LiveScenario(scenario, namespace, prefix)
    ensure_namespace(kube, namespace)
    create_if_absent(
        kube,
        SCHEDULING_SHARDS,
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "metadata": {"name": prefix},
            "spec": {"partitionLabelValue": prefix},
        },
    )
    for index, node in enumerate(scenario.nodes):
        kube.create(NODES, _node(live.node_name(index), node, live.pool_labels))
    for topology in scenario.topologies:
        kube.create(TOPOLOGIES, _topology(topology, live))
    for value in sorted({job.priority for job in scenario.jobs}):
        create_if_absent(
            kube,
            PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": priority_class(value)},
                "value": value,
            },
        )
    last_rank: float | None = None
    for queue in sorted(scenario.queues, key=lambda q: (q.creation_rank, q.name)):
        if last_rank is not None and queue.creation_rank > last_rank:
            _next_second()  # the live rank is the creation time (then the uid, random)
        last_rank = queue.creation_rank
        kube.create(QUEUES, _queue(queue, live))
    node_of = {node.name: live.node_name(i) for i, node in enumerate(scenario.nodes)}
    last_age: float | None = None
    # jobs of one age in name order, the order their tie is broken in: should a second pass
    # between two of them, the older is still the one that comes first
    for job in sorted(scenario.jobs, key=lambda j: (-j.created_minutes_ago, j.name)):
        if last_age is not None and job.created_minutes_ago < last_age:
            _next_second()
        last_age = job.created_minutes_ago
        created = kube.create(PODGROUPS, _podgroup(job, live))
        live.owners[job.name] = str(created["metadata"]["uid"])
        for task in sorted(job.tasks, key=lambda t: t.name):
            on = node_of[task.node] if task.status == "Running" and task.node else None
            kube.create(PODS, live.pod_manifest(job, task, on))
    return live


def recreate_missing(kube: Kube, live: LiveScenario) -> list[str]:
    """Play the jobs' controllers: a task whose pod is gone (evicted) gets a new pending pod of
    the same name, as a StatefulSet would. Returns the names created."""
    present = {p["metadata"]["name"] for p in kube.list(PODS, live.namespace)["items"]}
    created = []
    for job in live.scenario.jobs:
        for task in job.tasks:
            if task.name in present:
                continue
            with contextlib.suppress(ApiError):  # its old self may still be on its way out
                kube.create(PODS, live.pod_manifest(job, task, None))
                created.append(task.name)
    return created


def live_state(kube: Kube, live: LiveScenario) -> dict[str, tuple[str, str | None]]:
    """Every task's live state as the file names it: (Running | Releasing | Pending, node)."""
    names = live.node_names
    out: dict[str, tuple[str, str | None]] = {}
    pods = {p["metadata"]["name"]: p for p in kube.list(PODS, live.namespace)["items"]}
    for task in live.scenario.tasks():
        pod = pods.get(task.name)
        node = (pod or {}).get("spec", {}).get("nodeName")
        if pod is None:
            out[task.name] = ("Pending", None)
        elif pod["metadata"].get("deletionTimestamp"):
            out[task.name] = ("Releasing", names.get(node, node))
        elif node:
            out[task.name] = ("Running", names.get(node, node))
        else:
            out[task.name] = ("Pending", None)
    return out


def remove(kube: Kube, live: LiveScenario) -> None:
    """Delete what :func:`build` created (pods without grace: no kubelet finishes them)."""
    for pod in kube.list(PODS, live.namespace)["items"]:
        with contextlib.suppress(ApiError):
            kube.delete(PODS, pod["metadata"]["name"], live.namespace, grace_period_seconds=0)
    for job in live.scenario.jobs:
        with contextlib.suppress(ApiError):
            kube.delete(PODGROUPS, job.name, live.namespace)
    for queue in live.scenario.queues:
        with contextlib.suppress(ApiError):
            kube.delete(QUEUES, live.queue_name(queue.name))
    for name in live.node_names:
        with contextlib.suppress(ApiError):
            kube.delete(NODES, name)
    for topology in live.scenario.topologies:
        with contextlib.suppress(ApiError):
            kube.delete(TOPOLOGIES, live.topology_name(topology.name))
    with contextlib.suppress(ApiError):
        kube.delete(SCHEDULING_SHARDS, live.prefix)


def settle(
    read: Callable[[], Any], step: Callable[[], object], quiet: float, timeout: float
) -> Any:
    """Call ``step`` and ``read`` until ``read``'s value has not changed for ``quiet`` seconds;
    returns it (raises TimeoutError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        step()
        value = read()
        if value != last:
            last, since = value, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"the live state did not settle within {timeout}s: {last}")


def _next_second() -> None:
    now = time.time()
    time.sleep(int(now) + 1 - now + 0.01)


def _node(name: str, node: model.Node, pool: dict[str, str]) -> dict[str, Any]:
    shape = NodeShape(
        gpus=node.gpus,
        gpu_memory_mib=int(node.gpu_memory_mib),
        cpu=f"{int(node.cpu_millis)}m",
        memory=str(int(node.memory_bytes)),
        max_pods=node.max_pods,
    )
    manifest = node_manifest(name, 0, shape)
    labels = manifest["metadata"]["labels"]
    # exactly the file's labels (a scenario's node has no label it does not list), plus what the
    # simulated kubelet and the live snapshot read, which no scenario names
    kept = (
        SIMULATED_LABEL,
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.present",
    )
    manifest["metadata"]["labels"] = {
        **{k: v for k, v in labels.items() if k in kept},
        **node.labels,
        **pool,
    }
    return manifest


def _topology(topology: model.Topology, live: LiveScenario) -> dict[str, Any]:
    alias_of = {label: alias for alias, label in topology.aliases}
    levels = []
    for label in topology.levels:
        level = {"nodeLabel": label}
        if label in alias_of:
            level["alias"] = alias_of[label]
        levels.append(level)
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": live.topology_name(topology.name)},
        "spec": {"levels": levels},
    }


def _queue(queue: model.Queue, live: LiveScenario) -> dict[str, Any]:
    def resource(spec: model.QueueResource, scale: float = 1.0) -> dict[str, float]:
        def value(amount: float) -> float:
            return amount if amount == -1 else amount * scale

        return {
            "quota": value(spec.quota),
            "limit": value(spec.limit),
            "overQuotaWeight": spec.over_quota_weight,
        }

    spec: dict[str, Any] = {
        "priority": queue.priority,
        "resources": {
            "gpu": resource(queue.gpu),
            "cpu": resource(queue.cpu_millis),
            "memory": resource(queue.memory_bytes, 1e-6),
        },
    }
    if queue.parent:
        spec["parentQueue"] = live.queue_name(queue.parent)
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": live.queue_name(queue.name), "labels": live.pool_labels},
        "spec": spec,
    }


def _podgroup(job: model.Job, live: LiveScenario) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "queue": live.queue_name(job.queue),
        "priorityClassName": priority_class(job.priority),
        "preemptibility": "preemptible" if job.preemptible else "non-preemptible",
    }
    if job.min_available is not None:
        spec["minMember"] = job.min_available
    if job.min_subgroup is not None:
        spec["minSubGroup"] = job.min_subgroup
    constraint = live.constraint(job.topology)
    if constraint:
        spec["topologyConstraint"] = constraint
    subgroups = []
    for sub in job.subgroups:
        entry: dict[str, Any] = {"name": sub.name}
        if sub.parent:
            entry["parent"] = sub.parent
        if sub.min_available is not None:
            entry["minMember"] = sub.min_available
        if sub.min_subgroup is not None:
            entry["minSubGroup"] = sub.min_subgroup
        constraint = live.constraint(sub.topology)
        if constraint:
            entry["topologyConstraint"] = constraint
        subgroups.append(entry)
    if subgroups:
        spec["subGroups"] = subgroups
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": live.namespace, "labels": live.pool_labels},
        "spec": spec,
    }
