"""A sample mix of workloads for ``kai up`` and the end-to-end tests.

Queues and namespaces follow ``examples/gitops``: single-GPU pods, fractional-GPU pods (notebooks,
online evaluation) and gang Jobs (``kai.scheduler/batch-min-member``) spread over the leaf
queues. Where a Job controller runs (a real cluster, or ``kai up``'s embedded server with its
workload controllers) :func:`submit_job` creates only the Job and the controller makes the pods;
on an embedded server without controllers it plays the controller: it creates the Job and then
its pods, owned by the Job.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from kai.kube.client import Kube
from kai.kube.resources import JOBS, NAMESPACES, PODS
from kai.kube.writes import create_if_absent, create_or_get
from kai.sim.kubelet import DURATION_ANNOTATION

QUEUE_LABEL = "kai.scheduler/queue"


def pod_manifest(  # noqa: PLR0913  one keyword (defaulted) per pod field it writes
    name: str,
    namespace: str,
    queue: str | None,
    *,
    gpus: int = 0,
    fraction: float | None = None,
    cpu: str = "1",
    memory: str = "4Gi",
    duration: float | None = None,
    priority_class: str | None = None,
    scheduler_name: str = "kai-scheduler",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    all_labels = dict(labels or {})
    if queue:
        all_labels[QUEUE_LABEL] = queue
    all_annotations = dict(annotations or {})
    if fraction is not None:
        all_annotations["gpu-fraction"] = str(fraction)
    if duration is not None:
        all_annotations[DURATION_ANNOTATION] = str(duration)
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    md: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if all_annotations:
        md["annotations"] = all_annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def ensure_namespace(kube: Kube, name: str) -> None:
    create_if_absent(
        kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


def submit_job(  # noqa: PLR0913  one keyword (defaulted) per Job field it writes
    kube: Kube,
    name: str,
    namespace: str,
    queue: str,
    *,
    pods: int,
    gpus_per_pod: int = 1,
    min_member: int | None = None,
    duration: float | None = None,
    priority_class: str | None = None,
    scheduler_name: str = "kai-scheduler",
    job_controller: bool = False,
) -> list[str]:
    """Create a batch/v1 Job and, unless a ``job_controller`` runs on the server, its ``pods``
    pods (as the Job controller would); returns the names of the pods created here."""
    template = pod_manifest(
        "",
        namespace,
        queue,
        gpus=gpus_per_pod,
        duration=duration,
        priority_class=priority_class,
        scheduler_name=scheduler_name,
    )
    del template["metadata"]["name"], template["metadata"]["namespace"]
    annotations = {"kai.scheduler/batch-min-member": str(min_member)} if min_member else {}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: queue},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    stored, _ = create_or_get(kube, JOBS, job)
    if job_controller:
        return []
    uid = stored["metadata"]["uid"]
    names = []
    for index in range(pods):
        suffix = hashlib.sha256(f"{uid}/{index}".encode()).hexdigest()[:5]
        pod_name = f"{name}-{index}-{suffix}"
        pod = pod_manifest(
            pod_name,
            namespace,
            queue,
            gpus=gpus_per_pod,
            duration=duration,
            priority_class=priority_class,
            scheduler_name=scheduler_name,
            labels={"batch.kubernetes.io/job-name": name, "job-name": name},
        )
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        create_if_absent(kube, PODS, pod)
        names.append(pod_name)
    return names


@dataclass
class Mix:
    """What :func:`submit_sample_mix` created."""

    pods: list[tuple[str, str]]  # (namespace, name) of every pod created here
    jobs: list[tuple[str, str]]
    job_pods: int = 0  # pods the Jobs' controller creates (not in ``pods``)


# (namespace, leaf queue) pairs from examples/gitops
TEAMS = (
    ("team-nlp", "nlp"),
    ("team-vision", "vision"),
    ("team-rl", "rl"),
    ("fm-pretraining", "pretraining"),
    ("notebooks", "notebooks"),
    ("online-eval", "online-eval"),
    ("recsys", "recommendations"),
    ("ci", "ci"),
)


def submit_sample_mix(
    kube: Kube,
    *,
    scale: int = 1,
    seed: int = 7,
    durations: tuple[float, float] | None = (60.0, 600.0),
    scheduler_name: str = "kai-scheduler",
    mig: bool = False,
    job_controller: bool = False,
) -> Mix:
    """Per ``scale`` unit (about 16 nodes x 8 GPUs): 12 single-GPU pods, 8 fractional pods and
    3 gang Jobs over the example queues (and 4 MIG-instance pods with ``mig``)."""
    rng = random.Random(seed)

    def duration() -> float | None:
        if durations is None:
            return None
        return round(rng.uniform(*durations))

    for ns, _ in TEAMS:
        ensure_namespace(kube, ns)
    pods: list[tuple[str, str]] = []
    jobs: list[tuple[str, str]] = []
    job_pods = 0
    for unit in range(scale):
        for i in range(12):
            ns, queue = TEAMS[i % 4]
            name = f"train-{unit}-{i:02d}"
            create_if_absent(
                kube,
                PODS,
                pod_manifest(
                    name, ns, queue, gpus=1, duration=duration(), scheduler_name=scheduler_name
                ),
            )
            pods.append((ns, name))
        for i in range(8):
            ns, queue = TEAMS[4 + i % 2]
            name = f"frac-{unit}-{i:02d}"
            fraction = (0.5, 0.25)[i % 2]
            create_if_absent(
                kube,
                PODS,
                pod_manifest(
                    name,
                    ns,
                    queue,
                    fraction=fraction,
                    duration=duration(),
                    priority_class="build" if ns == "notebooks" else "inference",
                    scheduler_name=scheduler_name,
                ),
            )
            pods.append((ns, name))
        for ns, queue, size, gpus in (
            ("fm-pretraining", "pretraining", 4, 4),
            ("team-vision", "vision", 2, 2),
            ("team-rl", "rl", 3, 1),
        ):
            name = f"{queue}-gang-{unit}"
            created = submit_job(
                kube,
                name,
                ns,
                queue,
                pods=size,
                gpus_per_pod=gpus,
                min_member=size,
                duration=duration(),
                scheduler_name=scheduler_name,
                job_controller=job_controller,
            )
            jobs.append((ns, name))
            job_pods += size if job_controller else 0
            pods.extend((ns, p) for p in created)
        for i in range(4 if mig else 0):
            name = f"mig-{unit}-{i}"
            body = pod_manifest(
                name,
                "online-eval",
                "online-eval",
                duration=duration(),
                priority_class="inference",
                scheduler_name=scheduler_name,
            )
            body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
            create_if_absent(kube, PODS, body)
            pods.append(("online-eval", name))
    return Mix(pods=pods, jobs=jobs, job_pods=job_pods)
