"""A cluster snapshot: everything the scheduler reads, in one versioned file.

``kai snapshot`` writes one from a cluster, the live scheduler writes one on demand, and
``kai simulate --snapshot``, ``kai explain``, ``kai queues`` and ``kai plan`` read one. The file
holds the raw objects the scheduler's informers list (nodes, pods, PodGroups, Queues,
BindRequests, Topologies, PriorityClasses, PersistentVolumeClaims, PersistentVolumes,
StorageClasses and the scheduler ConfigMap), so a snapshot is turned
into the core's input by the very code of the live scheduler
(:class:`~kai.reconcilers.snapshot_builder.SnapshotBuilder`), at the capture time.

Format (JSON; docs/explain.md)::

    apiVersion: kai.scheduler/v1alpha1
    kind: ClusterSnapshot
    formatVersion: 1
    capturedAt: "2026-12-01T18:00:00Z"
    schedulerName: kai-scheduler
    configMap: kai-scheduler/kai-scheduler-config
    nodePool: ""                       # optional: the pool of the scheduler that wrote it
    nodePoolLabelKey: kai.scheduler/node-pool   # optional (this default)
    objects: {nodes: [...], pods: [...], podgroups: [...], queues: [...], bindrequests: [...],
              topologies: [...], priorityclasses: [...], configmaps: [...],
              persistentvolumeclaims: [...], persistentvolumes: [...], storageclasses: [...]}

Never included: Secrets (never read), container environment, commands, arguments, volumes (but
the names of the PersistentVolumeClaims they use) and image pull secrets of pods,
``managedFields`` and ``kubectl.kubernetes.io/last-applied-configuration`` (which may carry any
of those).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kai.reconcilers.shard import NODE_POOL_LABEL, NodePool
from kai.reconcilers.snapshot_builder import BuiltSnapshot, SnapshotBuilder, parse_time
from kai.reconcilers.volume_claims import VolumeIndex
from kai.scheduler.snapshot import SchedulerConfig

if TYPE_CHECKING:
    from kai.api.scheduler_configmap import SchedulerConfigMap

API_VERSION = "kai.scheduler/v1alpha1"
KIND = "ClusterSnapshot"
FORMAT_VERSION = 1
KINDS = (
    "nodes",
    "pods",
    "podgroups",
    "queues",
    "bindrequests",
    "topologies",
    "priorityclasses",
    "configmaps",
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
)
DEFAULT_CONFIG_MAP = "kai-scheduler/kai-scheduler-config"
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# what the scheduler reads of a container; everything else (env, command, args, mounts,
# probes, image) is dropped
_CONTAINER_KEYS = ("name", "resources", "restartPolicy")
_DROPPED_POD_SPEC = ("volumes", "imagePullSecrets", "ephemeralContainers")


class SnapshotFormatError(ValueError):
    """The file is not a readable cluster snapshot; the message names the file and field."""


@dataclass
class ClusterSnapshot:
    captured_at: float
    scheduler_name: str = "kai-scheduler"
    config_map: str = DEFAULT_CONFIG_MAP
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in KINDS})
    notes: list[str] = field(default_factory=list)  # e.g. a CRD not installed
    # the node pool whose scheduler's view this is (value of the node-pool label, "" = KAI's
    # default pool) and the label's key: what a live scheduler records; a capture records none
    node_pool: str | None = None
    node_pool_label: str = NODE_POOL_LABEL

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "formatVersion": FORMAT_VERSION,
            "capturedAt": rfc3339(self.captured_at),
            "schedulerName": self.scheduler_name,
            "configMap": self.config_map,
        }
        if self.node_pool is not None:
            doc["nodePool"] = self.node_pool
        if self.node_pool_label != NODE_POOL_LABEL:
            doc["nodePoolLabelKey"] = self.node_pool_label
        doc["notes"] = list(self.notes)
        doc["objects"] = {k: self.objects.get(k, []) for k in KINDS}
        return doc

    def write(self, path: str | Path) -> None:
        text = json.dumps(self.to_document(), indent=1, sort_keys=False) + "\n"
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)

    def settings(self, node_pool: str | None = None) -> SchedulerConfigMap:
        """The settings of a node pool in the snapshot's scheduler ConfigMap, as the live
        scheduler of that pool reads them: its SchedulerConfig and the SharingPolicies' GPU
        sharing modes per pool (KAI's defaults, every mode everywhere, without the ConfigMap).
        ``node_pool``: the label's value (default: the recorded pool, else the default one)."""
        from kai.api.scheduler_configmap import (
            InvalidSchedulerConfig,
            SchedulerConfigMap,
            read_scheduler_configmap,
        )

        pool = self.pool_of(node_pool)
        namespace, _, name = self.config_map.partition("/")
        for cm in self.objects.get("configmaps", []):
            md = cm.get("metadata") or {}
            if md.get("name") == name and (md.get("namespace") or "") == namespace:
                try:
                    return read_scheduler_configmap(cm, pool)
                except InvalidSchedulerConfig as exc:
                    raise SnapshotFormatError(f"ConfigMap {self.config_map}: {exc}") from exc
        return SchedulerConfigMap(SchedulerConfig())

    def config(self, node_pool: str | None = None) -> SchedulerConfig:
        """The SchedulerConfig in the snapshot's scheduler ConfigMap (KAI's defaults without)."""
        return self.settings(node_pool).config

    def pool_of(self, node_pool: str | None = None) -> str:
        """The node pool a build sees: ``node_pool``, else the recorded one, else the default."""
        if node_pool is not None:
            return node_pool
        return self.node_pool or ""

    def build(
        self, config: SchedulerConfig | None = None, node_pool: str | None = None
    ) -> BuiltSnapshot:
        """The core's input, built by the live scheduler's builder at the capture time, for one
        node pool (see :meth:`pool_of`) with the same inputs as that pool's live scheduler: its
        nodes, Queues and workloads only, its settings and the GPU sharing modes."""
        settings = self.settings(node_pool)
        pool = NodePool(partition=self.pool_of(node_pool), label_key=self.node_pool_label)
        builder = SnapshotBuilder(self.scheduler_name, config or settings.config, pool)
        builder.sharing_modes = settings.sharing_modes
        o = self.objects
        return builder.build(
            pods=o.get("pods", []),
            nodes=o.get("nodes", []),
            podgroups=o.get("podgroups", []),
            queues=o.get("queues", []),
            bind_requests=o.get("bindrequests", []),
            topologies=o.get("topologies", []),
            priority_classes=o.get("priorityclasses", []),
            now=self.captured_at,
            volumes=VolumeIndex(
                o.get("persistentvolumeclaims", []),
                o.get("persistentvolumes", []),
                o.get("storageclasses", []),
            ),
        )

    def pool_of_target(self, target: str) -> str | None:
        """The node pool (label value) of the PodGroup or pod ``[NAMESPACE/]NAME``: its
        PodGroup's label, else the pod's; None when no object has that name."""
        namespace, _, name = target.rpartition("/")

        def named(obj: Mapping[str, Any]) -> bool:
            md = obj.get("metadata") or {}
            return md.get("name") == name and (not namespace or md.get("namespace") == namespace)

        for kind in ("podgroups", "pods"):
            for obj in self.objects.get(kind, []):
                if named(obj):
                    labels = (obj.get("metadata") or {}).get("labels") or {}
                    return str(labels.get(self.node_pool_label) or "")
        return None


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- sanitising ---------------------------------------------------------------------------
def sanitize(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` with nothing secret: see the module docstring."""
    out = dict(obj)
    md = dict(out.get("metadata") or {})
    md.pop("managedFields", None)
    if isinstance(md.get("annotations"), dict) and _LAST_APPLIED in md["annotations"]:
        md["annotations"] = {k: v for k, v in md["annotations"].items() if k != _LAST_APPLIED}
    out["metadata"] = md
    if kind == "pods" and isinstance(out.get("spec"), dict):
        spec = {k: v for k, v in out["spec"].items() if k not in _DROPPED_POD_SPEC}
        claims = _claim_volumes(out["spec"].get("volumes"))
        if claims:
            spec["volumes"] = claims
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [
                    {k: c[k] for k in _CONTAINER_KEYS if k in c}
                    for c in spec[key]
                    if isinstance(c, dict)
                ]
        out["spec"] = spec
    if kind == "configmaps":
        out.pop("binaryData", None)
    return out


def _claim_volumes(volumes: Any) -> list[dict[str, Any]]:
    """Of a pod's volumes, only what names a PersistentVolumeClaim (the scheduler's volume
    filter reads it): a claim's name, or that a generic ephemeral volume is there."""
    out: list[dict[str, Any]] = []
    for volume in volumes if isinstance(volumes, list) else []:
        if not isinstance(volume, dict):
            continue
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and claim.get("claimName"):
            out.append(
                {
                    "name": volume.get("name"),
                    "persistentVolumeClaim": {"claimName": claim["claimName"]},
                }
            )
        elif volume.get("ephemeral") is not None:
            out.append({"name": volume.get("name"), "ephemeral": {}})
    return out


# -- capture --------------------------------------------------------------------------------
def capture(
    kube: Any,
    *,
    scheduler_name: str = "kai-scheduler",
    config_map: str = DEFAULT_CONFIG_MAP,
    now: Callable[[], float] = time.time,
) -> ClusterSnapshot:
    """List everything the scheduler reads from the cluster behind ``kube``
    (:class:`kai.kube.client.Kube`). A kind whose API is not served (a CRD not installed) is
    captured empty and named in ``notes``."""
    from kai.kube.client import ApiError
    from kai.kube.resources import (
        BIND_REQUESTS,
        CONFIGMAPS,
        NODES,
        PODGROUPS,
        PODS,
        PRIORITY_CLASSES,
        PVCS,
        PVS,
        QUEUES,
        STORAGE_CLASSES,
        TOPOLOGIES,
    )

    resources = {
        "nodes": NODES,
        "pods": PODS,
        "podgroups": PODGROUPS,
        "queues": QUEUES,
        "bindrequests": BIND_REQUESTS,
        "topologies": TOPOLOGIES,
        "priorityclasses": PRIORITY_CLASSES,
        "persistentvolumeclaims": PVCS,
        "persistentvolumes": PVS,
        "storageclasses": STORAGE_CLASSES,
    }
    snap = ClusterSnapshot(captured_at=now(), scheduler_name=scheduler_name, config_map=config_map)
    for kind, res in resources.items():
        try:
            items = _list_all(kube, res)
        except ApiError as exc:
            if exc.status != 404:
                raise
            snap.notes.append(f"{kind}: not served by this cluster ({res.api_version})")
            items = []
        snap.objects[kind] = [sanitize(kind, _with_kind(o, res)) for o in items]
    namespace, _, name = config_map.partition("/")
    try:
        cm = kube.get(CONFIGMAPS, name, namespace)
    except ApiError as exc:
        if exc.status != 404:
            raise
        snap.notes.append(f"configmaps: {config_map} does not exist (KAI's default settings)")
    else:
        snap.objects["configmaps"] = [sanitize("configmaps", _with_kind(cm, CONFIGMAPS))]
    return snap


def _with_kind(obj: dict[str, Any], res: Any) -> dict[str, Any]:
    if obj.get("kind") and obj.get("apiVersion"):
        return obj
    return {"apiVersion": res.api_version, "kind": res.kind, **obj}


def _list_all(kube: Any, res: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = kube.list(res, limit=500, continue_token=token)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def from_caches(
    caches: Mapping[str, Iterable[dict[str, Any]]],
    *,
    scheduler_name: str,
    config_map: str,
    now: float | None = None,
    node_pool: str | None = None,
    node_pool_label: str = NODE_POOL_LABEL,
) -> ClusterSnapshot:
    """A snapshot of what a live scheduler's informers hold (``caches``: kind -> objects, the
    kinds of :data:`KINDS`, ``config`` for the ConfigMap)."""
    snap = ClusterSnapshot(
        captured_at=time.time() if now is None else now,
        scheduler_name=scheduler_name,
        config_map=config_map,
        node_pool=node_pool,
        node_pool_label=node_pool_label,
    )
    for kind in KINDS:
        source = caches.get("config" if kind == "configmaps" else kind, ())
        snap.objects[kind] = [sanitize(kind, o) for o in source]
    return snap


# -- load -----------------------------------------------------------------------------------
def load(path: str | Path) -> ClusterSnapshot:
    """Read and check a snapshot file; :class:`SnapshotFormatError` names file and field."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotFormatError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SnapshotFormatError(f"{where}: not UTF-8 text: {exc.reason}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotFormatError(f"{where}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from exc
    return from_document(doc, where)


def _check_pool_fields(doc: Mapping[str, Any], where: str) -> None:
    """The optional ``nodePool`` (a string, "" = the default pool) and ``nodePoolLabelKey``
    (a non-empty string)."""
    if "nodePool" in doc and not isinstance(doc["nodePool"], str):
        raise SnapshotFormatError(f"{where}: nodePool: expected a string")
    key = doc.get("nodePoolLabelKey", NODE_POOL_LABEL)
    if not isinstance(key, str) or not key:
        raise SnapshotFormatError(f"{where}: nodePoolLabelKey: expected a non-empty string")


def from_document(doc: Any, where: str = "snapshot") -> ClusterSnapshot:
    if not isinstance(doc, dict):
        raise SnapshotFormatError(f"{where}: expected a {KIND} object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise SnapshotFormatError(
            f"{where}: apiVersion/kind: expected {API_VERSION} {KIND}, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}"
        )
    version = doc.get("formatVersion")
    if version != FORMAT_VERSION:
        raise SnapshotFormatError(
            f"{where}: formatVersion: {version!r} is not supported (this kai reads "
            f"{FORMAT_VERSION})"
        )
    captured = parse_time(doc.get("capturedAt"))
    if captured is None:
        raise SnapshotFormatError(
            f"{where}: capturedAt: expected an RFC 3339 time, got {doc.get('capturedAt')!r}"
        )
    for key in ("schedulerName", "configMap"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise SnapshotFormatError(f"{where}: {key}: expected a non-empty string")
    if "/" not in doc["configMap"]:
        raise SnapshotFormatError(f"{where}: configMap: expected NAMESPACE/NAME")
    objects = doc.get("objects")
    if not isinstance(objects, dict):
        raise SnapshotFormatError(f"{where}: objects: expected a mapping of kind -> list")
    unknown = sorted(set(objects) - set(KINDS))
    if unknown:
        raise SnapshotFormatError(
            f"{where}: objects: unknown kind(s) {', '.join(unknown)}; expected {', '.join(KINDS)}"
        )
    _check_pool_fields(doc, where)
    snap = ClusterSnapshot(
        captured_at=captured,
        scheduler_name=doc["schedulerName"],
        config_map=doc["configMap"],
        notes=[str(n) for n in doc.get("notes") or []],
        node_pool=doc.get("nodePool"),
        node_pool_label=doc.get("nodePoolLabelKey") or NODE_POOL_LABEL,
    )
    for kind in KINDS:
        items = objects.get(kind, [])
        if not isinstance(items, list):
            raise SnapshotFormatError(f"{where}: objects.{kind}: expected a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
                raise SnapshotFormatError(
                    f"{where}: objects.{kind}[{i}]: expected an object with metadata"
                )
            if not (item["metadata"].get("name")):
                raise SnapshotFormatError(f"{where}: objects.{kind}[{i}].metadata.name: missing")
        snap.objects[kind] = items
    return snap
