"""The binder: BindRequest -> ``pods/binding``.

For each BindRequest not yet Succeeded or Failed:

1. find the pod; if it is already on the selected node the work was done (a restart or a lost
   answer) and the BindRequest is marked Succeeded;
2. fractional GPUs: per selected GPU group, make sure the reservation pod exists
   (``kai-resource-reservation/gpu-reservation-<16 hex of sha256(node/group)>``, bound to the
   node, requesting one whole ``nvidia.com/gpu``) and wait until it publishes its GPU UUID in
   ``run.ai/reserve_for_gpu_index``; label the pod with its group (``runai-gpu-group``, or
   ``runai-gpu-group/<group>`` for several devices); write the GPU ConfigMaps the admission
   webhook points the pod's containers at (``NVIDIA_VISIBLE_DEVICES``, ``GPU_PORTION``,
   ``RUNAI_NUM_OF_GPUS``);
3. POST ``pods/binding`` with the ``received-resource-type`` annotation;
4. mark the BindRequest Succeeded -- or Failed with the reason and ``failedAttempts`` + 1.
   Transient API failures are retried with back-off first; a BindRequest with
   ``spec.backoffLimit`` is retried while ``failedAttempts < backoffLimit``. The scheduler
   deletes Failed BindRequests and places the pod again.

Reservation pods whose group has no pod left (and no live BindRequest) are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Hashable
from typing import Any, cast

from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer
from kai.kube.resources import BIND_REQUESTS, CONFIGMAPS, NAMESPACES, PODS
from kai.kube.workqueue import WorkQueue
from kai.kube.writes import (
    create_if_absent,
    create_or_get,
    delete_if_present,
    patch_if_changed,
    with_retries,
)
from kai.reconcilers.snapshot_builder import (
    GPU_GROUP_LABEL,
    RESERVATION_NAMESPACE,
    bind_request_live,
    parse_time,
)

log = logging.getLogger("kai.binder")

RECEIVED_RESOURCE_TYPE = "received-resource-type"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
SHARED_GPU_CONFIGMAP = "runai/shared-gpu-configmap"
RESERVATION_APP = "kai-resource-reservation"
RESERVATION_TIMEOUT = 40.0


def reservation_pod_name(node: str, group: str) -> str:
    return "gpu-reservation-" + hashlib.sha256(f"{node}/{group}".encode()).hexdigest()[:16]


def group_labels(groups: list[str]) -> dict[str, str]:
    if len(groups) == 1:
        return {GPU_GROUP_LABEL: groups[0]}
    return {f"{GPU_GROUP_LABEL}/{g}": g for g in groups}


def configmap_prefix(pod: dict[str, Any]) -> str:
    md = pod["metadata"]
    prefix = (md.get("annotations") or {}).get(SHARED_GPU_CONFIGMAP)
    if prefix:
        return str(prefix)
    digest = hashlib.sha256(str(md.get("uid", md["name"])).encode()).hexdigest()[:7]
    return f"{md['name'][:40].rstrip('-.')}-{digest}-shared-gpu"


class Binder:
    def __init__(
        self,
        kube: Kube,
        bind_requests: Informer,
        pods: Informer,
        recorder: EventRecorder,
        *,
        workers: int = 16,
        reservation_runtime_class: str | None = None,
        gc_period: float = 2.0,
        is_leader: Any = None,
        scheduler_name: str = "kai-scheduler",
    ) -> None:
        self.kube = kube
        # the reservation pods carry it: another kai install's scheduler counts their GPU
        self.scheduler_name = scheduler_name
        self.brs = bind_requests
        self.pods = pods
        self.recorder = recorder
        self.reservation_runtime_class = reservation_runtime_class
        self.gc_period = gc_period
        self.queue = WorkQueue("binder", self._process, workers=workers, base=0.05, cap=10.0)
        self._waiting: dict[Hashable, float] = {}
        self._group_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._stop = threading.Event()
        self._gc_thread = threading.Thread(target=self._gc_loop, name="binder-gc", daemon=True)
        self._namespace_ready = False
        self.bound = 0
        self.is_leader = is_leader or (lambda: True)
        bind_requests.add_handler(self._on_br)

    def start(self) -> Binder:
        self.queue.start()
        for br in self.brs.items():
            self._on_br("ADDED", br, None)
        self._gc_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.queue.stop()
        self._gc_thread.join(timeout=10)

    def _on_br(self, etype: str, br: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        phase = (br.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or br["metadata"].get("deletionTimestamp"):
            return
        self.queue.add((br["metadata"]["namespace"], br["metadata"]["name"]))

    # -- one BindRequest -----------------------------------------------------------------
    def _process(self, key: Hashable) -> bool | None:
        ns, name = cast(tuple[str, str], key)
        if not self.is_leader():
            self.queue.add_after(key, 1.0)  # only the Lease holder binds
            return True
        br = self.brs.get(name, ns)
        if br is None or not bind_request_live(br):
            self._waiting.pop(key, None)
            return True
        if (br.get("status") or {}).get("phase") == "Succeeded":
            return True
        try:
            outcome = self._bind(br)
        except KubeError as exc:
            from kai.kube.writes import is_transient

            if is_transient(exc) or (isinstance(exc, ApiError) and exc.status == 409):
                log.info("binder %s/%s: %s; retrying", ns, name, exc)
                return False
            outcome = f"BindingError: {exc}"
        if outcome is None:  # waiting for a reservation pod's GPU UUID
            first = self._waiting.setdefault(key, time.monotonic())
            if time.monotonic() - first > RESERVATION_TIMEOUT:
                outcome = (
                    "ReservationTimeout: no GPU UUID from the reservation pod within "
                    f"{RESERVATION_TIMEOUT:.0f}s"
                )
            else:
                self.queue.add_after(key, 0.1)
                return True
        self._waiting.pop(key, None)
        if outcome == "":
            self._set_status(br, "Succeeded", "", 0)
            self.bound += 1
            return True
        failed = int((br.get("status") or {}).get("failedAttempts") or 0) + 1
        limit = int((br.get("spec") or {}).get("backoffLimit") or 0)
        log.warning("binder %s/%s: %s (attempt %d)", ns, name, outcome, failed)
        pod = self.pods.get(str((br.get("spec") or {}).get("podName") or name), ns)
        if pod is not None:
            self.recorder.event(pod, "Warning", "FailedBinding", outcome)
        if failed < limit:
            self._set_status(br, "Pending", outcome, failed)
            self.queue.add_after(key, min(60.0, float(2**failed)))
            return True
        self._set_status(br, "Failed", outcome, failed)
        return True

    def _set_status(self, br: dict[str, Any], phase: str, reason: str, failed: int) -> None:
        status: dict[str, Any] = {"phase": phase, "reason": reason or None}
        if failed:
            status["failedAttempts"] = failed
        try:
            patch_if_changed(self.kube, BIND_REQUESTS, br, {"status": status}, sub="status")
        except KubeError as exc:
            log.warning("cannot write BindRequest %s status: %s", br["metadata"]["name"], exc)

    def _bind(self, br: dict[str, Any]) -> str | None:
        """'' when bound, None when waiting, else the failure reason."""
        md, spec = br["metadata"], br.get("spec") or {}
        ns = md["namespace"]
        pod_name = str(spec.get("podName") or md["name"])
        node = str(spec.get("selectedNode") or "")
        if not node:
            return "InvalidBindRequest: spec.selectedNode is empty"
        pod = self.pods.get(pod_name, ns)
        if pod is None:
            try:
                pod = with_retries(lambda: self.kube.get(PODS, pod_name, ns))
            except ApiError as exc:
                if exc.status == 404:
                    return f"PodNotFound: pod {ns}/{pod_name} does not exist"
                raise
        verdict = _pod_verdict(md, pod, ns, pod_name, node)
        if verdict is not None:
            return verdict
        rtype = str(spec.get("receivedResourceType") or "Regular")
        if rtype == "Fraction":
            waiting_or_failed = self._share_gpus(pod, spec, node)
            if waiting_or_failed != "":
                return waiting_or_failed
        return self._post_binding(ns, pod_name, node, rtype)

    def _share_gpus(self, pod: dict[str, Any], spec: dict[str, Any], node: str) -> str | None:
        """A fractional bind's GPU groups reserved, labelled on the pod and written to its
        ConfigMaps: '' when done, None while a reservation pod starts, else the reason."""
        groups = [str(g) for g in spec.get("selectedGPUGroups") or []]
        if not groups:
            return "InvalidBindRequest: Fraction without spec.selectedGPUGroups"
        uuids = []
        for group in groups:
            uuid = self._reserve(node, group)
            if uuid is None:
                return None
            uuids.append(uuid)
        labels = group_labels(groups)
        pod = patch_if_changed(self.kube, PODS, pod, {"metadata": {"labels": labels}}) or pod
        portion = str((spec.get("receivedGPU") or {}).get("portion") or "")
        self._write_configmaps(pod, uuids, portion)
        return ""

    def _post_binding(self, ns: str, pod_name: str, node: str, rtype: str) -> str:
        try:
            self.kube.bind(ns, pod_name, node, {RECEIVED_RESOURCE_TYPE: rtype})
        except ApiError as exc:
            if exc.status == 409 and "already assigned" in exc.message:
                current = self.kube.get(PODS, pod_name, ns)
                if (current.get("spec") or {}).get("nodeName") == node:
                    return ""
                return f"AlreadyBound: {exc.message}"
            if exc.status in (404, 422) or (exc.status == 409 and "being deleted" in exc.message):
                return f"BindingError: {exc.message or exc}"
            raise
        return ""

    # -- GPU sharing ---------------------------------------------------------------------
    def _lock(self, group: str) -> threading.Lock:
        with self._locks_lock:
            lock = self._group_locks.get(group)
            if lock is None:
                lock = self._group_locks[group] = threading.Lock()
            return lock

    def _ensure_namespace(self) -> None:
        if self._namespace_ready:
            return
        # installed with kai: reading it needs only `get` on this one namespace (RBAC)
        try:
            with_retries(lambda: self.kube.get(NAMESPACES, RESERVATION_NAMESPACE))
            self._namespace_ready = True
            return
        except ApiError as exc:
            if exc.status != 404:
                raise
        create_if_absent(
            self.kube,
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RESERVATION_NAMESPACE}},
        )
        self._namespace_ready = True

    def _reserve(self, node: str, group: str) -> str | None:
        """The GPU UUID of ``group`` on ``node``, or None while its reservation pod starts."""
        name = reservation_pod_name(node, group)
        with self._lock(f"{node}/{group}"):
            pod = self.pods.get(name, RESERVATION_NAMESPACE)
            if pod is None:
                self._ensure_namespace()
                body: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": RESERVATION_NAMESPACE,
                        "labels": {"app": RESERVATION_APP, GPU_GROUP_LABEL: group},
                        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                    },
                    "spec": {
                        "nodeName": node,
                        "schedulerName": self.scheduler_name,
                        "terminationGracePeriodSeconds": 0,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "resource-reservation",
                                "image": "ghcr.io/nvidia/kai-scheduler/resource-reservation",
                                "resources": {
                                    "requests": {"nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ],
                    },
                }
                if self.reservation_runtime_class:
                    body["spec"]["runtimeClassName"] = self.reservation_runtime_class
                pod, _ = create_or_get(self.kube, PODS, body)
            if (pod.get("spec") or {}).get("nodeName") != node:
                raise ApiError(
                    409,
                    {"reason": "Conflict", "message": f"reservation pod {name} is on another node"},
                    "reserve",
                )
            uuid = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
            return str(uuid) if uuid else None

    def _write_configmaps(self, pod: dict[str, Any], uuids: list[str], portion: str) -> None:
        md = pod["metadata"]
        prefix = configmap_prefix(pod)
        containers = (pod.get("spec") or {}).get("containers") or []
        target = (md.get("annotations") or {}).get("gpu-fraction-container-name")
        index = next((i for i, c in enumerate(containers) if c.get("name") == target), 0)
        data = {
            "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
            "GPU_PORTION": portion,
            "RUNAI_NUM_OF_GPUS": portion,
        }
        owner = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md["name"],
                "uid": md["uid"],
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
        for name in (f"{prefix}-{index}", f"{prefix}-{index}-evar"):
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": md["namespace"], "ownerReferences": owner},
                "data": data,
            }
            current, created = create_or_get(self.kube, CONFIGMAPS, body)
            if not created:
                patch_if_changed(self.kube, CONFIGMAPS, current, {"data": data})

    # -- reservation clean-up ------------------------------------------------------------
    def _gc_loop(self) -> None:
        while not self._stop.wait(self.gc_period):
            if not self.is_leader():
                continue
            try:
                self.collect_reservations()
            except Exception:
                log.exception("reservation clean-up failed")

    def collect_reservations(self, min_age: float = 5.0) -> int:
        in_use: set[tuple[str, str]] = set()
        reservations = []
        for pod in self.pods.items():
            md = pod["metadata"]
            labels = md.get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName") or ""
            if md.get("namespace") == RESERVATION_NAMESPACE:
                if (pod.get("spec") or {}).get("schedulerName") == self.scheduler_name:
                    reservations.append(pod)  # another install's are not ours to collect
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for key, value in labels.items():
                if key == GPU_GROUP_LABEL or key.startswith(GPU_GROUP_LABEL + "/"):
                    in_use.add((node, value))
        for br in self.brs.items():
            if bind_request_live(br):
                spec = br.get("spec") or {}
                for group in spec.get("selectedGPUGroups") or []:
                    in_use.add((str(spec.get("selectedNode") or ""), str(group)))
        deleted = 0
        now = time.time()
        for pod in reservations:
            md = pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName") or ""
            group = (md.get("labels") or {}).get(GPU_GROUP_LABEL, "")
            if (node, group) in in_use or md.get("deletionTimestamp"):
                continue
            born = parse_time(md.get("creationTimestamp")) or now
            if now - born < min_age:
                continue
            with self._lock(f"{node}/{group}"):
                try:
                    if delete_if_present(
                        self.kube,
                        PODS,
                        md["name"],
                        RESERVATION_NAMESPACE,
                        grace_period_seconds=0,
                        uid=md.get("uid"),
                    ):
                        deleted += 1
                except KubeError as exc:
                    log.info("cannot delete reservation %s: %s", md["name"], exc)
        return deleted


def _pod_verdict(
    br_md: dict[str, Any], pod: dict[str, Any], ns: str, name: str, node: str
) -> str | None:
    """'' when the pod is already on ``node``, a failure reason when it cannot be bound there
    (replaced, bound elsewhere, being deleted), None when it may be bound."""
    owners = [r.get("uid") for r in br_md.get("ownerReferences") or []]
    if owners and pod["metadata"].get("uid") not in owners:
        return f"PodNotFound: pod {ns}/{name} was replaced (uid changed)"
    assigned = (pod.get("spec") or {}).get("nodeName")
    if assigned:
        if assigned == node:
            return ""
        return f"AlreadyBound: pod {ns}/{name} is bound to {assigned}, not {node}"
    if pod["metadata"].get("deletionTimestamp"):
        return f"PodDeleted: pod {ns}/{name} is being deleted"
    return None
