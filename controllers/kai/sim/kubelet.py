"""A simulated kubelet for every simulated node (KWOK-style stages).

- A pod bound to a simulated node is started: phase Running, Ready conditions, a pod IP.
- A pod with the annotation ``kai.sim/duration-seconds: "N"`` completes N seconds after it
  started (phase Succeeded; ``kai.sim/exit-code`` non-zero makes it Failed).
- A GPU reservation pod (namespace ``kai-resource-reservation``) publishes a fake GPU UUID in
  ``run.ai/reserve_for_gpu_index``, as the real reservation image does through NVML.
- A pod being deleted gracefully is finished (deleted with grace 0) after
  ``termination_delay`` seconds, as a kubelet does once its containers stopped.
- Admission, as a real kubelet: a pod is started only if its requests fit the node's
  allocatable next to every pod already admitted there and not terminal (cpu, memory,
  ``nvidia.com/gpu``, ``pods`` and any other resource the pod requests). A pod that does not
  fit fails at once: phase Failed, reason ``OutOf<resource>`` (``OutOfnvidia.com/gpu``) and
  the kubelet's message, so an over-committing scheduler is seen, not hidden.

Reservation pods may come from a watch of their own (``reservations``): one process playing
thousands of kubelets reads every pod change in the cluster, and behind that stream a
reservation pod (which a fractional pod's bind waits for) would reach it seconds late. A real
kubelet watches only its own node's pods and has no such queue.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from kai.api.pod_requests import effective_requests, is_sidecar
from kai.api.quantity import QuantityError, parse_quantity
from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.informer import Informer
from kai.kube.resources import PODS
from kai.kube.writes import delete_if_present, patch_if_changed
from kai.reconcilers.binder import GPU_INDEX_ANNOTATION
from kai.reconcilers.snapshot_builder import RESERVATION_NAMESPACE
from kai.sim.nodes import SIMULATED_LABEL

log = logging.getLogger("kai.sim.kubelet")

DURATION_ANNOTATION = "kai.sim/duration-seconds"
EXIT_CODE_ANNOTATION = "kai.sim/exit-code"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fake_gpu_uuid(node: str, group: str) -> str:
    digest = hashlib.sha256(f"{node}/{group}".encode()).digest()[:16]
    return f"GPU-{uuid.UUID(bytes=digest)}"


def pod_requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    """What a kubelet admits a pod for: containers and native sidecars summed (a limit without
    a request is the request), each other init container max'ed against that, plus
    ``spec.overhead``, plus one ``pods``. Raises :class:`QuantityError` naming the field."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any], where: str) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        out = {}
        for key, value in merged.items():
            try:
                out[str(key)] = parse_quantity(value)
            except QuantityError as exc:
                raise QuantityError(f"{where}.resources.requests.{key}: {exc}") from exc
        return out

    total = effective_requests(
        (of(c, f"spec.containers[{i}]") for i, c in enumerate(spec.get("containers") or [])),
        (
            (of(c, f"spec.initContainers[{i}]"), is_sidecar(c))
            for i, c in enumerate(spec.get("initContainers") or [])
        ),
        Fraction(0),
    )
    for key, value in (spec.get("overhead") or {}).items():
        try:
            total[key] = total.get(key, Fraction(0)) + parse_quantity(value)
        except QuantityError as exc:
            raise QuantityError(f"spec.overhead.{key}: {exc}") from exc
    total["pods"] = Fraction(1)
    return total


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _pod_ip(uid: str) -> str:
    h = hashlib.sha256(uid.encode()).digest()
    return f"10.{h[0]}.{h[1]}.{max(1, h[2] % 255)}"


