"""Realistic workload objects and their pods, as each operator creates them (names, labels,
owner references)."""

from __future__ import annotations

import itertools
from typing import Any

_uids = itertools.count(1)

NS = "ml"


def uid() -> str:
    return f"00000000-0000-4000-8000-{next(_uids):012d}"


def obj(
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any] | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid()}
    if labels:
        md["labels"] = labels
    if annotations:
        md["annotations"] = annotations
    if owner is not None:
        md["ownerReferences"] = [ref(owner)]
    out = {"apiVersion": api_version, "kind": kind, "metadata": md, "spec": spec or {}}
    if status is not None:
        out["status"] = status
    return out


def ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str,
    owner: dict[str, Any] | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
) -> dict[str, Any]:
    p = obj("v1", "Pod", name, labels=labels, annotations=annotations, owner=owner)
    p["spec"] = {
        "schedulerName": "kai-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
            }
        ],
    }
    return p


def template(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "busybox"}],
        }
    }
    if annotations:
        t["metadata"] = {"annotations": annotations}
    return t


# -- Kubeflow training operator --------------------------------------------------------------
def pytorchjob(
    name: str,
    masters: int,
    workers: int,
    *,
    elastic: tuple[int, int] | None = None,
    worker_annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if masters:
        specs["Master"] = {
            "replicas": masters,
            "restartPolicy": "OnFailure",
            "template": template(),
        }
    specs["Worker"] = {
        "replicas": workers,
        "restartPolicy": "OnFailure",
        "template": template(worker_annotations),
    }
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if elastic:
        spec["elasticPolicy"] = {"minReplicas": elastic[0], "maxReplicas": elastic[1]}
    return obj("kubeflow.org/v1", "PyTorchJob", name, spec, labels=labels)


def training_pods(job: dict[str, Any], rtype: str, count: int) -> list[dict[str, Any]]:
    """Pods as the training operator creates them: ``<job>-<type>-<i>``."""
    name = job["metadata"]["name"]
    operator = f"{job['kind'].lower()}-controller"
    return [
        pod(
            f"{name}-{rtype}-{i}",
            job,
            labels={
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": operator,
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(i),
                "training.kubeflow.org/job-role": rtype if rtype in ("master", "launcher") else "",
            },
        )
        for i in range(count)
    ]


# -- KubeRay --------------------------------------------------------------------------------
def raycluster_spec(groups: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rayVersion": "2.46.0",
        "headGroupSpec": {"rayStartParams": {}, "template": template()},
        "workerGroupSpecs": [
            {"rayStartParams": {}, "template": template(), **group} for group in groups
        ],
    }


def ray_pods(cluster: dict[str, Any], group: str, count: int) -> list[dict[str, Any]]:
    """Pods as KubeRay creates them: ``<cluster>-head-<rand>``,
    ``<cluster>-<group>-worker-<rand>``."""
    name = cluster["metadata"]["name"]
    common = {"ray.io/cluster": name, "app.kubernetes.io/created-by": "kuberay-operator"}
    if group == "headgroup":
        return [
            pod(
                f"{name}-head-x7k2p",
                cluster,
                labels={**common, "ray.io/node-type": "head", "ray.io/group": "headgroup"},
            )
        ]
    return [
        pod(
            f"{name}-{group}-worker-{i:05d}",
            cluster,
            labels={**common, "ray.io/node-type": "worker", "ray.io/group": group},
        )
        for i in range(count)
    ]


# -- JobSet ---------------------------------------------------------------------------------
def jobset(
    name: str, rjobs: list[tuple[str, int, int]], **kw: Any
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A JobSet, and its child Jobs by replicatedJob (``<js>-<rj>-<i>``)."""
    spec = {
        "replicatedJobs": [
            {
                "name": rj,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "parallelism": parallelism,
                        "completions": parallelism,
                        "completionMode": "Indexed",
                        "template": template(),
                    }
                },
            }
            for rj, replicas, parallelism in rjobs
        ]
    }
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", name, spec, **kw)
    jobs: dict[str, list[dict[str, Any]]] = {}
    for rj, replicas, _ in rjobs:
        jobs[rj] = [
            obj(
                "batch/v1",
                "Job",
                f"{name}-{rj}-{i}",
                labels={
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rj,
                    "jobset.sigs.k8s.io/job-index": str(i),
                },
                owner=js,
            )
            for i in range(replicas)
        ]
    return js, jobs


def jobset_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    labels = dict(job["metadata"]["labels"])
    labels["batch.kubernetes.io/job-completion-index"] = str(index)
    labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
    return pod(f"{job['metadata']['name']}-{index}-q8x4z", job, labels=labels)


# -- Argo Workflows ---------------------------------------------------------------------------
def workflow(
    name: str,
    templates: list[dict[str, Any]],
    *,
    labels: dict[str, str] | None = None,
    parallelism: int | None = None,
    nodes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "entrypoint": templates[0]["name"],
        "podSpecPatch": '{"schedulerName": "kai-scheduler"}',
        "templates": templates,
    }
    if parallelism:
        spec["parallelism"] = parallelism
    status = {"phase": "Running", "nodes": nodes or {}}
    return obj("argoproj.io/v1alpha1", "Workflow", name, spec, labels=labels, status=status)


def argo_pod(
    wf: dict[str, Any], template: dict[str, Any], node_name: str, suffix: str
) -> dict[str, Any]:
    """A pod as the workflow controller creates it (pod names v2: ``<wf>-<template>-<hash>``),
    carrying the template's metadata."""
    name = wf["metadata"]["name"]
    tmd = template.get("metadata") or {}
    return pod(
        f"{name}-{template['name']}-{suffix}",
        wf,
        labels={
            "workflows.argoproj.io/workflow": name,
            "workflows.argoproj.io/completed": "false",
            **(tmd.get("labels") or {}),
        },
        annotations={
            "workflows.argoproj.io/node-name": node_name,
            "workflows.argoproj.io/node-id": f"{name}-{suffix}",
            **(tmd.get("annotations") or {}),
        },
    )
