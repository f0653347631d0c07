"""The floor of KAI's protocol on a real API server: its writes, and no scheduler (issue 15).

A control for ``bench_real_cluster.py --floor``, as the ``null-patch`` webhook is for the webhook
benchmark: it makes no decision and reads nothing after one LIST of pods, Jobs and nodes. It
places the benchmark's pods in order, device by device (whole-GPU pods one device each, two
half-GPU pods per device), and sends for each pod the writes kai's protocol sends, from 16
threads on kai's pooled client:

- a PodGroup per bare pod and per Job (the pod-grouper's manifest);
- a whole-GPU pod: its ``pods/binding`` (kai's direct bind, ``pod-group-name`` carried);
- a half-GPU pod: its BindRequest, the reservation pod of its device (one per device; the
  simulated kubelet publishes its GPU UUID, as on a real node), its two ConfigMaps, the GPU-group
  label, its ``pods/binding``, the BindRequest's ``Succeeded`` status.

Left out, so that this is a floor: PodGroup status, Events, Queue status, every read and
retry, waiting for the reservation pod's UUID. What the control plane spends on these writes is
what any implementation of KAI's protocol costs it; kai's own CPU is on top.

    python bench/protocol_floor.py --kubeconfig KUBECONFIG --namespace bench
"""

from __future__ import annotations

import argparse
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kai.kube.client import ApiError, Kube
from kai.kube.resources import BIND_REQUESTS, CONFIGMAPS, JOBS, NAMESPACES, NODES, PODGROUPS, PODS
from kai.kube.writes import create_if_absent
from kai.reconcilers.binder import (
    RECEIVED_RESOURCE_TYPE,
    reservation_pod_manifest,
    reservation_pod_name,
    shared_gpu_configmaps,
)
from kai.reconcilers.podgrouper import podgroup_for
from kai.reconcilers.snapshot_builder import (
    GPU_GROUP_LABEL,
    POD_GROUP_ANNOTATION,
    RESERVATION_NAMESPACE,
)

GPU = "nvidia.com/gpu"


def _owner_ref(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }


def _fraction(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get("gpu-fraction") or "")


def plan(
    pods: list[dict[str, Any]], nodes: list[tuple[str, int]]
) -> list[tuple[dict[str, Any], str, int]]:
    """(pod, node, device) for every pod: whole-GPU pods a device each, half pods two a device
    (``nodes``: each node's name and GPU count)."""
    devices = ((node, gpu) for node, gpus in nodes for gpu in range(gpus))
    placed: list[tuple[dict[str, Any], str, int]] = []
    half_device: tuple[str, int] | None = None
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if _fraction(pod):
            if half_device is None:
                half_device = next(devices)
                placed.append((pod, *half_device))
            else:
                placed.append((pod, *half_device))
                half_device = None
        else:
            placed.append((pod, *next(devices)))
    return placed


class Floor:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.reserved: set[str] = set()
        self.lock = threading.Lock()

    def run(self, workers: int) -> int:
        kube, ns = self.kube, self.namespace
        pods = [
            p for p in kube.list(PODS, ns)["items"] if not (p.get("spec") or {}).get("nodeName")
        ]
        jobs = {j["metadata"]["uid"]: j for j in kube.list(JOBS, ns)["items"]}
        nodes = sorted(
            (
                n["metadata"]["name"],
                int(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0)),
            )
            for n in kube.list(NODES)["items"]
        )
        create_if_absent(
            kube,
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RESERVATION_NAMESPACE}},
        )
        # one PodGroup per Job, written before its pods are bound (as the pod-grouper would)
        group_of: dict[str, str] = {}
        job_groups: dict[str, dict[str, Any]] = {}
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            job = jobs.get(refs[0]["uid"]) if refs else None
            body = podgroup_for(pod, job)
            group_of[pod["metadata"]["uid"]] = body["metadata"]["name"]
            if job is not None:
                job_groups.setdefault(job["metadata"]["uid"], body)
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda b: create_if_absent(kube, PODGROUPS, b), job_groups.values()))
            done = list(
                pool.map(
                    lambda item: self.one(item[0], item[1], item[2], group_of, jobs),
                    plan(pods, nodes),
                )
            )
        return sum(done)

    def one(
        self,
        pod: dict[str, Any],
        node: str,
        device: int,
        group_of: dict[str, str],
        jobs: dict[str, dict[str, Any]],
    ) -> int:
        kube, md = self.kube, pod["metadata"]
        ns, name, group = md["namespace"], md["name"], group_of[md["uid"]]
        if not md.get("ownerReferences"):
            create_if_absent(kube, PODGROUPS, podgroup_for(pod, None))
        fraction = _fraction(pod)
        if not fraction:
            kube.bind(
                ns, name, node, {RECEIVED_RESOURCE_TYPE: "Regular", POD_GROUP_ANNOTATION: group}
            )
            return 1
        gpu_group = f"{node}-{device}"
        br = {
            "apiVersion": BIND_REQUESTS.api_version,
            "kind": "BindRequest",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"selected-node": node},
                "annotations": {POD_GROUP_ANNOTATION: group},
                "ownerReferences": [_owner_ref(pod)],
            },
            "spec": {
                "podName": name,
                "selectedNode": node,
                "receivedResourceType": "Fraction",
                "receivedGPU": {"count": 1, "portion": fraction},
                "selectedGPUGroups": [gpu_group],
            },
        }
        created = kube.create(BIND_REQUESTS, br)
        reservation = reservation_pod_name(node, gpu_group)
        with self.lock:
            first = reservation not in self.reserved
            self.reserved.add(reservation)
        if first:
            body = reservation_pod_manifest(reservation, node, gpu_group, "kai-scheduler")
            create_if_absent(kube, PODS, body)
        for cm in shared_gpu_configmaps(pod, [f"GPU-{gpu_group}"], fraction):
            kube.create(CONFIGMAPS, cm)
        kube.patch(PODS, name, {"metadata": {"labels": {GPU_GROUP_LABEL: gpu_group}}}, ns)
        kube.bind(ns, name, node, {RECEIVED_RESOURCE_TYPE: "Fraction", POD_GROUP_ANNOTATION: group})
        kube.patch(
            BIND_REQUESTS,
            created["metadata"]["name"],
            {"status": {"phase": "Succeeded", "reason": None}},
            ns,
            sub="status",
        )
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    kube = Kube.from_kubeconfig(args.kubeconfig)
    try:
        bound = Floor(kube, args.namespace).run(args.workers)
    except ApiError as exc:
        print(f"protocol floor: {exc}", file=sys.stderr)
        return 1
    print(f"protocol floor: {bound} pods bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
