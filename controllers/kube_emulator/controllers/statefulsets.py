"""The StatefulSet controller: pods ``<statefulset>-<ordinal>`` with the ordinal's labels,
``hostname`` and ``subdomain`` (the governing service); with ``podManagementPolicy:
OrderedReady`` (the default) ordinal N is created only once 0..N-1 are Running and Ready, and
scaling down removes the highest ordinal first; ``Parallel`` creates and deletes all at once.
A failed pod is deleted and created again. Not done: volumeClaimTemplates (no
PersistentVolumeClaims are created), ControllerRevisions and rolling updates of existing pods,
``spec.ordinals.start``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube_emulator.controllers.common import (
    PODS,
    STATEFULSETS,
    Recorder,
    deleting,
    phase,
    pod_from_template,
    ready,
    template_hash,
)
from kube_emulator.controllers.replicasets import owned
from kube_emulator.operations import WriteOptions

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore

POD_INDEX = "apps.kubernetes.io/pod-index"
POD_NAME = "statefulset.kubernetes.io/pod-name"
REVISION_HASH = "controller-revision-hash"


def _ordinal(set_name: str, pod: dict[str, Any]) -> int | None:
    prefix, _, tail = pod["metadata"]["name"].rpartition("-")
    if prefix != set_name or not tail.isdigit():
        return None
    return int(tail)


def _to_create(by_ordinal: dict[int, dict[str, Any]], replicas: int, parallel: bool) -> list[int]:
    """The missing ordinals below ``replicas``; OrderedReady: only the first one, and only once
    every lower ordinal is Running and Ready."""
    create = []
    for ordinal in range(replicas):
        pod = by_ordinal.get(ordinal)
        if pod is None:
            create.append(ordinal)
            if not parallel:
                break
        elif not parallel and not (ready(pod) and not deleting(pod)):
            break
    return create


class StatefulSetController:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.events = Recorder(core, "statefulset-controller")

    def reconcile(self, ns: str, name: str) -> None:
        core = self.core
        pod_rt = core.types[PODS]
        with core.store.lock:
            sts = core.store.get(STATEFULSETS, ns, name)
            if sts is None or deleting(sts):
                return
            spec = sts.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            parallel = spec.get("podManagementPolicy") == "Parallel"
            by_ordinal: dict[int, dict[str, Any]] = {}
            for pod in owned(core, sts["metadata"]["uid"], PODS):
                ordinal = _ordinal(name, pod)
                if ordinal is not None:
                    by_ordinal[ordinal] = pod
            # failed pods are deleted and made again
            for pod in by_ordinal.values():
                if phase(pod) in ("Failed", "Succeeded") and not deleting(pod):
                    core.delete_locked(pod_rt, pod, None, "Background")
            # scale down: the highest ordinals first (one at a time unless Parallel)
            extra = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
            if extra and not any(deleting(by_ordinal[o]) for o in extra):
                for ordinal in extra if parallel else extra[:1]:
                    core.delete_locked(pod_rt, by_ordinal[ordinal], None, "Background")
            create = _to_create(by_ordinal, replicas, parallel)
            current = [by_ordinal[o] for o in by_ordinal if o < replicas]
            revision = f"{name}-{template_hash(spec.get('template') or {})}"
            status: dict[str, Any] = {
                "observedGeneration": sts["metadata"].get("generation", 1),
                "replicas": len(current),
                "currentReplicas": len(current),
                "updatedReplicas": len(current),
                "currentRevision": revision,
                "updateRevision": revision,
                "collisionCount": 0,
                "availableReplicas": sum(1 for p in current if ready(p)),
            }
            ready_count = sum(1 for p in current if ready(p))
            if ready_count:
                status["readyReplicas"] = ready_count
            if status != (sts.get("status") or {}):
                sts = core.update_internal(core.types[STATEFULSETS], sts, {**sts, "status": status})
        for ordinal in create:
            pod_name = f"{name}-{ordinal}"
            body = pod_from_template(
                sts,
                spec.get("template"),
                name=pod_name,
                labels={
                    POD_INDEX: str(ordinal),
                    POD_NAME: pod_name,
                    REVISION_HASH: revision,
                },
            )
            body["spec"].setdefault("hostname", pod_name)
            if spec.get("serviceName"):
                body["spec"].setdefault("subdomain", spec["serviceName"])
            try:
                core.create(pod_rt, "v1", ns, body, WriteOptions())
            except Exception as exc:  # what the API server refused: said where users look
                self.events.event(
                    sts,
                    "Warning",
                    "FailedCreate",
                    f"create Pod {pod_name} in StatefulSet {name} failed error: {exc}",
                )
                return
            self.events.event(
                sts,
                "Normal",
                "SuccessfulCreate",
                f"create Pod {pod_name} in StatefulSet {name} successful",
            )
