"""The ReplicaSet controller: ``spec.replicas`` pods ``<replicaset>-<random>`` from the
template; finished or deleted pods are replaced; extra pods are deleted, unscheduled ones
first, then the newest. Pods are owned by owner reference only (orphans matching the selector
are not adopted)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube_emulator.controllers.common import (
    PODS,
    REPLICASETS,
    Recorder,
    active,
    controller_uid,
    deleting,
    pod_from_template,
    ready,
)
from kube_emulator.operations import WriteOptions

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore


def owned(core: ApiCore, uid: str, tkey: tuple[str, str]) -> list[dict[str, Any]]:
    """The objects of type ``tkey`` whose controller is ``uid`` (store lock held)."""
    out = []
    for dep_key, ns, name in core.store.dependents(uid):
        if dep_key != tkey:
            continue
        obj = core.store.get(tkey, ns, name)
        if obj is not None and controller_uid(obj) == uid:
            out.append(obj)
    return out


def _deletion_order(pod: dict[str, Any]) -> tuple[int, int, str]:
    """Unscheduled before scheduled, not ready before ready, newest first."""
    created = pod["metadata"].get("creationTimestamp") or ""
    inverted = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (1 if (pod.get("spec") or {}).get("nodeName") else 0, 1 if ready(pod) else 0, inverted)


class ReplicaSetController:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.events = Recorder(core, "replicaset-controller")

    def reconcile(self, ns: str, name: str) -> None:
        core = self.core
        with core.store.lock:
            rs = core.store.get(REPLICASETS, ns, name)
            if rs is None or deleting(rs):
                return
            spec = rs.get("spec") or {}
            pods = [p for p in owned(core, rs["metadata"]["uid"], PODS) if active(p)]
            want = int(spec.get("replicas", 1))
            to_delete = sorted(pods, key=_deletion_order)[: max(0, len(pods) - want)]
            missing = max(0, want - len(pods))
            for pod in to_delete:
                core.delete_locked(core.types[PODS], pod, None, "Background")
            remaining = [p for p in pods if p not in to_delete]
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            status: dict[str, Any] = {
                "replicas": len(remaining),
                "fullyLabeledReplicas": sum(
                    1
                    for p in remaining
                    if labels.items() <= (p["metadata"].get("labels") or {}).items()
                ),
                "readyReplicas": sum(1 for p in remaining if ready(p)),
                "availableReplicas": sum(1 for p in remaining if ready(p)),
                "terminatingReplicas": sum(
                    1 for p in owned(core, rs["metadata"]["uid"], PODS) if deleting(p)
                ),
                "observedGeneration": rs["metadata"].get("generation", 1),
            }
            for key in ("readyReplicas", "availableReplicas"):
                if not status[key]:
                    del status[key]
            if status != (rs.get("status") or {}):
                rs = core.update_internal(core.types[REPLICASETS], rs, {**rs, "status": status})
        for _ in range(missing):
            body = pod_from_template(rs, spec.get("template"))
            try:
                pod, _ = core.create(core.types[PODS], "v1", ns, body, WriteOptions())
            except Exception as exc:  # what the API server refused: said where users look
                self.events.event(rs, "Warning", "FailedCreate", f"Error creating: {exc}")
                return
            self.events.event(
                rs, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}"
            )
