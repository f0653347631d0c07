"""What the real API server's registries default on a new Job, Deployment, ReplicaSet or
StatefulSet (``pkg/apis/*/v1/defaults.go`` and the Job strategy): replica counts and policies,
and for a Job the generated selector and the labels its pods carry."""

from __future__ import annotations

from typing import Any

JOB_NAME = "batch.kubernetes.io/job-name"
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME = "job-name"
LEGACY_CONTROLLER_UID = "controller-uid"


def job_on_create(job: dict[str, Any], uid: str) -> None:
    """Defaults of a new Job whose uid will be ``uid``: counts, policies, and unless
    ``spec.manualSelector`` the selector ``batch.kubernetes.io/controller-uid=<uid>`` with the
    four labels the real server writes into the pod template (and, if the Job has no labels,
    the template's labels on the Job itself)."""
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    if not spec.get("manualSelector"):
        spec["manualSelector"] = False
        name = job["metadata"].get("name") or ""
        spec["selector"] = {"matchLabels": {JOB_CONTROLLER_UID: uid}}
        template = spec.setdefault("template", {})
        tmd = template.setdefault("metadata", {})
        tmd["labels"] = {
            **(tmd.get("labels") or {}),
            JOB_CONTROLLER_UID: uid,
            JOB_NAME: name,
            LEGACY_CONTROLLER_UID: uid,
            LEGACY_JOB_NAME: name,
        }
    labels = (spec.get("template") or {}).get("metadata", {}).get("labels")
    if not job["metadata"].get("labels") and labels:
        job["metadata"]["labels"] = dict(labels)


def _template_labels_as_object_labels(obj: dict[str, Any]) -> None:
    labels = ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels")
    if not obj["metadata"].get("labels") and labels:
        obj["metadata"]["labels"] = dict(labels)


def deployment_on_create(deployment: dict[str, Any]) -> None:
    spec = deployment.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxSurge", "25%")
        rolling.setdefault("maxUnavailable", "25%")
    _template_labels_as_object_labels(deployment)


def replicaset_on_create(replicaset: dict[str, Any]) -> None:
    replicaset.setdefault("spec", {}).setdefault("replicas", 1)
    _template_labels_as_object_labels(replicaset)


def statefulset_on_create(statefulset: dict[str, Any]) -> None:
    spec = statefulset.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault(
        "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
    )
    _template_labels_as_object_labels(statefulset)


WORKLOAD_KEYS = {
    ("apps", "deployments"): deployment_on_create,
    ("apps", "replicasets"): replicaset_on_create,
    ("apps", "statefulsets"): statefulset_on_create,
}
