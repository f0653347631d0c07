"""The Deployment controller: one ReplicaSet ``<deployment>-<pod-template-hash>`` per pod
template, labelled and selected by ``pod-template-hash``, scaled to ``spec.replicas``; the
ReplicaSets of older templates are scaled to 0 at once (a rollout is not paced by
``maxSurge``/``maxUnavailable``) and pruned beyond ``revisionHistoryLimit``."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kube_emulator.controllers.common import (
    DEPLOYMENTS,
    REPLICASETS,
    Recorder,
    deleting,
    owner_reference,
    template_hash,
)
from kube_emulator.controllers.replicasets import owned
from kube_emulator.errors import ApiError
from kube_emulator.operations import WriteOptions

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"


def _revision(rs: dict[str, Any]) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(REVISION) or 0)
    except ValueError:
        return 0


class DeploymentController:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.events = Recorder(core, "deployment-controller")

    def reconcile(self, ns: str, name: str) -> None:
        core = self.core
        rs_rt = core.types[REPLICASETS]
        with core.store.lock:
            deploy = core.store.get(DEPLOYMENTS, ns, name)
            if deploy is None or deleting(deploy):
                return
            spec = deploy.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            template = copy.deepcopy(spec.get("template") or {})
            collisions = int((deploy.get("status") or {}).get("collisionCount") or 0)
            digest = template_hash(template, collisions)
            sets = owned(core, deploy["metadata"]["uid"], REPLICASETS)
            current = next(
                (s for s in sets if (s["metadata"].get("labels") or {}).get(HASH_LABEL) == digest),
                None,
            )
            old = [s for s in sets if s is not current]
            for rs in old:
                if int((rs.get("spec") or {}).get("replicas", 0)) != 0:
                    new = {**rs, "spec": {**rs["spec"], "replicas": 0}}
                    core.update_internal(rs_rt, rs, new)
            limit = int(spec.get("revisionHistoryLimit", 10))
            idle = sorted(
                (s for s in old if not int((s.get("status") or {}).get("replicas") or 0)),
                key=_revision,
            )
            for rs in idle[: max(0, len(idle) - limit)]:
                core.delete_locked(rs_rt, rs, None, "Background")
            if current is not None:
                if int((current.get("spec") or {}).get("replicas", 0)) != replicas:
                    new = {**current, "spec": {**current["spec"], "replicas": replicas}}
                    current = core.update_internal(rs_rt, current, new)
                self._status(deploy, current, sets)
                return
            revision = max([_revision(s) for s in sets] + [0]) + 1
        labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: digest}
        template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: digest}
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-{digest}",
                "namespace": ns,
                "labels": labels,
                "annotations": {
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                    REVISION: str(revision),
                },
                "ownerReferences": [owner_reference(deploy)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        try:
            core.create(rs_rt, "v1", ns, body, WriteOptions())
        except ApiError as exc:
            if exc.code == 409:  # a ReplicaSet of that name not ours: hash again, as k8s does
                with core.store.lock:
                    deploy = core.store.get(DEPLOYMENTS, ns, name)
                    if deploy is not None:
                        status = {**(deploy.get("status") or {}), "collisionCount": collisions + 1}
                        core.update_internal(
                            core.types[DEPLOYMENTS], deploy, {**deploy, "status": status}
                        )
                return
            self.events.event(deploy, "Warning", "FailedCreate", f"Error creating: {exc}")
            return
        self.events.event(
            deploy,
            "Normal",
            "ScalingReplicaSet",
            f"Scaled up replica set {name}-{digest} from 0 to {replicas}",
        )

    def _status(
        self, deploy: dict[str, Any], current: dict[str, Any], sets: list[dict[str, Any]]
    ) -> None:
        """Deployment status from its ReplicaSets (store lock held)."""

        def total(key: str, among: list[dict[str, Any]]) -> int:
            return sum(int((s.get("status") or {}).get(key) or 0) for s in among)

        spec = deploy.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        available = total("availableReplicas", sets)
        status: dict[str, Any] = dict(deploy.get("status") or {})
        status.update(
            {
                "observedGeneration": deploy["metadata"].get("generation", 1),
                "replicas": total("replicas", sets),
                "updatedReplicas": total("replicas", [current]),
                "readyReplicas": total("readyReplicas", sets),
                "availableReplicas": available,
                "unavailableReplicas": max(0, replicas - available),
            }
        )
        for key in ("readyReplicas", "availableReplicas", "unavailableReplicas"):
            if not status[key]:
                del status[key]
        if status != (deploy.get("status") or {}):
            self.core.update_internal(
                self.core.types[DEPLOYMENTS], deploy, {**deploy, "status": status}
            )