class Kubelet:
    """Plays the kubelet of every node labelled ``kai.sim/simulated=true``."""

    def __init__(
        self,
        kube: Kube,
        pods: Informer,
        nodes: Informer,
        *,
        reservations: Informer | None = None,
        workers: int = 8,
        termination_delay: float = 0.0,
    ) -> None:
        self.kube = kube
        self.pods = pods
        # the reservation namespace's own informer, when it has one (``pods`` then leaves it out)
        self.reservations = reservations
        self.nodes = nodes
        self.termination_delay = termination_delay
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="sim-kubelet")
        # GPU reservation pods start on their own workers: on a real node the kubelet starts
        # every pod at once (a worker per pod) and the reservation pod's own container writes
        # its GPU UUID, so it never waits behind the status writes of other nodes' pods
        self.reservation_pool = ThreadPoolExecutor(workers, thread_name_prefix="sim-reservation")
        self._inflight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._timers: list[tuple[float, str, str, str, str]] = []  # (due, kind, ns, name, uid)
        self._timer_cv = threading.Condition()
        self._stop = threading.Event()
        self._timer_thread = threading.Thread(
            target=self._timer_loop, name="sim-kubelet-timers", daemon=True
        )
        self.started = 0
        self.completed = 0
        self.rejected = 0
        # admitted, not yet terminal pods per node: (namespace, name) -> (uid, requests)
        self._admitted: dict[str, dict[tuple[str, str], tuple[str, dict[str, Fraction]]]] = {}
        self._admit_lock = threading.Lock()
        pods.add_handler(self._on_pod)
        if reservations is not None:
            reservations.add_handler(self._on_pod)

    def _cache(self, namespace: str) -> Informer:
        if self.reservations is not None and namespace == RESERVATION_NAMESPACE:
            return self.reservations
        return self.pods

    def start(self) -> Kubelet:
        self._timer_thread.start()
        # pods already in the cache when we attach: the running ones first hold their room
        pods = self.pods.items()
        if self.reservations is not None:
            pods += self.reservations.items()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") == "Running":
                self._admit_running(node, pod)
        for pod in pods:
            self._on_pod("ADDED", pod, None)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._timer_cv:
            self._timer_cv.notify_all()
        self._timer_thread.join(timeout=5)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.reservation_pool.shutdown(wait=True, cancel_futures=True)

    def _simulated(self, node_name: str) -> bool:
        node = self.nodes.get(node_name)
        return bool(node and (node["metadata"].get("labels") or {}).get(SIMULATED_LABEL) == "true")

    # -- events --------------------------------------------------------------------------
    def _on_pod(self, etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        md = pod["metadata"]
        if node and (etype == "DELETED" or _terminal(pod)):
            with self._admit_lock:
                admitted = self._admitted.get(node, {})
                entry = admitted.get((md["namespace"], md["name"]))
                if entry is not None and entry[0] == md.get("uid", ""):
                    del admitted[(md["namespace"], md["name"])]
        if etype == "DELETED" or self._stop.is_set():
            return
        if not node or not self._simulated(node):
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            self._admit_running(node, pod)
        if md.get("deletionTimestamp"):
            self._submit("delete", md, self.termination_delay)
        elif phase in (None, "", "Pending") or (
            md.get("namespace") == RESERVATION_NAMESPACE
            and phase == "Running"
            and not (md.get("annotations") or {}).get(GPU_INDEX_ANNOTATION)
        ):
            self._submit("start", md, 0.0)

    def _submit(self, kind: str, md: dict[str, Any], delay: float) -> None:
        key = (kind, f"{md['namespace']}/{md['name']}")
        with self._lock:
            if key in self._inflight:
                return
            self._inflight.add(key)
        if delay > 0:
            self._schedule(time.monotonic() + delay, kind, md)
            return
        with contextlib.suppress(RuntimeError):
            self._pool_for(md["namespace"]).submit(
                self._run, kind, md["namespace"], md["name"], md.get("uid", "")
            )

    def _pool_for(self, namespace: str) -> ThreadPoolExecutor:
        return self.reservation_pool if namespace == RESERVATION_NAMESPACE else self.pool

    def _schedule(self, due: float, kind: str, md: dict[str, Any]) -> None:
        with self._timer_cv:
            heapq.heappush(
                self._timers, (due, kind, md["namespace"], md["name"], md.get("uid", ""))
            )
            self._timer_cv.notify()

    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            with self._timer_cv:
                while not self._stop.is_set() and (
                    not self._timers or self._timers[0][0] > time.monotonic()
                ):
                    wait = self._timers[0][0] - time.monotonic() if self._timers else 1.0
                    self._timer_cv.wait(max(0.01, min(wait, 1.0)))
                if self._stop.is_set():
                    return
                _, kind, ns, name, uid = heapq.heappop(self._timers)
            try:
                self._pool_for(ns).submit(self._run, kind, ns, name, uid)
            except RuntimeError:
                return

    # -- work ----------------------------------------------------------------------------
    def _run(self, kind: str, ns: str, name: str, uid: str) -> None:
        try:
            if kind == "start":
                self._start_pod(ns, name)
            elif kind == "complete":
                self._complete_pod(ns, name, uid)
            elif kind == "delete":
                delete_if_present(self.kube, PODS, name, ns, grace_period_seconds=0, uid=uid)
        except KubeError as exc:
            log.info("kubelet: %s %s/%s: %s", kind, ns, name, exc)
            if kind != "complete":
                # try again later: the cache event that triggered us will not come again
                with self._lock:
                    self._inflight.discard((kind, f"{ns}/{name}"))
                pod = self._cache(ns).get(name, ns)
                if pod is not None and not self._stop.is_set():
                    self._schedule(time.monotonic() + 0.5, kind, pod["metadata"])
                    with self._lock:
                        self._inflight.add((kind, f"{ns}/{name}"))
                return
        except Exception:
            log.exception("kubelet: %s %s/%s failed", kind, ns, name)
        with self._lock:
            self._inflight.discard((kind, f"{ns}/{name}"))

    # -- admission -----------------------------------------------------------------------
    def _admit_running(self, node: str, pod: dict[str, Any]) -> None:
        """A pod found Running (admitted by an earlier kubelet) holds its requests."""
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        with self._admit_lock:
            admitted = self._admitted.setdefault(node, {})
            if key in admitted:
                return
            with contextlib.suppress(QuantityError):  # the API server refuses bad quantities
                admitted[key] = (md.get("uid", ""), pod_requests(pod))

    def admit(self, pod: dict[str, Any]) -> tuple[str, str] | None:
        """None when the pod fits its node (and is now counted there), else (reason,
        message) as a kubelet writes them."""
        md = pod["metadata"]
        node_name = pod["spec"]["nodeName"]
        key = (md["namespace"], md["name"])
        try:
            wanted = pod_requests(pod)
        except QuantityError as exc:
            return "UnexpectedAdmissionError", f"Pod was rejected: {exc}"
        node = self.nodes.get(node_name) or {}
        status = node.get("status") or {}
        allocatable = status.get("allocatable") or status.get("capacity") or {}
        with self._admit_lock:
            admitted = self._admitted.setdefault(node_name, {})
            entry = admitted.get(key)
            if entry is not None and entry[0] == md.get("uid", ""):
                return None  # admitted before (a retried start)
            for resource in sorted(wanted):
                requested = wanted[resource]
                if not requested:
                    continue
                try:
                    capacity = parse_quantity(allocatable.get(resource, 0))
                except QuantityError:
                    capacity = Fraction(0)
                used = sum(
                    (r.get(resource, Fraction(0)) for _, r in admitted.values()), Fraction(0)
                )
                if used + requested > capacity:
                    return (
                        f"OutOf{resource}",
                        "Pod was rejected: Node didn't have enough resource: "
                        f"{resource}, requested: {_num(requested)}, used: {_num(used)}, "
                        f"capacity: {_num(capacity)}",
                    )
            admitted[key] = (md.get("uid", ""), wanted)
        return None

    def _reject(self, pod: dict[str, Any], reason: str, message: str) -> None:
        md = pod["metadata"]
        log.info("kubelet: %s/%s rejected: %s", md["namespace"], md["name"], message)
        try:
            patch_if_changed(
                self.kube,
                PODS,
                pod,
                {"status": {"phase": "Failed", "reason": reason, "message": message}},
                sub="status",
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            return
        self.rejected += 1

    def _start_pod(self, ns: str, name: str) -> None:
        pod = self._cache(ns).get(name, ns)
        if pod is None or pod["metadata"].get("deletionTimestamp") or _terminal(pod):
            return
        md = pod["metadata"]
        annotations = md.get("annotations") or {}
        node = pod["spec"]["nodeName"]
        refused = self.admit(pod)
        if refused is not None:
            self._reject(pod, *refused)
            return
        if ns == RESERVATION_NAMESPACE and not annotations.get(GPU_INDEX_ANNOTATION):
            group = (md.get("labels") or {}).get("runai-gpu-group", name)
            pod = (
                patch_if_changed(
                    self.kube,
                    PODS,
                    pod,
                    {
                        "metadata": {
                            "annotations": {GPU_INDEX_ANNOTATION: fake_gpu_uuid(node, group)}
                        }
                    },
                )
                or pod
            )
        status = pod.get("status") or {}
        if status.get("phase") == "Running":
            return
        now = _now()
        containers = [
            {
                "name": c.get("name", "main"),
                "image": c.get("image", ""),
                "imageID": _image_id(c.get("image", "")),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        ip = _pod_ip(md.get("uid", name))
        try:
            patch_if_changed(
                self.kube,
                PODS,
                pod,
                {
                    "status": {
                        "phase": "Running",
                        "conditions": conditions,
                        "containerStatuses": containers,
                        "startTime": now,
                        "hostIP": "192.168.0.1",
                        "podIP": ip,
                        "podIPs": [{"ip": ip}],
                    }
                },
                sub="status",
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            return
        self.started += 1
        duration = annotations.get(DURATION_ANNOTATION)
        if duration:
            try:
                seconds = float(duration)
            except ValueError:
                log.warning(
                    "pod %s/%s: %s=%r is not a number of seconds; runs forever",
                    ns,
                    name,
                    DURATION_ANNOTATION,
                    duration,
                )
                return
            self._schedule(time.monotonic() + max(0.0, seconds), "complete", md)

    def _complete_pod(self, ns: str, name: str, uid: str) -> None:
        pod = self._cache(ns).get(name, ns)
        if pod is None or pod["metadata"].get("uid") != uid:
            return
        annotations = pod["metadata"].get("annotations") or {}
        code = annotations.get(EXIT_CODE_ANNOTATION, "0")
        failed = code not in ("", "0")
        now = _now()
        containers = [
            {
                "name": c.get("name", "main"),
                "image": c.get("image", ""),
                "imageID": _image_id(c.get("image", "")),
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": int(code) if code.lstrip("-").isdigit() else 1,
                        "reason": "Error" if failed else "Completed",
                        "finishedAt": now,
                    }
                },
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        patch_if_changed(
            self.kube,
            PODS,
            pod,
            {
                "status": {
                    "phase": "Failed" if failed else "Succeeded",
                    "containerStatuses": containers,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "PodCompleted",
                            "lastProbeTime": None,
                            "lastTransitionTime": now,
                        },
                        {
                            "type": "ContainersReady",
                            "status": "False",
                            "reason": "PodCompleted",
                            "lastProbeTime": None,
                            "lastTransitionTime": now,
                        },
                    ],
                }
            },
            sub="status",
        )
        self.completed += 1


def _image_id(image: str) -> str:
    """``imageID`` as a container runtime reports it (``IMAGE@sha256:DIGEST``; simulated:
    the digest of the image's name)."""
    return f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _num(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
