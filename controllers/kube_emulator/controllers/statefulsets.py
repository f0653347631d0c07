"""The StatefulSet controller: pods ``<statefulset>-<ordinal>`` with the ordinal's labels,
``hostname`` and ``subdomain`` (the governing service); with ``podManagementPolicy:
OrderedReady`` (the default) ordinal N is created only once 0..N-1 are Running and Ready, and
scaling down removes the highest ordinal first; ``Parallel`` creates and deletes all at once.
A failed pod is deleted and created again.

``volumeClaimTemplates``: before a pod is created, each template's PersistentVolumeClaim
``<template>-<statefulset>-<ordinal>`` is created if it does not exist (the template's labels
with the set's selector labels, its annotations and spec), marked ``Pending`` as the PV
controller marks an unbound claim, and the pod's volume of the template's name uses it. Claims
are kept when the set scales down or is deleted (the default retention policy, ``Retain``).
Not done: the ``Delete`` retention policies, ControllerRevisions and rolling updates of existing
pods, ``spec.ordinals.start``."""

from __future__ import annotations

import copy
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

PVCS = ("", "persistentvolumeclaims")
POD_INDEX = "apps.kubernetes.io/pod-index"
POD_NAME = "statefulset.kubernetes.io/pod-name"
REVISION_HASH = "controller-revision-hash"


def _ordinal(set_name: str, pod: dict[str, Any]) -> int | None:
    prefix, _, tail = pod["metadata"]["name"].rpartition("-")
    if prefix != set_name or not tail.isdigit():
        return None
    return int(tail)


def claim_name(template: dict[str, Any], set_name: str, ordinal: int) -> str:
    return f"{(template.get('metadata') or {}).get('name')}-{set_name}-{ordinal}"


def _claims(sts: dict[str, Any], ordinal: int) -> list[tuple[str, dict[str, Any]]]:
    """(template name, claim) of every volumeClaimTemplate, for pod ``ordinal``."""
    md = sts["metadata"]
    selector = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    out = []
    for template in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
        tmd = template.get("metadata") or {}
        claim_md: dict[str, Any] = {
            "name": claim_name(template, md["name"], ordinal),
            "namespace": md["namespace"],
            "labels": {**(tmd.get("labels") or {}), **selector},
        }
        if tmd.get("annotations"):
            claim_md["annotations"] = dict(tmd["annotations"])
        spec = {"volumeMode": "Filesystem", **copy.deepcopy(template.get("spec") or {})}
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": claim_md,
            "spec": spec,
        }
        out.append((str(tmd.get("name")), claim))
    return out


def _with_claims(pod: dict[str, Any], claims: list[tuple[str, dict[str, Any]]]) -> None:
    """The pod's volumes: one per claim template (first, in template order), then the
    template's other volumes, as the real controller's ``updateStorage``."""
    named = {name for name, _ in claims}
    volumes = [
        {"name": name, "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
        for name, claim in claims
    ]
    volumes += [v for v in pod["spec"].get("volumes") or [] if v.get("name") not in named]
    if volumes:
        pod["spec"]["volumes"] = volumes


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
            claims = _claims(sts, ordinal)
            if claims and not self._create_claims(sts, pod_name, claims):
                return
            _with_claims(body, claims)
            try:
                core.create(pod_rt, "v1", ns, body, WriteOptions())
            except Exception as exc:  # what the API server refused: said where users look
                self.events.event(
                    sts,
                    "Warning",
                    "FailedCreate",
                    f"Create Pod {pod_name} in StatefulSet {name} failed error: {exc}",
                )
                return
            self.events.event(
                sts,
                "Normal",
                "SuccessfulCreate",
                f"Create Pod {pod_name} in StatefulSet {name} successful",
            )

    def _create_claims(
        self, sts: dict[str, Any], pod_name: str, claims: list[tuple[str, dict[str, Any]]]
    ) -> bool:
        """Create the claims that do not exist yet; False (and a Warning Event) when the API
        server refuses one."""
        core = self.core
        rt = core.types[PVCS]
        set_name = sts["metadata"]["name"]
        for _, claim in claims:
            md = claim["metadata"]
            with core.store.lock:
                if core.store.get(PVCS, md["namespace"], md["name"]) is not None:
                    continue  # kept from before (scale-down, a deleted set): reused
            try:
                core.create(rt, "v1", md["namespace"], claim, WriteOptions())
            except Exception as exc:  # what the API server refused: said where users look
                self.events.event(
                    sts,
                    "Warning",
                    "FailedCreate",
                    f"Create Claim {md['name']} for Pod {pod_name} in StatefulSet {set_name} "
                    f"failed error: {exc}",
                )
                return False
            with core.store.lock:
                current = core.store.get(PVCS, md["namespace"], md["name"])
                if current is not None and not (current.get("status") or {}).get("phase"):
                    core.update_internal(rt, current, {**current, "status": {"phase": "Pending"}})
            self.events.event(
                sts,
                "Normal",
                "SuccessfulCreate",
                f"Create Claim {md['name']} Pod {pod_name} in StatefulSet {set_name} success",
            )
        return True
