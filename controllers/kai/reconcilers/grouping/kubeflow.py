"""Kubeflow training jobs (kubeflow.org PyTorchJob, TFJob, MPIJob, XGBoostJob, JAXJob) and the
Trainer's TrainJob (trainer.kubeflow.org), which runs as a JobSet.

The training operator owns the pods directly and labels them
``training.kubeflow.org/replica-type`` (master, worker, launcher, ...) and
``training.kubeflow.org/replica-index``.
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
    segment_subgroups,
)
from kai.reconcilers.grouping.registry import default_plan, register, skip_top_owner
from kai.reconcilers.segments import SegmentError, plan_segments

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
JOB_NAME = "training.kubeflow.org/job-name"

_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
_REQUIRED = {"XGBoostJob": ("master", "worker"), "JAXJob": ("worker",), "MPIJob": ("launcher",)}


def replica_specs(job: dict[str, Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    """replica type (lower case) -> (replicas, the replica spec)."""
    field = _SPECS[str(job.get("kind"))]
    raw = dig(job, "spec", field)
    if not isinstance(raw, dict) or not raw:
        raise GroupingError(f"{describe(job)}: spec.{field} is required")
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for rtype, spec in raw.items():
        spec = spec if isinstance(spec, dict) else {}
        replicas = count(job, f"spec.{field}.{rtype}.replicas", spec.get("replicas"), 1)
        out[str(rtype).lower()] = (replicas, spec)
    for needed in _REQUIRED.get(str(job.get("kind")), ()):
        if needed not in out:
            raise GroupingError(f"{describe(job)}: spec.{field} needs a {needed.title()} replica")
    return out


def _min_available(job: dict[str, Any]) -> int | None:
    value = dig(job, "spec", "runPolicy", "schedulingPolicy", "minAvailable")
    if value is None:
        return None
    return count(job, "spec.runPolicy.schedulingPolicy.minAvailable", value)


def _plan(chain: Chain, minimum: int) -> Plan:
    plan = default_plan(chain)
    if minimum < 1:
        raise GroupingError(f"{describe(chain.top)}: the job has no replicas")
    plan.min_member = minimum
    return plan


@register("kubeflow.org/*", "TFJob", "XGBoostJob", "JAXJob")
def distributed(chain: Chain) -> Plan:
    """A gang of ``schedulingPolicy.minAvailable`` or of every replica."""
    job = chain.top
    specs = replica_specs(job)
    total = sum(replicas for replicas, _ in specs.values())
    return _plan(chain, _min_available(job) or total)


@register("kubeflow.org/*", "MPIJob")
def mpi(chain: Chain) -> Plan:
    """Launcher and workers in one gang; with ``launcherCreationPolicy: WaitForWorkersReady``
    the launcher is left out until its pod exists (it starts after the workers)."""
    job = chain.top
    specs = replica_specs(job)
    total = sum(replicas for replicas, _ in specs.values())
    minimum = _min_available(job)
    if minimum is None:
        minimum = total
        if dig(job, "spec", "launcherCreationPolicy") == "WaitForWorkersReady":
            name = str(job["metadata"]["name"])
            launchers = [
                p
                for p in chain.pods(chain.namespace, {JOB_NAME: name, JOB_ROLE: "launcher"})
                if p is not chain.pod
            ]
            pod_role = labels_of(chain.pod).get(JOB_ROLE) or labels_of(chain.pod).get(REPLICA_TYPE)
            if not launchers and pod_role != "launcher":
                minimum -= specs["launcher"][0]
    return _plan(chain, minimum)


@register("kubeflow.org/*", "PyTorchJob")
def pytorch(chain: Chain) -> Plan:
    """Subgroups ``master`` and ``worker``; elastic jobs need ``elasticPolicy.minReplicas``;
    ``kai.scheduler/segment-size`` on the worker template splits the workers into segments."""
    job = chain.top
    specs = replica_specs(job)
    masters = specs.get("master", (0, {}))[0]
    workers, worker_spec = specs.get("worker", (0, {}))
    total = masters + workers
    minimum = _min_available(job)
    if minimum is None:
        elastic = dig(job, "spec", "elasticPolicy", "minReplicas")
        minimum = (
            count(job, "spec.elasticPolicy.minReplicas", elastic) if elastic is not None else total
        )
    if minimum > total:
        raise GroupingError(
            f"{describe(job)}: the minimum of {minimum} replicas is more than the {total} asked"
        )
    plan = _plan(chain, minimum)
    worker_min = max(0, minimum - masters)
    pod_labels = labels_of(chain.pod)
    rtype = pod_labels.get(REPLICA_TYPE, "").lower()
    subgroups = []
    if masters:
        subgroups.append(leaf("master", min(masters, minimum)))
    template_annotations = {
        **annotations_of(dig(worker_spec, "template") or {}),
    }
    if rtype == "worker":
        for key, value in annotations_of(chain.pod).items():
            template_annotations.setdefault(key, value)
    try:
        segments = (
            plan_segments(
                describe(job),
                template_annotations,
                workers,
                worker_min,
                annotations_of(job),
                parent="worker",
            )
            if workers
            else None
        )
    except SegmentError as exc:
        raise GroupingError(str(exc)) from exc
    if segments is not None:
        subgroups.extend(segment_subgroups(segments))
    elif workers:
        subgroups.append(leaf("worker", worker_min))
    plan.subgroups = subgroups
    if rtype == "master" and masters:
        plan.subgroup = "master"
    elif rtype == "worker" and workers:
        plan.subgroup = "worker"
        if segments is not None:
            raw = pod_labels.get(REPLICA_INDEX)
            index = count(chain.pod, f"label {REPLICA_INDEX}", raw)
            try:
                plan.subgroup = segments.segment_name(index)
            except SegmentError as exc:
                raise GroupingError(f"{describe(chain.pod)}: {exc}") from exc
    return plan


@register("trainer.kubeflow.org/*", "TrainJob")
def train_job(chain: Chain) -> Plan:
    """A TrainJob runs as a JobSet: grouped as that JobSet, the TrainJob's labels first."""
    return skip_top_owner(chain)
