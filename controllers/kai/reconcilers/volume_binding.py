"""The binder's part of volume binding: tell a dynamic provisioner where the pod goes.

An unbound claim of a ``WaitForFirstConsumer`` StorageClass is provisioned only once its
annotation ``volume.kubernetes.io/selected-node`` names a node, which Kubernetes' volume binder
(and KAI's binder plugin ``volumebinding``) writes when the pod is bound. The kai binder does
the same just before it binds the pod; the kubelet then waits for the volume. A pod without
PersistentVolumeClaims costs no request. Pre-provisioned volumes of a class without a
provisioner are not chosen here (the scheduler keeps such pods pending: docs/scheduling.md).
"""

from __future__ import annotations

from typing import Any

from kai.kube.client import ApiError, Kube
from kai.kube.resources import PVCS, STORAGE_CLASSES
from kai.kube.writes import patch_if_changed, with_retries
from kai.reconcilers.snapshot_builder import pod_claims
from kai.reconcilers.volume_claims import NO_PROVISIONER, WAIT_FOR_FIRST_CONSUMER

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
            or storage_class.get("provisioner") == NO_PROVISIONER
        ):
            continue
        patch_if_changed(kube, PVCS, claim, {"metadata": {"annotations": {SELECTED_NODE: node}}})
    return ""
