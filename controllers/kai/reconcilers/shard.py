"""Which part of the cluster one scheduler serves: its SchedulingShard and KAI's ``kai-config``.

A SchedulingShard (``kai.scheduler/v1``, cluster-scoped) names a node pool by
``spec.partitionLabelValue``: the scheduler of that shard sees only the nodes, Queues and
PodGroups whose node-pool label (``kai.scheduler/node-pool`` unless ``kai-config`` says otherwise)
has that value; ``""`` selects the objects *without* the label (KAI's ``default`` shard). It
reads the ``scheduler-policy`` section of that pool from the scheduler ConfigMap and holds its
own leader Lease (``<scheduler-name>`` for the unlabelled pool, ``<scheduler-name>-<value>``
otherwise, as KAI names it). A scheduler started without ``--shard`` serves KAI's default
pool, as the ``default`` SchedulingShard does: the nodes, Queues and PodGroups without the
label, with the default pool's settings; it writes no shard condition. A cluster without
node-pool labels is therefore served whole.

KAI's operator ``Config`` (``kai.scheduler/v1``, the singleton ``kai-config``) is read where it
overlaps kai's own flags: ``spec.global.schedulerName``, ``queueLabelKey`` and
``nodePoolLabelKey``. Flags given on the command line win; without the CRD or the object
(kai does not install either) KAI's defaults apply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.resources import KAI_CONFIGS, SCHEDULING_SHARDS
from kai.kube.writes import patch_if_changed

log = logging.getLogger("kai.shard")

NODE_POOL_LABEL = "kai.scheduler/node-pool"
KAI_CONFIG = "kai-config"
DEFAULT_POOL = "default"  # how KAI names the unlabelled pool in events and conditions


class ShardError(ValueError):
    """The SchedulingShard cannot be used; the message names it and the field."""


@dataclass(frozen=True)
class NodePool:
    """The node pool a scheduler serves."""

    shard: str | None = None
    """SchedulingShard name; None = no shard: KAI's default pool (objects without the label)."""
    partition: str = ""
    """Value of the node-pool label; "" = objects without the label."""
    label_key: str = NODE_POOL_LABEL

    @property
    def name(self) -> str:
        """The pool's name in Events, conditions and metrics (KAI: ``default`` for "")."""
        return self.partition or DEFAULT_POOL

    def holds(self, labels: Mapping[str, Any] | None) -> bool:
        """Whether an object with these labels belongs to this pool. Without a shard the pool
        is KAI's default one: the objects without the node-pool label (another pool's nodes,
        Queues and workloads are left to that pool's scheduler)."""
        return str((labels or {}).get(self.label_key) or "") == self.partition

    def lease_name(self, scheduler_name: str) -> str:
        return f"{scheduler_name}-{self.partition}" if self.partition else scheduler_name


def read_kai_config(kube: Kube) -> dict[str, str]:
    """``spec.global`` of KAI's ``kai-config`` as far as kai uses it (schedulerName,
    queueLabelKey, nodePoolLabelKey); ``{}`` when the CRD or the object is absent or unreadable."""
    try:
        obj = kube.get(KAI_CONFIGS, KAI_CONFIG)
    except ApiError as exc:
        if exc.status not in (403, 404):
            log.warning("cannot read Config %s: %s; using defaults", KAI_CONFIG, exc)
        return {}
    glob = ((obj.get("spec") or {}).get("global")) or {}
    out: dict[str, str] = {}
    for key in ("schedulerName", "queueLabelKey", "nodePoolLabelKey"):
        value = glob.get(key) if isinstance(glob, Mapping) else None
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            log.warning(
                "Config %s: spec.global.%s=%r is not a non-empty string; ignored",
                KAI_CONFIG,
                key,
                value,
            )
            continue
        out[key] = value
    return out


def load_node_pool(kube: Kube, shard: str | None, label_key: str = NODE_POOL_LABEL) -> NodePool:
    """The pool of SchedulingShard ``shard`` (None: no shard). Raises :class:`ShardError` when
    the shard does not exist or its partitionLabelValue is not a string."""
    if shard is None:
        return NodePool(label_key=label_key)
    try:
        obj = kube.get(SCHEDULING_SHARDS, shard)
    except ApiError as exc:
        if exc.status == 404:
            raise ShardError(
                f"SchedulingShard {shard!r} does not exist "
                "(kubectl get schedulingshards.kai.scheduler; create it, or drop --shard)"
            ) from exc
        raise
    value = (obj.get("spec") or {}).get("partitionLabelValue")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ShardError(
            f"SchedulingShard {shard!r}: spec.partitionLabelValue must be a string, got {value!r}"
        )
    return NodePool(shard=shard, partition=value, label_key=label_key)


def set_shard_condition(
    kube: Kube, pool: NodePool, ctype: str, status: str, reason: str, message: str, now: str
) -> None:
    """Set one condition on the pool's SchedulingShard status (nothing without a shard)."""
    if pool.shard is None:
        return
    try:
        obj = kube.get(SCHEDULING_SHARDS, pool.shard)
    except KubeError as exc:
        log.info("cannot read SchedulingShard %s: %s", pool.shard, exc)
        return
    conditions = list(((obj.get("status") or {}).get("conditions")) or [])
    current = next((c for c in conditions if c.get("type") == ctype), None)
    if current is not None and (
        current.get("status"),
        current.get("reason"),
        current.get("message"),
    ) == (status, reason, message):
        return
    condition = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": (
            current.get("lastTransitionTime")
            if current is not None and current.get("status") == status
            else now
        ),
        "observedGeneration": (obj.get("metadata") or {}).get("generation") or 0,
    }
    others = [c for c in conditions if c.get("type") != ctype]
    try:
        patch_if_changed(
            kube,
            SCHEDULING_SHARDS,
            obj,
            {"status": {"conditions": [*others, condition]}},
            sub="status",
        )
    except KubeError as exc:
        log.info("cannot set condition %s on SchedulingShard %s: %s", ctype, pool.shard, exc)
