"""Direct binding: the scheduler POSTs ``pods/binding`` itself for pods that need no binder.

KAI's protocol binds every pod through a BindRequest: the scheduler creates it, the binder
binds the pod and writes the BindRequest's status -- three API writes per pod, where
kube-scheduler needs one. For a pod that needs none of the binder's work (no shared GPU, no
volume claim to bind, no DRA claim, not a MIG instance) those three writes do nothing but
leave a trail, so with ``bind mode direct`` (the default) the scheduler binds such pods
itself, concurrently on its write pool, as kube-scheduler's binding cycle does. Every other
pod keeps the BindRequest path (``bindRequest`` mode sends every pod there).

What a direct bind looks like to the next cycles: between the decision and the moment the
pods informer shows ``spec.nodeName``, the pod is held by an *in-flight bind* -- a
BindRequest-shaped record (``kai.scheduler/direct-bind`` annotation) the snapshot reads like
a live BindRequest, so the pod counts as Binding on its node and is not placed again. A bind
the API server refuses (the pod was deleted, bound by someone else) or that keeps failing
drops its record: the pod is Pending again and the next cycle places it afresh, as
kube-scheduler does. The API server itself binds a pod at most once (a second Binding gets
409 "already assigned"), which is also how a retried POST whose first answer was lost is
recognised: 409 naming the same node counts as done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kai.kube.client import ApiError, Kube
from kai.kube.resources import BIND_REQUESTS
from kai.kube.writes import with_retries
from kai.scheduler.result import BindDecision, ReceivedResourceType

log = logging.getLogger("kai.scheduler.bind")

BIND_DIRECT = "direct"
BIND_REQUEST = "bindRequest"
BIND_MODES = (BIND_DIRECT, BIND_REQUEST)

#: on an in-flight bind record: it stands for a direct bind, not a stored BindRequest
DIRECT_BIND_ANNOTATION = "kai.scheduler/direct-bind"
#: what the binder also writes on the pod through the Binding
RECEIVED_RESOURCE_TYPE = "received-resource-type"
#: seconds a finished bind is held at most for the pods informer to show the pod's node (a
#: watch far behind on an overloaded server; the pod is found bound at the next relist anyway)
SETTLE_SECONDS = 120.0


def binder_work(pod: Mapping[str, Any], decision: BindDecision) -> str | None:
    """Why ``pod`` needs KAI's binder (a short reason), or None when a direct bind does all.

    GPU sharing (fractions, GPU memory, several devices: reservation pods, ConfigMaps, the
    GPU-group label), MIG instances, volumes whose claims may wait for a consumer
    (``persistentVolumeClaim``, ``ephemeral``) and DRA claims (``spec.resourceClaims``)."""
    if decision.received_resource_type != ReceivedResourceType.REGULAR or decision.gpu_groups:
        return f"GPU {decision.received_resource_type}"
    spec = pod.get("spec") or {}
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping) and (
            volume.get("persistentVolumeClaim") is not None or volume.get("ephemeral") is not None
        ):
            return f"volume {volume.get('name')}"
    if spec.get("resourceClaims"):
        return "resource claims"
    return None


def in_flight_record(pod: Mapping[str, Any], decision: BindDecision) -> dict[str, Any]:
    """The BindRequest-shaped record the snapshot reads while a direct bind is in flight."""
    md = pod["metadata"]
    return {
        "apiVersion": BIND_REQUESTS.api_version,
        "kind": "BindRequest",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "annotations": {DIRECT_BIND_ANNOTATION: "in-flight"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": md["name"], "uid": md.get("uid")}
            ],
        },
        "spec": {
            "podName": md["name"],
            "selectedNode": decision.node,
            "receivedResourceType": decision.received_resource_type,
        },
    }


def is_in_flight_record(br: Mapping[str, Any]) -> bool:
    return DIRECT_BIND_ANNOTATION in ((br.get("metadata") or {}).get("annotations") or {})


class InFlightBinds:
    """Direct binds between the decision and the pods informer showing the node.

    ``hold`` registers one before its POST is sent (held while in flight); ``settle`` marks
    it answered (held ``SETTLE_SECONDS`` more at most, until the informer catches up);
    ``drop`` forgets it (the bind failed: the pod is Pending again). ``records`` returns the
    records still needed, given a lookup of the cached pod."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (namespace, name) -> (record, pod uid, monotonic time answered or inf)
        self._held: dict[tuple[str, str], tuple[dict[str, Any], str, float]] = {}
        # records whose pod the cache showed bound (or gone) at the previous call: released now
        self._done: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, pod: Mapping[str, Any], decision: BindDecision) -> tuple[str, str]:
        md = pod["metadata"]
        key = (str(md["namespace"]), str(md["name"]))
        with self._lock:
            self._held[key] = (in_flight_record(pod, decision), str(md.get("uid")), float("inf"))
            self._done.discard(key)
        return key

    def settle(self, key: tuple[str, str]) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                self._held[key] = (held[0], held[1], time.monotonic())

    def drop(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._held.pop(key, None)
            self._done.discard(key)

    def records(
        self, cached_pod: Callable[[str, str], Mapping[str, Any] | None], *, advance: bool = True
    ) -> list[dict[str, Any]]:
        """The records of binds still needed. A record goes one call *after* the cache first
        shows its pod bound (or gone, or replaced by another uid): the caller may have listed
        the pods a moment before this call, and that list must still see the pod held; every
        list taken after this call already shows it bound. Only the scheduling cycle advances
        that state (``advance=False``: a look from elsewhere, e.g. a snapshot for a bug
        report)."""
        now = time.monotonic()
        out = []
        with self._lock:
            if not advance:
                return [record for record, _, _ in self._held.values()]
            for key, (record, uid, answered) in list(self._held.items()):
                if key in self._done or now - answered > SETTLE_SECONDS:
                    del self._held[key]
                    self._done.discard(key)
                    continue
                pod = cached_pod(key[1], key[0])
                if pod is not None and (
                    str((pod.get("metadata") or {}).get("uid")) != uid
                    or (pod.get("spec") or {}).get("nodeName")
                ):
                    self._done.add(key)
                elif pod is None and answered != float("inf"):
                    self._done.add(key)  # answered, and the pod is gone since
                out.append(record)
        return out


def post_binding(
    kube: Kube, namespace: str, name: str, node: str, annotations: dict[str, str]
) -> str:
    """POST the pod's Binding: '' when the pod is on ``node`` (now, or already: a retry
    whose first answer was lost), else why it cannot be bound there (the pod is gone, being
    deleted, or bound to another node). Transient failures are retried a few times, then
    raised (:class:`KubeError`)."""
    try:
        with_retries(
            lambda: kube.bind(namespace, name, node, annotations),
            attempts=4,
            what=f"bind {namespace}/{name}",
        )
    except ApiError as exc:
        if exc.status == 409 and "already assigned" in exc.message:
            return "" if f'"{node}"' in exc.message else f"AlreadyBound: {exc.message}"
        if exc.status in (404, 409, 422):
            return f"BindingError: {exc.message or exc}"
        raise
    return ""


__all__ = [
    "BIND_DIRECT",
    "BIND_MODES",
    "BIND_REQUEST",
    "DIRECT_BIND_ANNOTATION",
    "InFlightBinds",
    "binder_work",
    "in_flight_record",
    "is_in_flight_record",
    "post_binding",
]
