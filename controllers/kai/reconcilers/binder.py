"""The binder: BindRequest -> ``pods/binding``.

For each BindRequest not yet Succeeded or Failed:

1. find the pod; if it is already on the selected node the work was done (a restart or a lost
   answer) and the BindRequest is marked Succeeded;
2. fractional GPUs: per selected GPU group, make sure the reservation pod exists
   (``kai-resource-reservation/gpu-reservation-<16 hex of sha256(node/group)>``, bound to the
   node, requesting one whole ``nvidia.com/gpu``) and wait until it publishes its GPU UUID in
   ``run.ai/reserve_for_gpu_index`` (parked, woken by the pods watch; a reservation pod this
   binder created is trusted until the informer shows it, never asked for again); then, all at
   once, label the pod with its group (``runai-gpu-group``, or ``runai-gpu-group/<group>`` for
   several devices) and write the GPU ConfigMaps the admission webhook points the pod's
   containers at (``NVIDIA_VISIBLE_DEVICES``, ``GPU_PORTION``, ``RUNAI_NUM_OF_GPUS``);
3. once all of those are acknowledged, POST ``pods/binding`` with the
   ``received-resource-type`` annotation;
4. mark the BindRequest Succeeded (off the worker) -- or Failed with the reason and
   ``failedAttempts`` + 1.
   Transient API failures are retried with back-off first; a BindRequest with
   ``spec.backoffLimit`` is retried while ``failedAttempts < backoffLimit``. The scheduler
   deletes Failed BindRequests and places the pod again.

Reservations (see docs/design/gpu-sharing.md, "Who holds a device"): a reservation pod is
released (deleted) as soon as its group on its node has neither a non-terminal pod nor a live
BindRequest -- at once when such a pod finishes or goes away, and by a full sweep every
``gc_period`` -- only by the Lease holder. A new leader first adopts what it finds: it releases
the reservations of empty groups and duplicates, and re-creates a missing reservation of a
group that still has pods on a node.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
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
    POD_GROUP_ANNOTATION,
    RESERVATION_NAMESPACE,
    bind_request_live,
    pod_claims,
)
from kai.reconcilers.volume_binding import select_node

log = logging.getLogger("kai.binder")

RECEIVED_RESOURCE_TYPE = "received-resource-type"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
SHARED_GPU_CONFIGMAP = "runai/shared-gpu-configmap"
RESERVATION_APP = "kai-resource-reservation"
RESERVATION_TIMEOUT = 40.0
# a bind still waiting for its reservation pods' GPU this long is logged as a warning (once;
# the first wait is logged at INFO): without a GPU device plugin on the node it never ends
RESERVATION_WARN = 5.0
# a BindRequest waiting for a reservation pod's GPU UUID is woken by the pods watch; this
# re-check is only the safety net (a missed event), and costs no request
RESERVATION_RECHECK = 1.0
# a reservation pod this binder created is trusted until the pods informer shows it, at most
# this long (then the server is asked again): the informer may lag the create by seconds
CREATED_TRUST = 30.0


class ReservationRefused(Exception):
    """The reservation pod failed on its node (the message says why)."""


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


def shared_container_index(pod: dict[str, Any]) -> str:
    """KAI's index of the container that gets the shared GPU: ``N`` for the N-th container, ``iN``
    for the N-th init container (named by ``gpu-fraction-container-name``; the first container
    otherwise). The ConfigMaps are ``<prefix>-<index>`` and ``<prefix>-<index>-evar``, the names
    the admission webhook put in the pod's env."""
    spec = pod.get("spec") or {}
    target = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        "gpu-fraction-container-name"
    )
    if target:
        for key, mark in (("containers", ""), ("initContainers", "i")):
            for i, container in enumerate(spec.get(key) or []):
                if container.get("name") == target:
                    return f"{mark}{i}"
    return "0"


def reservation_pod_manifest(
    name: str, node: str, group: str, scheduler_name: str, runtime_class: str | None = None
) -> dict[str, Any]:
    """The pod that holds a shared GPU group's device on ``node`` (KAI's resource reservation
    pod): it asks for one whole GPU and publishes that device's UUID."""
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
            "schedulerName": scheduler_name,
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
    if runtime_class:
        body["spec"]["runtimeClassName"] = runtime_class
    return body


