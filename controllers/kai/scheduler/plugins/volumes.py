"""PersistentVolumeClaims (the scheduler's part of Kubernetes VolumeBinding): a pod whose claim
does not exist, or is unbound with an immediate-binding StorageClass, fits no node; a bound
claim's PersistentVolume with ``spec.nodeAffinity.required`` (local disks, zonal volumes) keeps
the pod on the nodes that can reach it, and so does an unbound WaitForFirstConsumer claim whose
StorageClass lists ``allowedTopologies``; an unbound claim of a class without a provisioner
(pre-provisioned local volumes) keeps the pod on the nodes an available PersistentVolume can be
bound on."""

from __future__ import annotations

from collections.abc import Hashable

from kai.scheduler.framework import FilterMasks, NodeFilter, NodeView
from kai.scheduler.predicates import (
    VOLUME_CLAIM_MISSING,
    VOLUME_CLAIM_UNBOUND,
    VOLUME_NODE_AFFINITY,
    VOLUME_NOT_AVAILABLE,
    volume_masks,
)
from kai.scheduler.snapshot import TaskSpec


def _masks(view: NodeView, spec: TaskSpec) -> FilterMasks:
    if spec.volumes is None:
        return ()
    return volume_masks(view.labels, spec.volumes, len(view.nodes))


def _key(spec: TaskSpec) -> Hashable:
    return spec.volumes


VOLUMES = NodeFilter(
    "volume-binding",
    (VOLUME_CLAIM_MISSING, VOLUME_CLAIM_UNBOUND, VOLUME_NODE_AFFINITY, VOLUME_NOT_AVAILABLE),
    _masks,
    class_key=_key,
)
