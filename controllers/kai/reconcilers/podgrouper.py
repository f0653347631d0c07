"""A minimal pod-grouper: a PodGroup for every bare pod and every batch/v1 Job.

Rules:

- a bare pod: ``pg-<pod>-<podUID>``, minMember 1; a bare pod that already carries the
  ``pod-group-name`` annotation is user-managed and left alone;
- a batch/v1 Job: ONE PodGroup ``pg-<job>-<jobUID>`` for all its pods, minMember from the Job's
  annotation ``kai.scheduler/batch-min-member`` (a gang) else 1;
- any other owner: one PodGroup for the (first) owner, minMember 1 (full integrations are
  issue 7's business);
- queue: label ``kai.scheduler/queue`` of the top owner, else of the pod, else label
  ``project``, else the queue whose QueueTree lists the pod's namespace (the Queues'
  ``gitops.kai.scheduler/namespaces`` annotation, :mod:`kai.api.namespace_queues`), else
  ``default-queue``; once created, the PodGroup's queue is never changed;
- priorityClassName: top owner label ``priorityClassName``, pod label, ``spec.priorityClassName``,
  else ``train``; preemptibility: label ``kai.scheduler/preemptibility`` (owner, then pod);
- topology: top owner annotations ``kai.scheduler/topology[-required|-preferred-placement]``.

The pod then gets the ``pod-group-name`` annotation. A malformed workload (bad min-member,
bad preemptibility) gets a ``PodGrouperWarning`` Event and no PodGroup.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable
from typing import Any, cast

from kai.api.namespace_queues import NamespaceQueues, from_queues, resolve_queue
from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer
from kai.kube.resources import PODGROUPS, PODS
from kai.kube.workqueue import WorkQueue
from kai.kube.writes import create_or_get, patch_if_changed
from kai.reconcilers.snapshot_builder import POD_GROUP_ANNOTATION, RESERVATION_NAMESPACE

log = logging.getLogger("kai.podgrouper")

QUEUE_LABEL = "kai.scheduler/queue"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
TOP_OWNER_METADATA = "kai.scheduler/top-owner-metadata"
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
DEFAULT_QUEUE = "default-queue"
DEFAULT_PRIORITY_CLASS = "train"
RECENT_TTL = 30.0  # seconds a PodGroup created here is trusted before the informer has it
RECENT_MAX = 10_000


class GroupingError(ValueError):
    pass


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _batch_min_member(annotations: dict[str, str]) -> int:
    """A batch Job's gang size from its annotation (1 without it)."""
    if BATCH_MIN_MEMBER not in annotations:
        return 1
    raw = annotations[BATCH_MIN_MEMBER]
    try:
        min_member = int(raw)
    except ValueError as exc:
        raise GroupingError(
            f"annotation {BATCH_MIN_MEMBER}={raw!r}: must be a positive integer"
        ) from exc
    if min_member < 1:
        raise GroupingError(f"annotation {BATCH_MIN_MEMBER}={raw!r}: must be a positive integer")
    return min_member


def _topology_constraint(annotations: dict[str, str]) -> dict[str, str]:
    constraint = {"topology": annotations[TOPOLOGY]}
    if annotations.get(TOPOLOGY_REQUIRED):
        constraint["requiredTopologyLevel"] = annotations[TOPOLOGY_REQUIRED]
    if annotations.get(TOPOLOGY_PREFERRED):
        constraint["preferredTopologyLevel"] = annotations[TOPOLOGY_PREFERRED]
    return constraint


def podgroup_for(
    pod: dict[str, Any],
    owner: dict[str, Any] | None,
    queue_label: str = QUEUE_LABEL,
    namespaces: NamespaceQueues | None = None,
) -> dict[str, Any]:
    """The PodGroup a pod belongs to (``owner`` = its top owner object, None for a bare pod;
    ``queue_label`` = the label naming the queue, KAI's ``queueLabelKey``; ``namespaces``: the
    namespace -> queue bindings of the QueueTrees)."""
    pmd = pod["metadata"]
    top = owner if owner is not None else pod
    tmd = top["metadata"]
    top_labels, pod_labels = _labels(top), _labels(pod)
    name = f"pg-{tmd['name']}-{tmd['uid']}"
    queue = resolve_queue(
        pmd["namespace"],
        pod_labels,
        top_labels if owner is not None else None,
        namespaces,
        queue_label=queue_label,
        default_queue=DEFAULT_QUEUE,
    )
    priority_class = (
        top_labels.get("priorityClassName")
        or pod_labels.get("priorityClassName")
        or (pod.get("spec") or {}).get("priorityClassName")
        or DEFAULT_PRIORITY_CLASS
    )
    preemptibility = top_labels.get(PREEMPTIBILITY_LABEL) or pod_labels.get(PREEMPTIBILITY_LABEL)
    if preemptibility not in (None, "", "preemptible", "non-preemptible"):
        raise GroupingError(
            f"label {PREEMPTIBILITY_LABEL}={preemptibility!r}: "
            "must be preemptible or non-preemptible"
        )
    annotations = _annotations(top)
    min_member = (
        _batch_min_member(annotations) if owner is not None and top.get("kind") == "Job" else 1
    )
    spec: dict[str, Any] = {
        "minMember": min_member,
        "queue": queue,
        "priorityClassName": priority_class,
        "markUnschedulable": True,
        "schedulingBackoff": -1,
    }
    if preemptibility:
        spec["preemptibility"] = preemptibility
    if annotations.get(TOPOLOGY):
        spec["topologyConstraint"] = _topology_constraint(annotations)
    api_version = top.get("apiVersion") or "v1"
    group, _, version = api_version.rpartition("/")
    owner_md = (
        f"name: {tmd['name']}\nuid: {tmd['uid']}\ngroup: {group}\nversion: {version}\n"
        f"kind: {top.get('kind') or 'Pod'}\n"
    )
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": name[:253],
            "namespace": pmd["namespace"],
            "labels": {queue_label: queue},
            "annotations": {TOP_OWNER_METADATA: owner_md},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": top.get("kind") or "Pod",
                    "name": tmd["name"],
                    "uid": tmd["uid"],
                    "controller": False,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


