"""The binder's part of volume binding: tell a dynamic provisioner where the pod goes.

An unbound claim of a ``WaitForFirstConsumer`` StorageClass is provisioned only once its
annotation ``volume.kubernetes.io/selected-node`` names a node, which Kubernetes' volume binder
(and KAI's binder plugin ``volumebinding``) writes when the pod is bound. The kai binder does
the same just before it binds the pod; the kubelet then waits for the volume. A pod without
PersistentVolumeClaims costs no request.

A claim of a ``WaitForFirstConsumer`` class *without* a provisioner (pre-provisioned local
volumes) is bound here to a volume, as Kubernetes' volume binder does in its PreBind: the binder
chooses a PersistentVolume that matches the claim (:func:`~kai.reconcilers.volume_claims.matches`)
and that the chosen node reaches (its ``spec.nodeAffinity``), the smallest that fits, and writes
the volume's ``spec.claimRef`` with the resourceVersion it read as a precondition (two binders,
or two pods, never take one volume); Kubernetes' PV controller then completes the binding. The
scheduler only sent the pod to a node where such a volume exists.
"""

from __future__ import annotations

from typing import Any

from kai.api.quantity import parse_quantity
from kai.kube.client import ApiError, Kube
from kai.kube.resources import NODES, PVCS, PVS, STORAGE_CLASSES
from kai.kube.writes import patch_if_changed, with_retries
from kai.reconcilers.snapshot_builder import ObjectError, pod_claims
from kai.reconcilers.volume_claims import (
    NO_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    matches,
    volume_terms,
)
from kai.scheduler.selectors import value_matches

SELECTED_NODE = "volume.kubernetes.io/selected-node"


def _get(kube: Kube, res: Any, name: str, ns: str | None = None) -> dict[str, Any] | None:
    try:
        return with_retries(lambda: kube.get(res, name, ns))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def select_node(kube: Kube, pod: dict[str, Any], node: str) -> str:
    """Annotate each unbound ``WaitForFirstConsumer`` claim of ``pod`` with ``node``: '' when
    done, else the failure reason (a claim that no longer exists)."""
    md = pod.get("metadata") or {}
    ns = str(md.get("namespace") or "")
    for name in pod_claims(pod.get("spec") or {}, str(md.get("name") or "")):
        claim = _get(kube, PVCS, name, ns)
        if claim is None:
            return f"VolumeClaimNotFound: persistentvolumeclaim {ns}/{name} does not exist"
        spec = claim.get("spec") or {}
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        class_name = spec.get("storageClassName")
        if spec.get("volumeName") or annotations.get(SELECTED_NODE) == node or not class_name:
            continue
        storage_class = _get(kube, STORAGE_CLASSES, str(class_name))
        if (
            storage_class is None
            or storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER
        ):
            continue
        if storage_class.get("provisioner") == NO_PROVISIONER:
            failed = bind_local_volume(kube, claim, str(class_name), node)
            if failed:
                return failed
            continue
        patch_if_changed(kube, PVCS, claim, {"metadata": {"annotations": {SELECTED_NODE: node}}})
    return ""


def bind_local_volume(kube: Kube, claim: dict[str, Any], class_name: str, node: str) -> str:
    """Reserve a pre-provisioned volume on ``node`` for ``claim`` (its ``claimRef``): '' when
    done (or already done), else the reason."""
    md = claim.get("metadata") or {}
    where = f"persistentvolumeclaim {md.get('namespace')}/{md.get('name')}"
    node_obj = _get(kube, NODES, node)
    labels = ((node_obj or {}).get("metadata") or {}).get("labels") or {}
    for _ in range(5):  # another claim may take a volume between the list and the patch
        candidates = [
            v
            for v in with_retries(lambda: kube.list(PVS))["items"]
            if matches(v, claim, class_name) and _reaches(v, labels)
        ]
        if not candidates:
            return f"VolumeBindingFailed: no available persistent volume for {where} on {node}"
        mine = [v for v in candidates if ((v.get("spec") or {}).get("claimRef") or {})]
        if mine:
            return ""  # reserved for this claim already (a retried bind)
        volume = min(candidates, key=_size_and_name)
        vmd = volume["metadata"]
        ref = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": md.get("namespace"),
            "name": md.get("name"),
            "uid": md.get("uid"),
        }
        try:
            kube.patch(
                PVS,
                vmd["name"],
                {
                    "metadata": {"resourceVersion": vmd["resourceVersion"]},
                    "spec": {"claimRef": ref},
                },
            )
            return ""
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
    return f"VolumeBindingFailed: the persistent volumes for {where} kept changing"


def _reaches(volume: dict[str, Any], labels: dict[str, Any]) -> bool:
    """Whether a node with ``labels`` reaches ``volume`` (an unreadable affinity: no node)."""
    try:
        terms = volume_terms(volume)
    except ObjectError:
        return False
    return terms is None or any(
        term.requirements
        and all(value_matches(req, labels.get(req.key)) for req in term.requirements)
        for term in terms
    )


def _size_and_name(volume: dict[str, Any]) -> tuple[Any, str]:
    capacity = ((volume.get("spec") or {}).get("capacity") or {}).get("storage") or 0
    try:
        size = parse_quantity(capacity)
    except ValueError:
        size = parse_quantity(0)
    return size, str(volume["metadata"]["name"])
