"""The pod-grouper: every pod of ``kai-scheduler`` gets a PodGroup decided by its top owner.

The loop (this module): a pod event queues the pod; the worker skips pods it must leave alone
(another scheduler, ``kai.scheduler/skip-podgrouper: "true"`` on the pod or any owner, a pod
that already names a PodGroup other than the one it would create: a user-managed PodGroup),
walks the pod's owners through the API (:mod:`kai.reconcilers.grouping.owners`, cached), asks
the grouper of the top owner's kind for a plan (:mod:`kai.reconcilers.grouping`, one module
per workload family; docs/workloads.md lists them) and writes the PodGroup, then the pod's
``pod-group-name`` annotation and ``kai.scheduler/subgroup-name`` label.

On update the PodGroup keeps its queue, markUnschedulable, schedulingBackoff and labels as
created (the queue is immutable, as in KAI) and an existing topologyConstraint when the
workload names none; minMember, minSubGroup, subGroups, priority class and preemptibility
follow the workload. A malformed workload gets a ``PodGrouperWarning`` Event and no PodGroup;
an owner kind no grouper knows gets one PodGroup per top owner and a Warning Event on that
owner saying so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Mapping
from typing import Any, cast

from kai.api.namespace_queues import NamespaceQueues, from_cluster
from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer
from kai.kube.resources import CONFIGMAPS, PODGROUPS, PODS
from kai.kube.workqueue import WorkQueue
from kai.kube.writes import create_or_get, patch_if_changed
from kai.reconcilers.group_by_owner import (
    BY_OWNER_ANNOTATION,
    ONE_GROUP_KINDS,
    controller_of,
    derived_group,
    owner_podgroup_name,
)
from kai.reconcilers.grouping import (
    Chain,
    GroupingError,
    KindDefault,
    Settings,
    manifest,
    parse_default_priorities,
    plan_for,
)
from kai.reconcilers.grouping.base import (
    BATCH_MIN_MEMBER,
    DEFAULT_QUEUE,
    NODE_POOL_LABEL,
    PREEMPTIBILITY_LABEL,
    QUEUE_LABEL,
    SKIP_ANNOTATION,
    SUBGROUP_LABEL,
    TOP_OWNER_METADATA,
    TOPOLOGY,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    annotations_of,
    describe,
    labels_of,
)
from kai.reconcilers.grouping.base import group_of as api_group_of
from kai.reconcilers.grouping.base import md as metadata_of
from kai.reconcilers.grouping.owners import OwnerMissing, OwnerReader
from kai.reconcilers.snapshot_builder import POD_GROUP_ANNOTATION, RESERVATION_NAMESPACE

log = logging.getLogger("kai.podgrouper")

__all__ = [
    "BATCH_MIN_MEMBER",
    "DEFAULT_QUEUE",
    "PREEMPTIBILITY_LABEL",
    "QUEUE_LABEL",
    "TOPOLOGY",
    "TOPOLOGY_PREFERRED",
    "TOPOLOGY_REQUIRED",
    "TOP_OWNER_METADATA",
    "GroupingError",
    "PodGrouper",
    "podgroup_for",
]

RECENT_TTL = 30.0  # seconds a PodGroup created here is trusted before the informer has it
RECENT_MAX = 10_000
PROGRESS_EVERY = 5.0  # seconds between the INFO lines counting PodGroups created

#: spec fields that follow the workload on update (the rest stay as created)
_FOLLOW = ("minMember", "minSubGroup", "subGroups", "priorityClassName", "preemptibility")


def podgroup_for(
    pod: dict[str, Any],
    owner: dict[str, Any] | None,
    queue_label: str = QUEUE_LABEL,
    namespaces: NamespaceQueues | None = None,
    node_pool_label: str = NODE_POOL_LABEL,
) -> dict[str, Any]:
    """The PodGroup of a pod whose only owner is ``owner`` (None for a bare pod)."""
    chain = Chain(pod, [owner] if owner is not None else [])
    settings = Settings(queue_label, namespaces, node_pool_label=node_pool_label)
    return manifest(chain, plan_for(chain), settings)


class PodGrouper:
    def __init__(  # noqa: PLR0913
        self,
        kube: Kube,
        pods: Informer,
        jobs: Informer,
        podgroups: Informer,
        recorder: EventRecorder,
        *,
        scheduler_name: str = "kai-scheduler",
        workers: int = 8,
        is_leader: Any = None,
        queue_label: str = QUEUE_LABEL,
        queues: Informer | None = None,
        default_priorities: str | None = None,
        owner_ttl: float = 10.0,
        node_pool_label: str = NODE_POOL_LABEL,
        queue_trees: Informer | None = None,
    ) -> None:
        self.kube = kube
        self.queue_label = queue_label
        self.node_pool_label = node_pool_label
        self.queues = queues  # Queues: their namespace bindings (gitops.kai.scheduler/namespaces)
        self.queue_trees = queue_trees  # QueueTrees: their namespaces (None: the Queues' only)
        self._bindings: tuple[tuple[int, int], NamespaceQueues] = ((-1, -1), NamespaceQueues())
        self.pods = pods
        self.jobs = jobs
        self.podgroups = podgroups
        self.recorder = recorder
        self.scheduler_name = scheduler_name
        # "namespace/name" of KAI's per-kind default priorities ConfigMap (key "types")
        self.default_priorities = default_priorities
        self._kind_defaults: tuple[float, dict[tuple[str, str], KindDefault]] = (-1e9, {})
        self.owners = OwnerReader(kube, ttl=owner_ttl, local=self._local_owner)
        self.queue = WorkQueue("podgrouper", self._process, workers=workers)
        self._warned: dict[str, str] = {}
        # PodGroups this process created, until the informer has them (RECENT_TTL): the other
        # pods of the same Job use them without a second create (409) and a read-back (GET)
        self._recent: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._pg_locks: dict[tuple[str, str], tuple[threading.Lock, int]] = {}
        self._recent_lock = threading.Lock()
        self._waiting_for_owner: dict[str, set[tuple[str, str]]] = {}
        self._waiting_lock = threading.Lock()
        self.is_leader = is_leader or (lambda: True)
        # PodGroups created by this process: a count, and an INFO line at most every
        # PROGRESS_EVERY seconds while creating (the start-up timeline, PodGroups/s)
        self.created = 0
        self._progress = (0.0, 0)  # (monotonic time, count) of the last progress line
        pods.add_handler(self._on_pod)
        jobs.add_handler(self._on_job)

    def start(self) -> PodGrouper:
        self.queue.start()
        for pod in self.pods.items():
            self._on_pod("ADDED", pod, None)
        return self

    def stop(self) -> None:
        self.queue.stop()

    def _local_owner(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        if api_version == "batch/v1" and kind == "Job":
            job = self.jobs.get(name, namespace)
            if job is not None:
                return {"apiVersion": api_version, "kind": kind, **job}
        return None

    def _wanted(self, pod: dict[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        md = pod.get("metadata") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return False
        if md.get("namespace") == RESERVATION_NAMESPACE or md.get("deletionTimestamp"):
            return False
        if annotations_of(pod).get(SKIP_ANNOTATION) == "true":
            return False
        return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    def _on_pod(self, etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED" or not self._wanted(pod):
            return
        md = pod["metadata"]
        if (
            old is not None
            and annotations_of(old).get(POD_GROUP_ANNOTATION)
            and annotations_of(pod).get(POD_GROUP_ANNOTATION)
        ):
            return  # grouped already; later pod updates change nothing here
        if old is not None and (old.get("spec") or {}).get("nodeName"):
            return  # bound before this update (grouped by owner, no annotation needed)
        self.queue.add((md["namespace"], md["name"]))

    def _on_job(self, etype: str, job: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        # pods that were waiting for this Job to reach the cache
        with self._waiting_lock:
            keys = self._waiting_for_owner.pop(str(job["metadata"].get("uid")), set())
        for key in keys:
            self.queue.add(key)

    def _namespace_queues(self) -> NamespaceQueues | None:
        """The bindings of the QueueTrees and Queues in the cache (the mutating webhook's
        resolver), computed again only when they changed."""
        if self.queues is None:
            return None
        generation, bindings = self._bindings
        trees = self.queue_trees
        current = (self.queues.generation, trees.generation if trees is not None else -1)
        if generation != current:
            generation = current
            bindings = from_cluster(trees.items() if trees is not None else (), self.queues.items())
            self._bindings = (generation, bindings)
        return bindings

    def _defaults(self) -> Mapping[tuple[str, str], KindDefault]:
        """KAI's per-kind default priorities ConfigMap, read again every 30 s."""
        import time

        if not self.default_priorities:
            return {}
        read_at, defaults = self._kind_defaults
        now = time.monotonic()
        if now - read_at < 30:
            return defaults
        namespace, _, name = self.default_priorities.rpartition("/")
        where = f"ConfigMap {self.default_priorities} key types"
        try:
            data = self.kube.get(CONFIGMAPS, name, namespace or "kai-scheduler").get("data") or {}
            defaults = parse_default_priorities(data.get("types") or "[]", where)
        except ApiError as exc:
            if exc.status != 404:
                log.info("podgrouper: %s: %s", where, exc)
            defaults = {}
        except GroupingError as exc:
            log.warning("podgrouper: %s", exc)
            defaults = {}
        self._kind_defaults = (now, defaults)
        return defaults

    def _warn(self, obj: dict[str, Any], message: str, reason: str = "PodGrouperWarning") -> None:
        uid = obj["metadata"].get("uid", "")
        if self._warned.get(uid) == message:
            return
        self._warned[uid] = message
        log.warning("%s: %s", describe(obj), message)
        self.recorder.event(obj, "Warning", reason, message)

    def _process(self, key: Hashable) -> bool:
        ns, name = cast(tuple[str, str], key)
        if not self.is_leader():
            self.queue.add_after(key, 1.0)  # only the Lease holder writes
            return True
        pod = self.pods.get(name, ns)
        if pod is None or not self._wanted(pod):
            return True
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
        refs = pod["metadata"].get("ownerReferences") or []
        if annotations_of(pod).get(POD_GROUP_ANNOTATION) and not refs:
            return True  # a user-managed PodGroup
        chain = self._chain(pod)
        return chain if isinstance(chain, bool) else self._group(chain)

    def _chain(self, pod: dict[str, Any]) -> Chain | bool:
        """The pod's owner chain, or the worker's answer when there is none to group by."""
        md = pod["metadata"]
        refs = md.get("ownerReferences") or []
        try:
            owners = self.owners.chain(pod)
        except OwnerMissing as exc:
            self._wait_for_job(pod, refs)
            log.info("podgrouper %s/%s: %s", md["namespace"], md["name"], exc)
            return False  # retried with back-off
        except GroupingError as exc:
            self._warn(pod, f"no PodGroup created: {exc}")
            return True
        except KubeError as exc:
            log.info("podgrouper %s/%s: reading owners: %s", md["namespace"], md["name"], exc)
            return False
        if any(annotations_of(o).get(SKIP_ANNOTATION) == "true" for o in owners):
            return True  # an external PodGroup (KAI's skip annotation on an owner)
        return Chain(pod, owners, self.owners.read, self._pods_matching)

    def _group(self, chain: Chain) -> bool:
        pod = chain.pod
        try:
            plan = plan_for(chain)
            settings = Settings(
                self.queue_label,
                self._namespace_queues(),
                self._defaults(),
                node_pool_label=self.node_pool_label,
            )
            desired = manifest(chain, plan, settings)
            if grouped_by_owner(chain, plan, desired, self.node_pool_label):
                desired["metadata"]["annotations"][BY_OWNER_ANNOTATION] = "true"
        except GroupingError as exc:
            self._warn(pod, f"no PodGroup created: {exc}")
            return True
        existing = annotations_of(pod).get(POD_GROUP_ANNOTATION)
        if existing and existing != desired["metadata"]["name"]:
            return True  # the pod names a PodGroup of its own: never overwritten
        if plan.unknown_kind:
            self._warn(
                chain.top,
                f"the pod-grouper does not know the kind {plan.unknown_kind}: one PodGroup "
                f"{desired['metadata']['name']} with minMember 1 for all its pods (no gang); "
                f"set {BATCH_MIN_MEMBER} or create a PodGroup yourself",
                "PodGrouperUnknownKind",
            )
        return self._write_podgroup(pod, desired, plan.subgroup)

    def _wait_for_job(self, pod: dict[str, Any], refs: list[dict[str, Any]]) -> None:
        ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if ref is not None and ref.get("kind") == "Job":
            md = pod["metadata"]
            with self._waiting_lock:  # _on_job re-queues it; back-off retries too
                self._waiting_for_owner.setdefault(str(ref.get("uid")), set()).add(
                    (md["namespace"], md["name"])
                )

    def _pods_matching(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.items()
            if p["metadata"].get("namespace") == namespace
            and all(labels_of(p).get(k) == v for k, v in selector.items())
        ]

    def _podgroup(self, desired: dict[str, Any]) -> dict[str, Any]:
        """The stored PodGroup ``desired`` names: from the informer, else the one this process
        created moments ago, else created now (or read, when another writer made it). Writers
        of one PodGroup take turns, so the pods of a Job cost one create between them."""
        md = desired["metadata"]
        key = (md["namespace"], md["name"])
        with self._recent_lock:
            lock, users = self._pg_locks.get(key) or (threading.Lock(), 0)
            self._pg_locks[key] = (lock, users + 1)
        try:
            with lock:
                current = self.podgroups.get(key[1], key[0])
                now = time.monotonic()
                with self._recent_lock:
                    recent = self._recent.get(key)
                    if current is not None or (recent and now - recent[0] > RECENT_TTL):
                        self._recent.pop(key, None)
                        recent = None
                if current is not None:
                    return current
                if recent is not None:
                    return recent[1]
                current, created = create_or_get(self.kube, PODGROUPS, desired)
                if created:
                    self._count_created()
                with self._recent_lock:
                    self._recent[key] = (time.monotonic(), current)
                    if len(self._recent) > RECENT_MAX:  # informer stalled: keep the newest
                        oldest = sorted(self._recent.items(), key=lambda kv: kv[1][0])
                        for stale, _ in oldest[: len(self._recent) - RECENT_MAX // 2]:
                            del self._recent[stale]
                return current
        finally:
            with self._recent_lock:
                lock, users = self._pg_locks[key]
                if users <= 1:
                    del self._pg_locks[key]
                else:
                    self._pg_locks[key] = (lock, users - 1)

    def _count_created(self) -> None:
        now = time.monotonic()
        with self._recent_lock:
            self.created += 1
            at, count = self._progress
            if self.created > 1 and now - at < PROGRESS_EVERY:
                return
            self._progress = (now, self.created)
            created = self.created
        if created == 1:
            log.info("podgrouper: first PodGroup created")
        else:
            log.info(
                "podgrouper: %d PodGroups created (%.0f/s over the last %.1fs)",
                created,
                (created - count) / max(now - at, 1e-9),
                now - at,
            )

    def _write_podgroup(
        self, pod: dict[str, Any], desired: dict[str, Any], subgroup: str | None
    ) -> bool:
        """Create (or bring up to date) the pod's PodGroup and annotate the pod with it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        pg_name = desired["metadata"]["name"]
        try:
            current = self._podgroup(desired)
            if current is not None:
                spec = current.get("spec") or {}
                want = desired["spec"]
                update: dict[str, Any] = {
                    k: want.get(k) for k in _FOLLOW if spec.get(k) != want.get(k)
                }
                if "topologyConstraint" in want and spec.get("topologyConstraint") != want.get(
                    "topologyConstraint"
                ):
                    update["topologyConstraint"] = want["topologyConstraint"]
                if update:
                    patch_if_changed(self.kube, PODGROUPS, current, {"spec": update})
            patch: dict[str, Any] = {}
            if subgroup and labels_of(pod).get(SUBGROUP_LABEL) != subgroup:
                patch["labels"] = {SUBGROUP_LABEL: subgroup}
            # a PodGroup marked pods-by-owner is found from the pod by the scheduler (which
            # writes the annotation in the Binding): no PATCH, unless the pod is patched anyway
            if annotations_of(pod).get(POD_GROUP_ANNOTATION) != pg_name and (
                patch or derived_group(pod, lambda n: current if n == pg_name else None) is None
            ):
                patch["annotations"] = {POD_GROUP_ANNOTATION: pg_name}
            if patch:
                patch_if_changed(self.kube, PODS, pod, {"metadata": patch})
        except ApiError as exc:
            if exc.status == 422:
                self._warn(pod, f"PodGroup {pg_name} refused by the API server: {exc.message}")
                return True
            log.info("podgrouper %s/%s: %s", ns, name, exc)
            return False
        except KubeError as exc:
            log.info("podgrouper %s/%s: %s", ns, name, exc)
            return False
        return True


def grouped_by_owner(
    chain: Chain, plan: Any, desired: Mapping[str, Any], node_pool_label: str
) -> bool:
    """Whether the pods of ``desired`` can be found from their owner (see
    :mod:`kai.reconcilers.group_by_owner`): the PodGroup has the default name of its owner, and
    that owner is the pod itself, or the pod's controller, top owner of a kind that makes one
    PodGroup for all its pods. Sharded workloads (a node-pool label) keep the annotation: the
    scheduler of each shard tells its pods by it."""
    if node_pool_label in (desired["metadata"].get("labels") or {}):
        return False
    owner = plan.owner
    om = metadata_of(owner)
    if not om.get("uid") or plan.podgroup_name != owner_podgroup_name(
        str(om.get("name")), str(om["uid"])
    ):
        return False
    if owner is chain.pod:
        return True
    ref = controller_of(chain.pod)
    return (
        len(chain.owners) == 1
        and owner is chain.top
        and (api_group_of(owner), str(owner.get("kind"))) in ONE_GROUP_KINDS
        and ref is not None
        and str(ref.get("uid")) == str(om["uid"])
    )