class PodGrouper:
    def __init__(
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
    ) -> None:
        self.kube = kube
        self.queue_label = queue_label
        self.queues = queues  # Queues: their namespace bindings (gitops.kai.scheduler/namespaces)
        self._bindings: tuple[int, NamespaceQueues] = (-1, NamespaceQueues())
        self.pods = pods
        self.jobs = jobs
        self.podgroups = podgroups
        self.recorder = recorder
        self.scheduler_name = scheduler_name
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
        pods.add_handler(self._on_pod)
        jobs.add_handler(self._on_job)

    def start(self) -> PodGrouper:
        self.queue.start()
        for pod in self.pods.items():
            self._on_pod("ADDED", pod, None)
        return self

    def stop(self) -> None:
        self.queue.stop()

    def _wanted(self, pod: dict[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        md = pod.get("metadata") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return False
        if md.get("namespace") == RESERVATION_NAMESPACE or md.get("deletionTimestamp"):
            return False
        return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    def _on_pod(self, etype: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED" or not self._wanted(pod):
            return
        md = pod["metadata"]
        if (
            old is not None
            and _annotations(old).get(POD_GROUP_ANNOTATION)
            and _annotations(pod).get(POD_GROUP_ANNOTATION)
        ):
            return  # grouped already; later pod updates change nothing here
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
        """The bindings of the Queues in the cache, computed again only when they changed."""
        if self.queues is None:
            return None
        generation, bindings = self._bindings
        if generation != self.queues.generation:
            generation = self.queues.generation
            bindings = from_queues(self.queues.items())
            self._bindings = (generation, bindings)
        return bindings

    def _warn(self, pod: dict[str, Any], message: str) -> None:
        uid = pod["metadata"].get("uid", "")
        if self._warned.get(uid) == message:
            return
        self._warned[uid] = message
        log.warning("pod %s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], message)
        self.recorder.event(pod, "Warning", "PodGrouperWarning", message)

    def _process(self, key: Hashable) -> bool:
        ns, name = cast(tuple[str, str], key)
        if not self.is_leader():
            self.queue.add_after(key, 1.0)  # only the Lease holder writes
            return True
        pod = self.pods.get(name, ns)
        if pod is None or not self._wanted(pod):
            return True
        md = pod["metadata"]
        refs = md.get("ownerReferences") or []
        existing = _annotations(pod).get(POD_GROUP_ANNOTATION)
        if existing and not refs:
            return True  # a user-managed PodGroup
        known, owner = self._owner_of(ns, name, refs)
        if not known:
            return False
        try:
            desired = podgroup_for(pod, owner, self.queue_label, self._namespace_queues())
        except GroupingError as exc:
            self._warn(pod, f"no PodGroup created: {exc}")
            return True
        return self._write_podgroup(pod, desired)

    def _owner_of(
        self, ns: str, name: str, refs: list[dict[str, Any]]
    ) -> tuple[bool, dict[str, Any] | None]:
        """(False, None) while the pod's owning Job is not in the cache yet (its event
        re-queues the pod); else (True, the owner or None for a bare pod)."""
        if not refs:
            return True, None
        ref = next((r for r in refs if r.get("controller")), refs[0])
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            owner = self.jobs.get(ref.get("name", ""), ns)
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                with self._waiting_lock:  # _on_job re-queues it; back-off retries too
                    self._waiting_for_owner.setdefault(str(ref.get("uid")), set()).add((ns, name))
                return False, None
            return True, owner
        return True, {
            "apiVersion": ref.get("apiVersion"),
            "kind": ref.get("kind"),
            "metadata": {"name": ref.get("name"), "uid": ref.get("uid")},
        }

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
                current, _created = create_or_get(self.kube, PODGROUPS, desired)
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

    def _write_podgroup(self, pod: dict[str, Any], desired: dict[str, Any]) -> bool:
        """Create (or bring up to date) the pod's PodGroup and annotate the pod with it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        pg_name = desired["metadata"]["name"]
        try:
            current = self._podgroup(desired)
            if current is not None:
                # queue, markUnschedulable and schedulingBackoff stay as created
                spec = current.get("spec") or {}
                update = {
                    k: v
                    for k, v in desired["spec"].items()
                    if k in ("minMember", "priorityClassName", "preemptibility")
                    and spec.get(k) != v
                }
                if update:
                    patch_if_changed(self.kube, PODGROUPS, current, {"spec": update})
            if _annotations(pod).get(POD_GROUP_ANNOTATION) != pg_name:
                patch_if_changed(
                    self.kube,
                    PODS,
                    pod,
                    {"metadata": {"annotations": {POD_GROUP_ANNOTATION: pg_name}}},
                )
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
