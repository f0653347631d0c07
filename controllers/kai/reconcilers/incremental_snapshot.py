"""The scheduler's snapshot kept up to date from informer deltas, not rebuilt every cycle.

:class:`IncrementalSnapshot` is the one owner of the derived state between cycles. Its input is
a *source* per kind (the informer caches: ``get(key)`` and ``keys()``) and the keys that changed
(:meth:`IncrementalSnapshot.changed`, called from the informers' handlers). The objects
themselves are always read from the source when a cycle builds, so a delta is only "look at this
key again": late, repeated or reordered notifications cannot leave a stale object behind.

One invalidation rule: **a changed key re-derives its object, and marks dirty the units that
the object fed before and after the change.** The units are

- a pod: its role (a task of its PodGroup, a Succeeded task, waiting for the pod-grouper,
  placed without a PodGroup, another scheduler's, a reservation, another shard's, not
  understood), its TaskSpec and the node whose capacity it touches. It depends on the pod, its
  BindRequest and the state of the PodGroup its annotation names;
- a PodGroup ("job unit"): its JobSpec with the tasks of its pods, dropped without a task.
  It depends on the PodGroup, the PriorityClasses, its pods and whether their nodes exist;
- a node: its NodeSpec, net of what other schedulers' pods, pods without a PodGroup and
  reservation pods hold on it. It depends on the node and the pods on it;
- Queues and Topologies: few, re-parsed all together when any of them changes.

Each unit is computed by the same functions as :meth:`SnapshotBuilder.build` (the parse caches
of the :class:`SnapshotBuilder` given are shared), in the same order, so the result equals a
from-scratch build of the source's contents (``tests/unit/test_incremental_snapshot.py`` checks
that after every step of random add/update/delete sequences). See docs/design/scheduler-cycle.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kai.api.gpu_request import GPU_RESOURCE
from kai.reconcilers import group_by_owner
from kai.reconcilers.snapshot_builder import (
    GPU_GROUP_LABEL,
    POD_GROUP_ANNOTATION,
    RESERVATION_NAMESPACE,
    BuiltSnapshot,
    ObjectError,
    PodInfo,
    SkippedObject,
    SnapshotBuilder,
    _attach_volumes,
    _mapping,
    _parse_queues,
    _parse_topologies,
    _pod_key,
    _pod_requests,
    _priority_classes,
    _shallow_copy,
    _task,
    parse_pod,
    pod_status,
    started_from_pods,
)
from kai.scheduler.sharing_modes import node_sharing_modes
from kai.scheduler.snapshot import JobSpec, NodeSpec, Snapshot, TaskSpec, TaskStatus

if TYPE_CHECKING:
    from kai.reconcilers.volume_claims import VolumeIndex

Key = tuple[str, str]  # (namespace or "", name)
KINDS = ("pods", "nodes", "podgroups", "queues", "bindrequests", "topologies", "priorityclasses")


class Source(Protocol):
    """What the snapshot reads: an informer (``Informer.get`` / the cache's keys) or a dict."""

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None: ...

    def keys(self) -> Iterable[Key]: ...


# the roles of a pod (see the module docstring)
TASK = "task"  # a task of its (valid) PodGroup
SUCCEEDED = "succeeded"  # a Succeeded task of its PodGroup: holds nothing
WAITING = "waiting"  # ours, no node, no valid PodGroup: waits for the pod-grouper
PLACED_UNGROUPED = "placed-ungrouped"  # ours on a node without a valid PodGroup
FOREIGN = "foreign"  # another scheduler's (or another shard's) pod on a node
RESERVATION = "reservation"  # our reservation pod on a node
PROBLEM = "problem"  # ours, not understood
IGNORED = "ignored"  # holds nothing: terminal, unbound foreign, unbound reservation

# the state of a PodGroup key for its pods
MISSING, INVALID, VALID, OTHER_POOL = "missing", "invalid", "valid", "other-pool"


@dataclass(eq=False)
class _PodEntry:
    seq: int
    obj: dict[str, Any]
    group: Key | None  # the PodGroup its annotation names (ours only)
    role: str
    node: str | None = None  # the node whose capacity it touches
    info: PodInfo | ObjectError | None = None
    info_key: Any = None
    task: TaskSpec | None = None
    requests: dict[str, float] | None = None  # FOREIGN and RESERVATION
    br: Key | None = None  # the BindRequest it took (not stale)
    problem: SkippedObject | None = None
    # an unannotated pod of ours: the PodGroups it may belong to by its owner
    # (kai.reconcilers.group_by_owner), derived again when one of them changes
    candidates: tuple[Key, ...] = ()


@dataclass
class _Work:
    """What one build derives again."""

    pods: set[Key]
    nodes: set[str]
    jobs: set[Key]


@dataclass(eq=False)
class _JobUnit:
    state: str
    template: JobSpec | None = None
    pg: dict[str, Any] | None = None
    problem: SkippedObject | None = None
    job: JobSpec | None = None  # with its tasks; None: no task (left out)
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (node, GPU groups) of its tasks


class _Dicts:
    """A plain dict per kind as a :class:`Source` (tests, snapshot files)."""

    def __init__(self, objects: dict[Key, dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def keys(self) -> Iterable[Key]:
        return list(self.objects)


def dict_source(objects: dict[Key, dict[str, Any]]) -> Source:
    return _Dicts(objects)


class IncrementalSnapshot:
    """The snapshot the scheduler's cycles read; see the module docstring."""

    def __init__(
        self,
        builder: SnapshotBuilder,
        sources: Mapping[str, Source],
        extra_bind_requests: Callable[[], Mapping[Key, dict[str, Any]]] | None = None,
        volumes: Callable[[], VolumeIndex] | None = None,
    ) -> None:
        self.builder = builder
        self.sources = sources
        # the claims, volumes and classes of the moment (read whole each cycle: few objects)
        self.volumes = volumes
        # BindRequests created by the scheduler that the informer does not show yet
        self.extra_bind_requests = extra_bind_requests or dict
        self._lock = threading.Lock()
        self._dirty: dict[str, set[Key]] = {k: set() for k in KINDS}
        self._seq = 0
        self._pods: dict[Key, _PodEntry] = {}
        self._brs: dict[Key, tuple[int, dict[str, Any]]] = {}  # effective BindRequests
        self._overlay: dict[Key, dict[str, Any]] = {}
        self._brs_of_pod: dict[Key, set[Key]] = {}
        self._group_pods: dict[Key, set[Key]] = {}
        self._candidate_pods: dict[Key, set[Key]] = {}  # PodGroup key -> unannotated pods
        self._node_pods: dict[str, set[Key]] = {}
        self._jobs: dict[Key, _JobUnit] = {}
        self._node_objs: dict[str, dict[str, Any]] = {}
        self._node_specs: dict[str, NodeSpec] = {}  # nodes in the snapshot
        self._classes: tuple[dict[str, int], int] | None = None
        self._queues: tuple[list[Any], list[SkippedObject]] = ([], [])
        self._topologies: tuple[list[Any], list[SkippedObject]] = ([], [])
        self._config_seen: tuple[Any, Any] | None = None
        # the result's parts, kept up to date with the units: a cycle copies them
        self._out_pods: dict[str, dict[str, Any]] = {}  # task uid -> pod
        self._out_brs: dict[str, dict[str, Any]] = {}  # task uid -> its BindRequest
        self._out_waiting: dict[Key, _PodEntry] = {}  # pods waiting for the pod-grouper
        self._out_stale: dict[Key, dict[str, Any]] = {}  # pod key -> its stale BindRequest
        self._out_problems: dict[tuple[str, Key], SkippedObject] = {}
        self._out_jobs: dict[Key, JobSpec] = {}
        self._out_podgroups: dict[str, dict[str, Any]] = {}  # job uid -> PodGroup
        self._out_groups: dict[Key, tuple[tuple[str, tuple[str, ...]], ...]] = {}
        # jobs with a task whose pod uses PersistentVolumeClaims: their volume constraints are
        # derived again every cycle (a claim or volume changes without any pod changing)
        self._claim_jobs: dict[Key, dict[str, PodInfo]] = {}  # job key -> its pods with claims
        # the snapshot's sorted lists, and where each job / node is in them (None: to sort)
        self._job_list: list[JobSpec] | None = None
        self._job_at: dict[Key, int] = {}
        self._node_list: list[NodeSpec] | None = None
        self._node_at: dict[str, int] = {}
        self.builds = 0
        self.resync()

    def resync(self) -> None:
        """Look at every object of the sources again (at the start: everything is new)."""
        for kind in KINDS:
            keys = set(self._keys(kind))
            with self._lock:
                self._dirty[kind] |= keys

    # -- deltas ----------------------------------------------------------------------------
    def changed(self, kind: str, obj: Mapping[str, Any]) -> None:
        """``obj`` of ``kind`` was added, changed or deleted (any thread)."""
        md = _mapping(obj.get("metadata"))
        key = (str(md.get("namespace") or ""), str(md.get("name") or ""))
        with self._lock:
            self._dirty[kind].add(key)

    def _take_dirty(self) -> dict[str, set[Key]]:
        with self._lock:
            dirty = self._dirty
            self._dirty = {k: set() for k in KINDS}
        return dirty

    def _get(self, kind: str, key: Key) -> dict[str, Any] | None:
        source = self.sources.get(kind)
        return None if source is None else source.get(key[1], key[0])

    # -- one cycle -------------------------------------------------------------------------
    def build(self, now: float | None = None) -> BuiltSnapshot:
        """The snapshot of the sources' current contents, deriving again only what changed."""
        dirty = self._take_dirty()
        work = _Work(
            pods=set(dirty["pods"]), nodes={name for _, name in dirty["nodes"]}, jobs=set()
        )
        self._refresh_small_kinds(dirty, work)
        self._apply_podgroups(dirty["podgroups"], work)
        self._apply_bind_requests(dirty["bindrequests"], work)
        self._apply_pods(work)
        node_names = self._apply_nodes(work)
        for key in work.jobs:  # last: a task on a node that is gone holds nothing
            unit = self._jobs.get(key)
            if unit is not None:
                self._assemble(key, unit, node_names)
            self._publish_job(key, unit)
        for pod_key in work.pods:  # a pod's BindRequest that no live pod of ours took
            self._out_stale.pop(pod_key, None)
            winner = self._winner(pod_key)
            entry = self._pods.get(pod_key)
            if winner is not None and (entry is None or entry.br != winner):
                self._out_stale[pod_key] = self._brs[winner][1]
        self.builds += 1
        return self._result(now)

    def _refresh_small_kinds(self, dirty: dict[str, set[Key]], work: _Work) -> None:
        """PriorityClasses (all PodGroups again when they change), Queues, Topologies, and the
        builder's settings (sharing modes: every node again)."""
        b = self.builder
        if dirty["priorityclasses"] or self._classes is None:
            classes = _priority_classes(self._all("priorityclasses"))
            if classes != self._classes:
                self._classes = classes
                dirty["podgroups"] |= set(self._jobs) | set(self._keys("podgroups"))
        if dirty["queues"]:
            queues = self._all("queues")
            queues = [q for q in queues if b.pool.holds(_labels(q))]
            problems: list[SkippedObject] = []
            self._queues = (_parse_queues(queues, problems), problems)
        if dirty["topologies"]:
            problems = []
            self._topologies = (_parse_topologies(self._all("topologies"), problems), problems)
        config_seen = (b.config, b.sharing_modes)
        if self._config_seen is None or config_seen != self._config_seen:
            self._config_seen = config_seen
            work.nodes |= set(self._node_objs)

    def _apply_podgroups(self, keys: Iterable[Key], work: _Work) -> None:
        """A PodGroup's state decides what its pods are: a change of state re-derives them."""
        assert self._classes is not None
        classes, default_priority = self._classes
        classes_key = (tuple(sorted(classes.items())), default_priority)
        for key in keys:
            old = self._jobs.get(key)
            unit = self._job_unit(key, classes, default_priority, classes_key)
            if unit is None:
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = unit
            work.jobs.add(key)
            problem = unit.problem if unit is not None else None
            if problem is None:
                self._out_problems.pop(("podgroups", key), None)
            else:
                self._out_problems[("podgroups", key)] = problem
            if (old.state if old else MISSING) != (unit.state if unit else MISSING):
                work.pods |= self._group_pods.get(key, set())
            # its mark or owner may have changed: the pods that may belong to it by owner
            work.pods |= self._candidate_pods.get(key, set())

    def _apply_bind_requests(self, keys: set[Key], work: _Work) -> None:
        """Each BindRequest belongs to the pod it names: that pod is derived again."""
        overlay = dict(self.extra_bind_requests())
        old_overlay = self._overlay
        keys = keys | (set(old_overlay) ^ set(overlay))
        keys |= {k for k in overlay.keys() & old_overlay.keys() if overlay[k] is not old_overlay[k]}
        self._overlay = overlay
        for key in keys:
            old = self._brs.get(key)
            br = self._get("bindrequests", key) or overlay.get(key)
            if old is not None:
                old_pod = _br_pod(old[1])
                self._brs_of_pod.get(old_pod, set()).discard(key)
                if not self._brs_of_pod.get(old_pod, True):
                    del self._brs_of_pod[old_pod]
                work.pods.add(old_pod)
            if br is None:
                self._brs.pop(key, None)
                continue
            if old is None or old[1] is not br:
                self._brs[key] = (old[0] if old is not None else self._next_seq(), br)
            pod_key = _br_pod(br)
            self._brs_of_pod.setdefault(pod_key, set()).add(key)
            work.pods.add(pod_key)

    def _apply_pods(self, work: _Work) -> None:
        for key in work.pods:
            old = self._pods.get(key)
            if old is not None:
                self._unindex(key, old, work)
            pod = self._get("pods", key)
            if pod is None:
                self._pods.pop(key, None)
                continue
            entry = self._pod_entry(key, pod, old)
            self._pods[key] = entry
            self._index(key, entry, work)

    def _apply_nodes(self, work: _Work) -> set[str]:
        """Node specs net of the pods on them; the names of the nodes in the snapshot."""
        for name in work.nodes:
            was = name in self._node_specs
            self._node_unit(name)
            if was != (name in self._node_specs):
                # tasks on a node that came or went: their jobs change
                for pod_key in self._node_pods.get(name, ()):
                    entry = self._pods[pod_key]
                    if entry.role == TASK and entry.group is not None:
                        work.jobs.add(entry.group)
        return set(self._node_specs)

    def _all(self, kind: str) -> list[dict[str, Any]]:
        return [o for k in self._keys(kind) if (o := self._get(kind, k)) is not None]

    def _keys(self, kind: str) -> Iterable[Key]:
        source = self.sources.get(kind)
        return () if source is None else source.keys()

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- PodGroups -------------------------------------------------------------------------
    def _job_unit(
        self,
        key: Key,
        classes: Mapping[str, int],
        default_priority: int,
        classes_key: tuple[Any, ...],
    ) -> _JobUnit | None:
        pg = self._get("podgroups", key)
        if pg is None:
            return None
        pool = self.builder.pool
        if not pool.holds(_mapping(pg.get("metadata")).get("labels")):
            return _JobUnit(OTHER_POOL, pg=pg)
        try:
            job = self.builder._job_spec(pg, classes, default_priority, classes_key)
        except ObjectError as exc:
            return _JobUnit(INVALID, pg=pg, problem=SkippedObject(pg, exc.field, exc.message))
        return _JobUnit(VALID, template=job, pg=pg)

    def _assemble(self, key: Key, unit: _JobUnit, node_names: set[str]) -> None:
        """As ``_assemble_jobs``: the tasks of the job's pods, in the pods' order."""
        unit.job, unit.groups = None, ()
        if unit.state != VALID or unit.template is None:
            return
        entries = [
            self._pods[k]
            for k in self._group_pods.get(key, ())
            if self._pods[k].role in (TASK, SUCCEEDED)
        ]
        entries.sort(key=lambda e: e.seq)
        valid: list[TaskSpec] = []
        for entry in entries:
            task = entry.task
            assert task is not None
            if task.node is not None and task.node not in node_names:
                if task.status is not TaskStatus.BINDING:
                    continue  # on an unknown node: holds nothing we schedule
                # its BindRequest names a node that is gone: pending again
                task = _shallow_copy(task)
                task.status, task.node, task.gpu_groups = TaskStatus.PENDING, None, ()
            valid.append(task)
        if not valid:
            return
        job = _shallow_copy(unit.template)
        job.tasks = valid
        if job.last_start_time is None:  # as _assemble_jobs: from the pods' start
            objs = {e.task.uid: e.obj for e in entries if e.task is not None}
            job.last_start_time = started_from_pods(valid, lambda t: objs.get(t.uid))
        unit.job = job
        unit.groups = tuple((t.node, t.gpu_groups) for t in valid if t.node and t.gpu_groups)

    # -- pods ------------------------------------------------------------------------------
    def _pod_entry(self, key: Key, pod: dict[str, Any], old: _PodEntry | None) -> _PodEntry:
        """The role of a pod, as the pod pass of ``SnapshotBuilder.build`` decides it."""
        b = self.builder
        md = _mapping(pod.get("metadata"))
        spec = _mapping(pod.get("spec"))
        ns = str(md.get("namespace") or "")
        ours = spec.get("schedulerName") == b.scheduler_name
        annotation = _mapping(md.get("annotations")).get(POD_GROUP_ANNOTATION)
        group = (
            (ns, str(annotation)) if ours and ns != RESERVATION_NAMESPACE and annotation else None
        )
        entry = _PodEntry(old.seq if old is not None else self._next_seq(), pod, group, IGNORED)
        phase = _mapping(pod.get("status")).get("phase")
        if phase in ("Succeeded", "Failed"):
            if phase == "Succeeded" and ours:
                self._finished(entry, ns, old)
            return entry
        node = spec.get("nodeName") or None
        if ns == RESERVATION_NAMESPACE and ours:
            if node:
                entry.role, entry.node = RESERVATION, str(node)
                try:
                    entry.requests = _pod_requests(spec, str(md.get("name") or ""))
                except ObjectError:
                    entry.requests = {GPU_RESOURCE: 1.0}  # a reservation is one device
            return entry
        pool = b.pool
        other_pool = ours and (
            (group is not None and self._state(group) == OTHER_POOL)
            or (annotation is None and not pool.holds(md.get("labels")))
        )
        if not ours or other_pool:
            if other_pool:
                entry.br = self._winner(key)  # another shard's pod: its BindRequest is not stale
            if node:
                entry.role, entry.node = FOREIGN, str(node)
                entry.requests = _requests_or_none(spec, md)
            return entry
        self._ours(entry, key, ns, old)
        return entry

    def _finished(self, entry: _PodEntry, ns: str, old: _PodEntry | None) -> None:
        """A Succeeded pod of ours: a Succeeded task of its PodGroup, holding nothing."""
        info = self._info(entry, entry.obj, old)
        if not isinstance(info, ObjectError):
            info = self._with_derived_group(entry, info, ns)
        if not isinstance(info, ObjectError) and info.pod_group is not None:
            entry.group = (ns, info.pod_group)
            if self._state(entry.group) == VALID:
                entry.role = SUCCEEDED
                entry.task = _task(info, ns, TaskStatus.SUCCEEDED, None, ())

    def _ours(self, entry: _PodEntry, key: Key, ns: str, old: _PodEntry | None) -> None:
        """A live pod of ours: a task, waiting for its PodGroup, or placed without one."""
        pod = entry.obj
        info = self._info(entry, pod, old)
        if isinstance(info, ObjectError):
            entry.role = PROBLEM
            entry.problem = SkippedObject(pod, info.field, info.message)
            return
        info = self._with_derived_group(entry, info, ns)
        entry.br = self._winner(key)
        br = self._brs[entry.br][1] if entry.br is not None else None
        status, node, br_groups = pod_status(pod, br)
        grouped = info.pod_group is not None and self._state((ns, info.pod_group)) == VALID
        if not grouped:
            if node is None:
                entry.role = WAITING
            else:
                entry.role, entry.node = PLACED_UNGROUPED, node
            return
        groups = br_groups if br_groups is not None else info.gpu_groups
        entry.role, entry.node = TASK, node
        entry.group = (ns, str(info.pod_group))
        task = old.task if old is not None and old.role == TASK else None
        if (
            task is None
            or old is None
            or old.info is not info
            or task.status is not status
            or task.node != node
            or task.gpu_groups != (groups if status is not TaskStatus.PENDING else ())
        ):
            task = _task(info, ns, status, node, groups)  # else: the same task as before
        entry.task = task

    def _with_derived_group(self, entry: _PodEntry, info: PodInfo, ns: str) -> PodInfo:
        """``info`` of an unannotated pod with the PodGroup found from its owner, as
        ``snapshot_builder._with_derived_group`` finds it among the valid PodGroups; the
        candidates are remembered so that a change of one of them derives the pod again."""
        if info.pod_group is not None:
            return info
        entry.candidates = tuple((ns, name) for name, _ in group_by_owner.candidates(entry.obj))

        def podgroup(name: str) -> Mapping[str, Any] | None:
            unit = self._jobs.get((ns, name))
            return unit.pg if unit is not None and unit.state == VALID else None

        name = group_by_owner.derived_group(entry.obj, podgroup)
        return info if name is None else dataclasses.replace(info, pod_group=name)

    def _info(
        self, entry: _PodEntry, pod: dict[str, Any], old: _PodEntry | None
    ) -> PodInfo | ObjectError:
        info_key = _pod_key(_mapping(pod.get("metadata")))
        if old is not None and old.info is not None and old.info_key == info_key:
            info = old.info
        else:
            try:
                info = parse_pod(pod)
            except ObjectError as exc:
                info = exc
        entry.info, entry.info_key = info, info_key
        return info

    def _state(self, group: Key) -> str:
        unit = self._jobs.get(group)
        return MISSING if unit is None else unit.state

    def _winner(self, pod_key: Key) -> Key | None:
        """The BindRequest of a pod: of several naming it, the last one seen."""
        candidates = self._brs_of_pod.get(pod_key)
        if not candidates:
            return None
        return max(candidates, key=lambda k: self._brs[k][0])

    def _index(self, key: Key, e: _PodEntry, work: _Work) -> None:
        if e.role in (TASK, PLACED_UNGROUPED):
            assert isinstance(e.info, PodInfo)
            self._out_pods[e.info.uid] = e.obj
            if e.br is not None:
                self._out_brs[e.info.uid] = self._brs[e.br][1]
        elif e.role == WAITING:
            self._out_waiting[key] = e
        elif e.role == PROBLEM:
            assert e.problem is not None
            self._out_problems[("pods", key)] = e.problem
        if e.group is not None:
            self._group_pods.setdefault(e.group, set()).add(key)
            work.jobs.add(e.group)
        for candidate in e.candidates:
            self._candidate_pods.setdefault(candidate, set()).add(key)
        if e.node is not None:
            self._node_pods.setdefault(e.node, set()).add(key)
            work.nodes.add(e.node)

    def _unindex(self, key: Key, e: _PodEntry, work: _Work) -> None:
        if e.role in (TASK, PLACED_UNGROUPED):
            assert isinstance(e.info, PodInfo)
            self._out_pods.pop(e.info.uid, None)
            self._out_brs.pop(e.info.uid, None)
        self._out_waiting.pop(key, None)
        self._out_problems.pop(("pods", key), None)
        if e.group is not None:
            _unindex(self._group_pods, e.group, key)
            work.jobs.add(e.group)
        for candidate in e.candidates:
            _unindex(self._candidate_pods, candidate, key)
        if e.node is not None:
            _unindex(self._node_pods, e.node, key)
            work.nodes.add(e.node)

    # -- nodes -----------------------------------------------------------------------------
    def _live_groups(self, name: str) -> set[str]:
        """The GPU groups of the placed tasks on node ``name``: a reservation pod's GPU there
        counts only while no task of ours holds its group."""
        live: set[str] = set()
        for key in self._node_pods.get(name, ()):
            entry = self._pods[key]
            task = entry.task
            if entry.role == TASK and task is not None and task.node == name and task.gpu_groups:
                live.update(task.gpu_groups)
        return live

    def _node_unit(self, name: str) -> None:
        b = self.builder
        node = self._get("nodes", ("", name))
        self._out_problems.pop(("nodes", ("", name)), None)
        was = name in self._node_specs
        if node is None or not b.pool.holds(_labels(node)):
            self._node_specs.pop(name, None)
            self._node_objs.pop(name, None)
            if was:
                self._node_list = None
            return
        self._node_objs[name] = node
        entries = sorted((self._pods[k] for k in self._node_pods.get(name, ())), key=_seq)
        # what the pods on it hold, summed in the pods' order with the reservations last, as
        # the full build sums (the same float additions in the same order: equal results)
        acc: dict[str, float] = {}
        for entry in entries:
            if entry.role == FOREIGN and entry.requests is not None:
                _add(acc, entry.requests)
            elif entry.role == PLACED_UNGROUPED:
                info = entry.info
                assert isinstance(info, PodInfo)
                acc["cpu"] = acc.get("cpu", 0.0) + info.cpu_millis / 1000.0
                acc["memory"] = acc.get("memory", 0.0) + info.memory_bytes
                acc[GPU_RESOURCE] = acc.get(GPU_RESOURCE, 0.0) + info.gpu.whole
                acc["pods"] = acc.get("pods", 0.0) + 1
        live: set[str] | None = None  # only a node with a reservation pod needs them
        for entry in entries:
            if entry.role == RESERVATION and entry.requests is not None:
                requests = dict(entry.requests)
                group = str(_labels(entry.obj).get(GPU_GROUP_LABEL) or "")
                if live is None:
                    live = self._live_groups(name)
                if group and group in live:
                    requests.pop(GPU_RESOURCE, None)
                _add(acc, requests)
        try:
            spec = b._node_spec(node, acc or None)  # its own copy: set its modes below
        except ObjectError as exc:
            problem = SkippedObject(node, exc.field, exc.message)
            self._node_specs.pop(name, None)
            self._out_problems[("nodes", ("", name))] = problem
            if was:
                self._node_list = None
            return
        if b.sharing_modes:
            spec.sharing_modes = node_sharing_modes(b.sharing_modes, [spec], b.pool.label_key)[0]
        self._node_specs[name] = spec
        if not was:
            self._node_list = None
        elif self._node_list is not None:
            self._node_list[self._node_at[name]] = spec

    # -- the result ------------------------------------------------------------------------
    def _publish_job(self, key: Key, unit: _JobUnit | None) -> None:
        old = self._out_jobs.pop(key, None)
        if old is not None:
            self._out_podgroups.pop(old.uid, None)
        self._out_groups.pop(key, None)
        self._claim_jobs.pop(key, None)
        job = unit.job if unit is not None else None
        if job is not None:
            assert unit is not None and unit.pg is not None
            self._out_jobs[key] = job
            claims = self._claims_of(job)
            if claims:
                self._claim_jobs[key] = claims
            if old is not None and self._job_list is not None:
                self._job_list[self._job_at[key]] = job
            self._out_podgroups[job.uid] = unit.pg
            if unit.groups:
                self._out_groups[key] = unit.groups
        if (old is None) != (job is None):
            self._job_list = None

    def _claims_of(self, job: JobSpec) -> dict[str, PodInfo]:
        """The parsed pods (by task uid) of ``job``'s tasks that use PersistentVolumeClaims."""
        found: dict[str, PodInfo] = {}
        for task in job.tasks:
            entry = self._pods.get((task.namespace, task.name))
            info = entry.info if entry is not None else None
            if isinstance(info, PodInfo) and info.claims:
                found[task.uid] = info
        return found

    def _with_volumes(self, built: BuiltSnapshot, problems: list[SkippedObject]) -> None:
        """The volume constraints of the jobs whose pods use claims, as ``SnapshotBuilder.build``
        attaches them, on copies (the kept JobSpecs are shared between cycles)."""
        if not self._claim_jobs or self.volumes is None:
            return
        index = self.volumes()
        jobs = built.snapshot.jobs  # in the order of self._job_at
        dropped: set[str] = set()
        for key, claims in self._claim_jobs.items():
            at = self._job_at[key]
            copy = _shallow_copy(jobs[at])
            copy.tasks = [_shallow_copy(t) for t in copy.tasks]
            parsed = {uid: (None, None, info) for uid, info in claims.items()}
            kept = _attach_volumes(parsed, [copy], built, index, problems)
            if kept:
                jobs[at] = kept[0]
            else:
                dropped.add(copy.uid)
        if dropped:
            built.snapshot.jobs = [j for j in jobs if j.uid not in dropped]

    def _result(self, now: float | None) -> BuiltSnapshot:
        """The parts kept up to date, copied: the core and the caller may keep them."""
        b = self.builder
        if self._job_list is None:
            order = sorted(self._out_jobs, key=lambda k: self._out_jobs[k].uid)
            self._job_at = {k: i for i, k in enumerate(order)}
            self._job_list = [self._out_jobs[k] for k in order]
        if self._node_list is None:
            names = sorted(self._node_specs)
            self._node_at = {n: i for i, n in enumerate(names)}
            self._node_list = [self._node_specs[n] for n in names]
        existing: dict[str, set[str]] = {}
        for groups in self._out_groups.values():
            for node, gpu_groups in groups:
                existing.setdefault(node, set()).update(gpu_groups)
        queues, queue_problems = self._queues
        topologies, topology_problems = self._topologies
        snapshot = Snapshot(
            now=time.time() if now is None else now,
            nodes=list(self._node_list),
            queues=[_fresh_queue(q) for q in queues],
            jobs=list(self._job_list),
            topologies=list(topologies),
            config=b.config,
        )
        built = BuiltSnapshot(
            snapshot=snapshot,
            problems=[*self._out_problems.values(), *queue_problems, *topology_problems],
            pods=dict(self._out_pods),
            podgroups=dict(self._out_podgroups),
            bind_requests=dict(self._out_brs),
            stale_bind_requests=list(self._out_stale.values()),
            ungrouped=[e.obj for e in sorted(self._out_waiting.values(), key=_seq)],
            existing_groups=existing,
        )
        self._with_volumes(built, built.problems)
        return built


def _unindex(index: dict[Any, set[Key]], at: Any, key: Key) -> None:
    """Takes ``key`` out of ``index[at]``, and the set out of ``index`` once it is empty."""
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]


def _seq(entry: _PodEntry) -> int:
    return entry.seq


def _uid(job: JobSpec) -> str:
    return job.uid


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(obj.get("metadata")).get("labels"))


def _br_pod(br: Mapping[str, Any]) -> Key:
    md = _mapping(br.get("metadata"))
    name = _mapping(br.get("spec")).get("podName") or md.get("name")
    return (str(md.get("namespace") or ""), str(name))


def _requests_or_none(spec: Mapping[str, Any], md: Mapping[str, Any]) -> dict[str, float] | None:
    """A foreign pod's requests; None when they cannot be read (it then holds nothing)."""
    try:
        return _pod_requests(spec, str(md.get("name") or ""))
    except ObjectError:
        return None


def _add(acc: dict[str, float], requests: Mapping[str, float]) -> None:
    """One pod's share of a node, as ``_PodTasks.add_foreign_pod`` counts it."""
    for k, v in requests.items():
        acc[k] = acc.get(k, 0.0) + v
    acc["pods"] = acc.get("pods", 0.0) + 1


def _fresh_queue(queue: Any) -> Any:
    """Each cycle's own QueueSpec: the scheduler fills ``usage`` per cycle."""
    copy = _shallow_copy(queue)
    copy.usage = dict(queue.usage)
    return copy