def shared_gpu_configmaps(
    pod: dict[str, Any], uuids: list[str], portion: str
) -> list[dict[str, Any]]:
    """A fractional pod's two ConfigMaps (``<prefix>-<index>`` and ``<prefix>-<index>-evar``,
    the names the admission webhook put in its env), owned by the pod."""
    md = pod["metadata"]
    prefix = configmap_prefix(pod)
    index = shared_container_index(pod)
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
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": md["namespace"], "ownerReferences": owner},
            "data": data,
        }
        for name in (f"{prefix}-{index}", f"{prefix}-{index}-evar")
    ]


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
        self._said: dict[Hashable, int] = {}  # the log level a wait was last reported at
        self._group_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._stop = threading.Event()
        self._gc_thread = threading.Thread(target=self._gc_loop, name="binder-gc", daemon=True)
        self._namespace_ready = False
        self.bound = 0
        self.is_leader = is_leader or (lambda: True)
        self._dirty: set[tuple[str, str]] = set()  # (node, group) to check for release
        self._wake = threading.Event()
        self._leading = False
        self._deleted: dict[str, str] = {}  # reservation pod name -> uid deleted by us
        # reservation pods created by this binder that the informer has not shown yet:
        # name -> (the created object, when)
        self._created: dict[str, tuple[dict[str, Any], float]] = {}
        # BindRequests bound by this binder whose Succeeded the informer has not shown yet
        self._done: dict[Hashable, str | None] = {}
        # BindRequests waiting for a reservation pod's GPU UUID: pod name -> their keys
        self._waiters: dict[str, set[Hashable]] = {}
        self._waiters_lock = threading.Lock()
        # the ConfigMap writes of a fractional bind, sent next to its group-label patch
        self._writes = ThreadPoolExecutor(2 * max(1, workers), thread_name_prefix="binder-write")
        bind_requests.add_handler(self._on_br)
        bind_requests.add_handler(self._on_br_gone)
        pods.add_handler(self._on_pod)

    def start(self) -> Binder:
        self.queue.start()
        for br in self.brs.items():
            self._on_br("ADDED", br, None)
        self._gc_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.queue.stop()
        self._gc_thread.join(timeout=10)
        self._writes.shutdown(wait=True, cancel_futures=True)

    def _on_br(self, etype: str, br: dict[str, Any], old: dict[str, Any] | None) -> None:
        phase = (br.get("status") or {}).get("phase")
        if etype == "DELETED" or phase in ("Succeeded", "Failed"):
            if self._done:
                with self._locks_lock:  # the cache has caught up with our status write
                    self._done.pop((br["metadata"]["namespace"], br["metadata"]["name"]), None)
            return
        if br["metadata"].get("deletionTimestamp"):
            return
        if etype == "ADDED":
            _trace(br["metadata"]["namespace"], br["metadata"]["name"], "seen")
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
            self._said.pop(key, None)
            return True
        if (br.get("status") or {}).get("phase") == "Succeeded" or (
            self._done.get(key) == br["metadata"].get("uid")  # bound by us, status on its way
        ):
            return True
        # past the timeout, the reservation pods are read from the server itself before the
        # bind is given up: under load the pods watch can lag the server by tens of seconds
        # (its UUID may be there, the cache not showing it yet)
        first = self._waiting.get(key)
        from_server = first is not None and time.monotonic() - first > RESERVATION_TIMEOUT
        try:
            outcome = self._bind(br, key, from_server=from_server)
        except KubeError as exc:
            from kai.kube.writes import is_transient

            if is_transient(exc) or (isinstance(exc, ApiError) and exc.status == 409):
                log.info("binder %s/%s: %s; retrying", ns, name, exc)
                return False
            outcome = f"BindingError: {exc}"
        if outcome is None:  # waiting for a reservation pod's GPU UUID
            waited = time.monotonic() - self._waiting.setdefault(key, time.monotonic())
            self._say_waiting(br, key, waited)
            if from_server:
                outcome = (
                    "ReservationTimeout: no GPU UUID from the reservation pod within "
                    f"{RESERVATION_TIMEOUT:.0f}s"
                )
            else:
                self.queue.add_after(key, RESERVATION_RECHECK)  # woken by the watch before
                return True
        self._waiting.pop(key, None)
        self._said.pop(key, None)
        if outcome == "":
            self.bound += 1
            with self._locks_lock:
                self._done[key] = br["metadata"].get("uid")
            # the pod is bound: the worker takes the next BindRequest while its status goes
            # out (a status lost to a crash is written again by the next binder, which finds
            # the pod on its node)
            self._writes.submit(self._succeeded, br)
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

    def _say_waiting(self, br: dict[str, Any], key: Hashable, waited: float) -> None:
        """Why a bind does not complete yet, once at INFO when it starts waiting and once more
        as a WARNING when it still waits after RESERVATION_WARN seconds."""
        level = logging.WARNING if waited >= RESERVATION_WARN else logging.INFO
        if self._said.get(key, logging.NOTSET) >= level:
            return
        self._said[key] = level
        md, spec = br["metadata"], br.get("spec") or {}
        node = str(spec.get("selectedNode") or "")
        pods = ", ".join(
            f"{RESERVATION_NAMESPACE}/{reservation_pod_name(node, str(g))}"
            for g in spec.get("selectedGPUGroups") or []
        )
        log.log(
            level,
            "binder %s/%s: waiting %.0fs for reservation pod(s) %s on node %s to report their "
            "GPU (annotation %s, written once the pod runs on the node with its GPU device "
            "plugin); the pod is bound only then, and the bind is given up after %.0fs",
            md.get("namespace"),
            md.get("name"),
            waited,
            pods or "(none)",
            node,
            GPU_INDEX_ANNOTATION,
            RESERVATION_TIMEOUT,
        )

    def _succeeded(self, br: dict[str, Any]) -> None:
        self._set_status(br, "Succeeded", "", 0)
        _trace(br["metadata"]["namespace"], br["metadata"]["name"], "status written")

    def _set_status(self, br: dict[str, Any], phase: str, reason: str, failed: int) -> None:
        status: dict[str, Any] = {"phase": phase, "reason": reason or None}
        if failed:
            status["failedAttempts"] = failed
        try:
            patch_if_changed(self.kube, BIND_REQUESTS, br, {"status": status}, sub="status")
        except KubeError as exc:
            log.warning("cannot write BindRequest %s status: %s", br["metadata"]["name"], exc)

    def _bind(
        self, br: dict[str, Any], key: Hashable = None, from_server: bool = False
    ) -> str | None:
        """'' when bound, None when waiting, else the failure reason. ``from_server``:
        reservation pods read from the server, not the cache."""
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
            waiting_or_failed = self._share_gpus(pod, spec, node, key, from_server)
            if waiting_or_failed != "":
                return waiting_or_failed
        if pod_claims(pod.get("spec") or {}, pod_name):
            failed = select_node(self.kube, pod, node)  # a provisioner waits for the node
            if failed:
                return failed
        extra = {  # pod-group-name, for a pod the scheduler found grouped by its owner
            k: str(v)
            for k, v in (md.get("annotations") or {}).items()
            if k == POD_GROUP_ANNOTATION and not annotations_of_pod(pod).get(k)
        }
        return self._post_binding(ns, pod_name, node, rtype, extra)

    def _share_gpus(
        self,
        pod: dict[str, Any],
        spec: dict[str, Any],
        node: str,
        key: Hashable = None,
        from_server: bool = False,
    ) -> str | None:
        """A fractional bind's GPU groups reserved, labelled on the pod and written to its
        ConfigMaps: '' when done, None while a reservation pod starts (``key`` is woken when
        its GPU UUID arrives), else the reason. The label patch and both ConfigMaps are sent
        at once: each must be there before the binding, none needs another."""
        groups = [str(g) for g in spec.get("selectedGPUGroups") or []]
        if not groups:
            return "InvalidBindRequest: Fraction without spec.selectedGPUGroups"
        uuids = []
        for group in groups:
            try:
                uuid = self._reserve(node, group, key, from_server)
            except ReservationRefused as exc:
                return str(exc)
            if uuid is None:
                return None
            uuids.append(uuid)
        md = pod["metadata"]
        _trace(md["namespace"], md["name"], "uuids known")
        portion = str((spec.get("receivedGPU") or {}).get("portion") or "")
        writes = self._configmap_writes(pod, uuids, portion)
        futures = [self._writes.submit(write) for write in writes[1:]]
        labels = group_labels(groups)
        _all_done(
            [
                lambda: patch_if_changed(self.kube, PODS, pod, {"metadata": {"labels": labels}}),
                writes[0],
            ],
            futures,
        )
        _trace(md["namespace"], md["name"], "labelled, configmaps written")
        return ""

    def _post_binding(
        self, ns: str, pod_name: str, node: str, rtype: str, extra: dict[str, str] | None = None
    ) -> str:
        try:
            self.kube.bind(ns, pod_name, node, {RECEIVED_RESOURCE_TYPE: rtype, **(extra or {})})
        except ApiError as exc:
            if exc.status == 409 and "already assigned" in exc.message:
                current = self.kube.get(PODS, pod_name, ns)
                if (current.get("spec") or {}).get("nodeName") == node:
                    return ""
                return f"AlreadyBound: {exc.message}"
            if exc.status in (404, 422) or (exc.status == 409 and "being deleted" in exc.message):
                return f"BindingError: {exc.message or exc}"
            raise
        _trace(ns, pod_name, "bound")
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

    def _reserve(
        self, node: str, group: str, waiter: Hashable = None, from_server: bool = False
    ) -> str | None:
        """The GPU UUID of ``group`` on ``node``, or None while its reservation pod starts
        (then ``waiter`` is queued again when the pods watch shows the pod change). ``from_server``:
        the reservation pod is read from the server, not the cache."""
        name = reservation_pod_name(node, group)
        with self._lock(f"{node}/{group}"):
            if waiter is not None:  # before reading the cache: an event from now on wakes it
                with self._waiters_lock:
                    self._waiters.setdefault(name, set()).add(waiter)
            uuid = self._reserve_locked(node, group, name, from_server)
            if uuid is not None and waiter is not None:
                self._unpark(name, waiter)
            return uuid

    def _unpark(self, name: str, waiter: Hashable) -> None:
        with self._waiters_lock:
            waiting = self._waiters.get(name)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[name]

    def _wake_waiters(self, name: str) -> None:
        with self._waiters_lock:
            waiting = self._waiters.pop(name, None)
        for key in waiting or ():
            self.queue.add(key)

    def _reservation_view(self, name: str) -> dict[str, Any] | None:
        """The reservation pod as the informer has it, else as this binder created it (the
        informer lags a create by up to seconds: asking the server again meanwhile would be a
        refused POST and a GET per look)."""
        pod = self.pods.get(name, RESERVATION_NAMESPACE)
        with self._locks_lock:
            created = self._created.get(name)
            if (
                pod is not None
                and created is not None
                and self._deleted.get(name) == pod["metadata"].get("uid")
            ):
                pod = None  # the one we released, still cached: ours is the newer one
            if pod is not None or created is None:
                if (
                    pod is not None
                    and created is not None
                    and created[0]["metadata"].get("uid") == pod["metadata"].get("uid")
                ):
                    del self._created[name]  # the cache has caught up
                return pod
            if time.monotonic() - created[1] > CREATED_TRUST:
                del self._created[name]
                return None
            if self._deleted.get(name) == created[0]["metadata"].get("uid"):
                return None
            return created[0]

    def _live_reservation(self, name: str) -> dict[str, Any] | None:
        """The reservation pod as the server has it now (a consistent read), None if absent."""
        try:
            return with_retries(lambda: self.kube.get(PODS, name, RESERVATION_NAMESPACE))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _reserve_locked(
        self, node: str, group: str, name: str, from_server: bool = False
    ) -> str | None:
        pod = self._live_reservation(name) if from_server else self._reservation_view(name)
        if pod is not None and (
            pod["metadata"].get("deletionTimestamp")
            or self._deleted.get(name) == pod["metadata"].get("uid")
        ):
            # released a moment ago: its device is being freed; wait until it is gone,
            # then reserve afresh (never hand out the UUID of a pod on its way out)
            live = pod if from_server else self._live_reservation(name)
            if live is not None and (
                live["metadata"].get("deletionTimestamp")
                or live["metadata"].get("uid") == pod["metadata"].get("uid")
            ):
                return None
            pod = live
        if pod is None:
            self._ensure_namespace()
            body = reservation_pod_manifest(
                name, node, group, self.scheduler_name, self.reservation_runtime_class
            )
            pod, created = create_or_get(self.kube, PODS, body)
            _trace(RESERVATION_NAMESPACE, name, "reservation created")
            if created:
                with self._locks_lock:
                    self._created[name] = (pod, time.monotonic())
        if (pod.get("spec") or {}).get("nodeName") != node:
            raise ApiError(
                409,
                {"reason": "Conflict", "message": f"reservation pod {name} is on another node"},
                "reserve",
            )
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            # the node's kubelet refused it (OutOfnvidia.com/gpu...): release it and fail
            # the BindRequest, so that the scheduler places the pod again
            self._delete_reservation(pod, "refused by its node")
            raise ReservationRefused(
                f"ReservationRefused: reservation pod {name} on {node}: "
                f"{status.get('reason') or 'Failed'}: {status.get('message') or ''}".rstrip()
            )
        uuid = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
        return str(uuid) if uuid else None

    def _configmap_writes(
        self, pod: dict[str, Any], uuids: list[str], portion: str
    ) -> list[Callable[[], Any]]:
        """The two ConfigMap writes of a fractional pod, each idempotent (create, or bring an
        existing one's data up to date)."""

        def write(body: dict[str, Any]) -> Callable[[], None]:
            def run() -> None:
                current, created = create_or_get(self.kube, CONFIGMAPS, body)
                if not created:
                    patch_if_changed(self.kube, CONFIGMAPS, current, {"data": body["data"]})

            return run

        return [write(body) for body in shared_gpu_configmaps(pod, uuids, portion)]

    # -- reservations: release and adoption ---------------------------------------------
    def _on_pod(self, etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A pod of a GPU group finished or went away: check its group at once."""
        md = pod.get("metadata") or {}
        if md.get("namespace") == RESERVATION_NAMESPACE:
            if (
                log.isEnabledFor(logging.DEBUG)
                and (md.get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
                and not ((old or {}).get("metadata", {}).get("annotations") or {}).get(
                    GPU_INDEX_ANNOTATION
                )
            ):
                _trace(RESERVATION_NAMESPACE, md.get("name", ""), "uuid published")
            name = md.get("name", "")
            if etype == "DELETED" and self._deleted.get(name) == md.get("uid"):
                self._deleted.pop(name, None)  # the cache has caught up
            if name in self._created:
                with self._locks_lock:
                    created = self._created.get(name)
                    if created is not None and created[0]["metadata"].get("uid") == md.get("uid"):
                        del self._created[name]  # the cache has caught up
            if name in self._waiters and (
                etype == "DELETED"
                or md.get("deletionTimestamp")
                or (md.get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
                or (pod.get("status") or {}).get("phase") == "Failed"
            ):
                self._wake_waiters(name)  # its UUID is there, or it failed or went: look again
            return
        if etype != "DELETED" and not _terminal(pod):
            return
        groups = _groups(pod)
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if groups and node:
            with self._locks_lock:
                self._dirty.update((node, g) for g in groups)
            self._wake.set()

    def _on_br_gone(self, etype: str, br: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype != "DELETED" and bind_request_live(br):
            return
        spec = br.get("spec") or {}
        node = str(spec.get("selectedNode") or "")
        groups = [str(g) for g in spec.get("selectedGPUGroups") or []]
        if groups and node:
            with self._locks_lock:
                self._dirty.update((node, g) for g in groups)
            self._wake.set()

    def _gc_loop(self) -> None:
        last_sweep = 0.0
        while not self._stop.is_set():
            self._wake.wait(self.gc_period)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self.is_leader():
                self._leading = False
                continue
            try:
                if not self._leading:
                    self._leading = True
                    self.adopt_reservations()
                    last_sweep = time.monotonic()
                with self._locks_lock:
                    dirty, self._dirty = self._dirty, set()
                if dirty:
                    self.release_groups(dirty)
                if time.monotonic() - last_sweep >= self.gc_period:
                    last_sweep = time.monotonic()
                    self.collect_reservations()
            except Exception:
                log.exception("reservation clean-up failed")

    def _groups_in_use(self) -> set[tuple[str, str]]:
        """(node, group) of every non-terminal pod labelled with a group and of every live
        BindRequest: the groups whose devices must stay reserved."""
        in_use: set[tuple[str, str]] = set()
        for pod in self.pods.items():
            md = pod["metadata"]
            if md.get("namespace") == RESERVATION_NAMESPACE or _terminal(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName") or ""
            in_use.update((node, g) for g in _groups(pod))
        for br in self.brs.items():
            if bind_request_live(br):
                spec = br.get("spec") or {}
                node = str(spec.get("selectedNode") or "")
                in_use.update((node, str(g)) for g in spec.get("selectedGPUGroups") or [])
        return in_use

    def _group_in_use(self, node: str, group: str) -> bool:
        for pod in self.pods.items():
            md = pod["metadata"]
            if md.get("namespace") == RESERVATION_NAMESPACE or _terminal(pod):
                continue
            if (pod.get("spec") or {}).get("nodeName") == node and group in _groups(pod):
                return True
        for br in self.brs.items():
            spec = br.get("spec") or {}
            if (
                bind_request_live(br)
                and str(spec.get("selectedNode") or "") == node
                and group in [str(g) for g in spec.get("selectedGPUGroups") or []]
            ):
                return True
        return False

    def _reservations(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in self.pods.items():
            md = pod["metadata"]
            if md.get("namespace") != RESERVATION_NAMESPACE or md.get("deletionTimestamp"):
                continue
            if (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name:
                continue  # another kai install's: not ours to collect or adopt
            if md.get("uid") and self._deleted.get(md["name"]) == md["uid"]:
                continue  # deleted by us; the cache has not caught up
            node = (pod.get("spec") or {}).get("nodeName") or ""
            group = str((md.get("labels") or {}).get(GPU_GROUP_LABEL) or "")
            found.setdefault((node, group), []).append(pod)
        return found

    def _delete_reservation(self, pod: dict[str, Any], why: str) -> bool:
        md = pod["metadata"]
        try:
            deleted = delete_if_present(
                self.kube,
                PODS,
                md["name"],
                RESERVATION_NAMESPACE,
                grace_period_seconds=0,
                uid=md.get("uid"),
            )
        except KubeError as exc:
            log.info("cannot delete reservation %s: %s", md["name"], exc)
            return False
        if md.get("uid"):
            self._deleted[md["name"]] = md["uid"]
        log.info("reservation %s released: %s", md["name"], why)
        return deleted

    def release_groups(self, groups: set[tuple[str, str]]) -> int:
        """Delete the reservation pod of each (node, group) that has neither a non-terminal
        pod nor a live BindRequest. Checked again under the group's lock, so a worker that is
        reserving the same group either finishes first (and the group is in use) or finds
        the reservation gone and creates a new one."""
        found = self._reservations()
        released = 0
        for node, group in sorted(groups):
            for pod in found.get((node, group), []):
                with self._lock(f"{node}/{group}"):
                    if self._group_in_use(node, group):
                        continue
                    released += self._delete_reservation(pod, "its GPU group is empty")
        return released

    def collect_reservations(self) -> int:
        """The full sweep (every ``gc_period`` on the leader): every reservation pod of an
        empty group is released, and of several reservation pods for one (node, group) only
        the one with the deterministic name stays."""
        in_use = self._groups_in_use()
        released = 0
        for (node, group), pods in sorted(self._reservations().items()):
            keep = reservation_pod_name(node, group)
            for pod in pods:
                name = pod["metadata"]["name"]
                if (node, group) in in_use and name == keep:
                    continue
                with self._lock(f"{node}/{group}"):
                    if name == keep and self._group_in_use(node, group):
                        continue
                    why = "its GPU group is empty" if name == keep else f"a duplicate of {keep}"
                    released += self._delete_reservation(pod, why)
        return released

    def adopt_reservations(self) -> tuple[int, int]:
        """What a new leader does first: release the reservations of empty groups and of
        duplicates, and re-create the missing reservation of every group that has a pod bound
        on a node (a previous leader may have stopped between the two). Returns (released,
        created)."""
        released = self.collect_reservations()
        found = self._reservations()
        created = 0
        for pod in self.pods.items():
            md = pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName") or ""
            if md.get("namespace") == RESERVATION_NAMESPACE or _terminal(pod) or not node:
                continue
            if (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name:
                continue  # another install's group
            for group in _groups(pod):
                if (node, group) in found:
                    continue
                try:
                    self._reserve(node, group)
                except KubeError as exc:
                    log.warning("cannot re-create reservation of %s/%s: %s", node, group, exc)
                    continue
                found[(node, group)] = []
                created += 1
        if released or created:
            log.info(
                "adopted GPU groups: %d reservations released, %d re-created", released, created
            )
        return released, created


def _all_done(calls: list[Callable[[], Any]], futures: list[Future[Any]]) -> None:
    """Run ``calls`` here, one after the other, while ``futures`` run elsewhere; wait for all
    of them; then raise the first failure (none is left running when this returns)."""
    first: Exception | None = None
    for call in calls:
        try:
            call()
        except Exception as exc:  # re-raised below, after the others
            first = first or exc
    for future in futures:
        try:
            future.result()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


def _trace(ns: str, name: str, stage: str) -> None:
    """One stage of a bind, for the timeline at DEBUG (bench/README.md, the fractional path)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("timeline %s/%s %s", ns, name, stage)


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _groups(pod: dict[str, Any]) -> list[str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return [
        str(v)
        for k, v in labels.items()
        if k == GPU_GROUP_LABEL or k.startswith(GPU_GROUP_LABEL + "/")
    ]


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


def annotations_of_pod(pod: dict[str, Any]) -> dict[str, Any]:
    return dict((pod.get("metadata") or {}).get("annotations") or {})
