"""The live scheduler: on new work (or time-based work), snapshot the caches, run a session, act.

When a cycle runs is :mod:`kai.reconcilers.cycle_trigger`'s business: after a relevant informer
change (coalesced), when something time-based is due, never when nothing changed.

One cycle, only while this process holds the leader Lease:

1. open: build a :class:`~kai.scheduler.snapshot.Snapshot` from the caches (pods of this
   scheduler, nodes, PodGroups, Queues, BindRequests, Topologies, PriorityClasses). Objects
   that cannot be understood get an Event and are left out; the cycle goes on.
2. delete BindRequests that failed or whose pod is gone (the pod is Pending again).
3. run the session's actions (those the core does not implement are dropped, logged once).
4. act: create a BindRequest per bind decision (name = pod name, so a repeat after a restart
   or a lost answer gets AlreadyExists and nothing else happens), delete the victims of
   evictions, and record Events (``Scheduled``, ``Evict``, ``Unschedulable``).
5. status: PodGroup ``schedulingConditions`` and the last-start/stale annotations now; Queue
   status and PodGroup ``resourcesStatus`` by :class:`kai.reconcilers.status.StatusWriter`.

A pod with a live BindRequest counts as Binding on that node, so a restarted scheduler (empty
memory, caches relisted) sees exactly the decisions it had made: nothing is lost or made twice.
BindRequests created by this process but not yet seen by the informer are overlaid on the cache
so that the next cycle does not place the same pod again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.events import EventRecorder
from kai.kube.informer import InformerSet
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
from kai.kube.writes import create_if_absent, delete_if_present, patch_if_changed
from kai.metrics import SchedulerMetrics
from kai.reconcilers import missing_podgroup
from kai.reconcilers.cluster_snapshot import ClusterSnapshot, from_caches
from kai.reconcilers.cycle_trigger import CycleTrigger, next_due, relevant
from kai.reconcilers.direct_bind import (
    BIND_DIRECT,
    RECEIVED_RESOURCE_TYPE,
    InFlightBinds,
    binder_work,
    is_in_flight_record,
    post_binding,
)
from kai.reconcilers.group_by_owner import group_of
from kai.reconcilers.incremental_snapshot import KINDS as SNAPSHOT_KINDS
from kai.reconcilers.incremental_snapshot import IncrementalSnapshot
from kai.reconcilers.shard import NodePool, set_shard_condition
from kai.reconcilers.snapshot_builder import (
    LAST_EVICTION,
    LAST_START,
    POD_GROUP_ANNOTATION,
    STALE_SINCE,
    BuiltSnapshot,
    SnapshotBuilder,
    bind_request_live,
    parse_time,
)
from kai.reconcilers.volume_claims import VolumeIndex
from kai.scheduler.errors import UnsupportedActionError
from kai.scheduler.jobs import DEFAULT_PODSET, build_subgroup_tree
from kai.scheduler.reasons import (
    Classified,
    CycleFacts,
    classify_job,
    condition_text,
    cycle_facts,
)
from kai.scheduler.result import BindDecision, SessionResult
from kai.scheduler.snapshot import (
    ACTIVE_ALLOCATED_STATUSES,
    JobSpec,
    SchedulerConfig,
    Snapshot,
    TaskStatus,
)

log = logging.getLogger("kai.scheduler.live")


def is_stale(job: JobSpec, statuses: Mapping[str, TaskStatus]) -> bool:
    """The core's staleness rule on a job's task statuses after a cycle: some task active,
    none Succeeded, and the gang (every subgroup's minimum, through the subgroup tree) not
    satisfied."""
    if any(s is TaskStatus.SUCCEEDED for s in statuses.values()):
        return False
    if not any(s in ACTIVE_ALLOCATED_STATUSES for s in statuses.values()):
        return False
    if not job.subgroups:  # one PodSet under the root: the tree's answer without the tree
        active = sum(
            1
            for task in job.tasks
            if (task.subgroup or DEFAULT_PODSET) == DEFAULT_PODSET
            and statuses[task.uid] in ACTIVE_ALLOCATED_STATUSES
        )
        minimum = 1 if job.min_available is None else job.min_available
        threshold = 1 if job.min_subgroup is None else job.min_subgroup
        return int(active >= minimum) < threshold
    root, podsets = build_subgroup_tree(job)
    for task in job.tasks:
        podset = podsets.get(task.subgroup or DEFAULT_PODSET)
        if podset is not None:
            podset.count(statuses[task.uid], 1)
    return not root.satisfied


def min_runtime_in_force(snapshot: Snapshot) -> bool:
    """Whether any min runtime (the scheduler's defaults, a queue's preempt/reclaim min
    runtime) can protect a job: the only reader of ``kai.scheduler/last-start-timestamp``. Without
    one the annotation is not written, saving a PodGroup patch per started job; a job started
    meanwhile is protected from its pods' start once a min runtime is switched on
    (``snapshot_builder.started_from_pods``)."""
    config = snapshot.config
    if config.default_preempt_min_runtime > 0 or config.default_reclaim_min_runtime > 0:
        return True
    return any(q.preempt_min_runtime or q.reclaim_min_runtime for q in snapshot.queues)


CONFIG_MAP = "kai-scheduler/kai-scheduler-config"
_OVERLAY_TTL = 30.0  # seconds an in-flight BindRequest counts without the informer showing it


def rfc3339(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def label_safe_group(node: str, group: str, salt: str) -> str:
    """A fresh GPU group id usable as a label value (the core's new ids contain '/')."""
    return hashlib.sha256(f"{node}/{group}/{salt}".encode()).hexdigest()[:16]


def portion_text(value: float) -> str:
    return f"{value:.2f}"


@dataclass
class SchedulerOptions:
    scheduler_name: str = "kai-scheduler"
    # at most one cycle per period while new work keeps coming; the pace of retries and of
    # time-based fair share
    period: float = 1.0
    config: SchedulerConfig | None = None  # fixed config; None = read the ConfigMap
    # concurrent API writes (binds first): the API server's latency, not our CPU, bounds them
    workers: int = 32
    config_map: str = CONFIG_MAP  # namespace/name of the rendered scheduler ConfigMap
    usage: Any = None  # kai.reconcilers.usage.UsageSource: time-based fairshare (None = off)
    pool: NodePool = field(default_factory=NodePool)  # the shard's node pool (default: all)
    coalesce: float = 0.1  # a cycle starts this long after the first relevant change
    resync: float = 60.0  # a cycle at least this often, whatever happens (a safety net)
    # direct: pods that need no binder work are bound by the scheduler (kai.reconcilers.
    # direct_bind); bindRequest: every pod through a BindRequest and the binder (KAI's way)
    bind_mode: str = BIND_DIRECT


def make_informers(kube: Kube, scheduler_name: str, config_map: str = CONFIG_MAP) -> InformerSet:
    informers = InformerSet(kube)
    namespace, _, name = config_map.partition("/")
    informers.add(
        "config",
        CONFIGMAPS,
        namespace=namespace,  # a Role in that namespace is enough to read it
        field_selector=f"metadata.name={name}",
    )
    informers.add("pods", PODS)
    informers.add("nodes", NODES)
    informers.add("podgroups", PODGROUPS)
    informers.add("queues", QUEUES)
    informers.add("bindrequests", BIND_REQUESTS)
    informers.add("topologies", TOPOLOGIES)
    informers.add("priorityclasses", PRIORITY_CLASSES)
    # PersistentVolumeClaims, their volumes and classes: the volume-binding filter
    informers.add("persistentvolumeclaims", PVCS)
    informers.add("persistentvolumes", PVS)
    informers.add("storageclasses", STORAGE_CLASSES)
    return informers


def volume_index(informers: InformerSet) -> VolumeIndex:
    """The claims, volumes and classes of the informer caches, for the volume-binding filter."""
    return VolumeIndex(
        informers["persistentvolumeclaims"].items(),
        informers["persistentvolumes"].items(),
        informers["storageclasses"].items(),
    )


def config_from_configmap(cm: dict[str, Any], node_pool: str = "") -> SchedulerConfig:
    """The SchedulerConfig of ``node_pool`` from the rendered scheduler ConfigMap (see
    :func:`kai.api.scheduler_configmap.read_scheduler_configmap`, which checks every key first).
    Raises ValueError naming the key and field."""
    from kai.api.scheduler_configmap import read_scheduler_configmap

    return read_scheduler_configmap(cm, node_pool).config


class Scheduler:
    def __init__(
        self,
        kube: Kube,
        informers: InformerSet,
        recorder: EventRecorder,
        options: SchedulerOptions | None = None,
        metrics: SchedulerMetrics | None = None,
        is_leader: Any = None,
    ) -> None:
        self.kube = kube
        self.informers = informers
        self.recorder = recorder
        self.options = options or SchedulerOptions()
        self.metrics = metrics or SchedulerMetrics()
        self.is_leader = is_leader or (lambda: True)
        self.builder = SnapshotBuilder(
            self.options.scheduler_name, self.options.config, self.options.pool
        )
        self.config_problem: str | None = None  # why the ConfigMap is refused (None: fine)
        self.actions = list((self.options.config or SchedulerConfig()).actions)
        self._config_version: str | None = None
        self._unsupported: set[str] = set()
        self.pool = ThreadPoolExecutor(self.options.workers, thread_name_prefix="sched-write")
        # PodGroup annotations and conditions go through a narrower lane: binds come first
        self.status_pool = ThreadPoolExecutor(2, thread_name_prefix="sched-status")
        self._created: dict[tuple[str, str], tuple[dict[str, Any], float]] = {}
        self._direct = InFlightBinds()  # direct binds until the pods informer shows them
        self._created_lock = threading.Lock()
        self._reported: dict[str, str] = {}  # object uid -> last problem reported
        # pods naming a PodGroup that does not exist: reported once, after a grace period
        self._missing_groups = missing_podgroup.MissingPodGroups()
        self._conditions: dict[str, str] = {}  # job uid -> last scheduling condition written
        self._transition = 0
        self.last_result: SessionResult | None = None
        self.last_built: BuiltSnapshot | None = None
        self.cycles = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.trigger = CycleTrigger(
            self.options.coalesce, self.options.resync, min_interval=self.options.period
        )
        # the snapshot follows the informers' deltas (one owner of the derived state)
        self.snapshot = IncrementalSnapshot(
            self.builder,
            {k: informers[k] for k in SNAPSHOT_KINDS if k in informers.informers},
            self._in_flight,
            volumes=lambda: volume_index(informers),
        )
        for kind in informers.informers:
            informers[kind].add_handler(self._on_change(kind))
        self.snapshot.resync()  # whatever the informers held before the handlers were added
        self.result_listeners: list[Any] = []
        self.usage_reading: Any = None  # the last cycle's kai.reconcilers.usage.UsageReading
        self._usage_version: str | None = None

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> Scheduler:
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.trigger.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.status_pool.shutdown(wait=True, cancel_futures=True)

    def _on_change(self, kind: str) -> Any:
        name = self.options.scheduler_name
        trigger = self.trigger
        snapshot = self.snapshot if kind in SNAPSHOT_KINDS else None

        def handler(etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            if snapshot is not None:
                snapshot.changed(kind, obj)
            if relevant(kind, etype, obj, old, name):
                trigger.changed()

        return handler

    def _loop(self) -> None:
        while self.trigger.wait():
            if not (self.is_leader() and self.informers.wait_synced(0)):
                # not leading (or not synced) yet: look again soon (a tenth of a second at most,
                # a cheap check), and run the first cycle as soon as we may
                self.trigger.skipped()
                self._stop.wait(min(self.options.period, 0.1))
                self.trigger.changed()
                continue
            try:
                self.run_once()
                self._schedule_time_based()
            except Exception:  # one bad cycle must not end scheduling
                log.exception("scheduling cycle failed")
                self.retry_later()

    def retry_later(self) -> None:
        """A write failed or a cycle broke: try again in a period."""
        self.trigger.schedule(time.monotonic() + self.options.period)

    def _schedule_time_based(self) -> None:
        """Tell the trigger when the cycle just run could be followed by a different one on
        an unchanged cluster (:func:`kai.reconcilers.cycle_trigger.next_due`)."""
        now_mono = time.monotonic()
        if self.options.usage is not None:
            self.trigger.schedule(now_mono + self.options.period)  # usage decays with time
        with self._created_lock:
            shown = [t for _, t in self._created.values() if t != math.inf]
        if shown:  # the overlay forgets a BindRequest the informer never showed
            self.trigger.schedule(min(shown) + _OVERLAY_TTL + 0.01)
        built, result = self.last_built, self.last_result
        if built is None or result is None:
            return
        snapshot = built.snapshot

        def statuses(job: JobSpec) -> dict[str, TaskStatus]:
            return {
                t.uid: result.tasks[t.uid].status if t.uid in result.tasks else t.status
                for t in job.tasks
            }

        due = next_due(
            snapshot.now,
            snapshot.jobs,
            snapshot.queues,
            snapshot.config,
            stale=lambda job: is_stale(job, statuses(job)),
            pending=lambda job: job.uid in result.job_reasons,
        )
        if due is not None:
            # a little after the deadline: the core compares with the cycle's own clock
            self.trigger.schedule(now_mono + max(0.0, due - time.time()) + 0.01)

    # -- on demand: a snapshot for bug reports ---------------------------------------------
    def cluster_snapshot(self) -> ClusterSnapshot:
        """What this scheduler's next cycle would read (its informer caches, its in-flight
        BindRequests), as a :class:`~kai.reconcilers.cluster_snapshot.ClusterSnapshot`."""
        inf = self.informers
        caches: dict[str, list[dict[str, Any]]] = {
            kind: inf[kind].items()
            for kind in (
                "pods",
                "nodes",
                "podgroups",
                "queues",
                "topologies",
                "priorityclasses",
                "persistentvolumeclaims",
                "persistentvolumes",
                "storageclasses",
            )
        }
        caches["bindrequests"] = self._bind_request_view(advance=False)
        caches["config"] = inf["config"].items() if "config" in inf.informers else []
        pool = self.options.pool
        return from_caches(
            caches,
            scheduler_name=self.options.scheduler_name,
            config_map=self.options.config_map,
            node_pool=pool.partition,
            node_pool_label=pool.label_key,
        )

    def write_snapshot(self, directory: str) -> str:
        """Write :meth:`cluster_snapshot` into ``directory``; the file's path."""
        import os

        snap = self.cluster_snapshot()
        stamp = datetime.fromtimestamp(snap.captured_at, UTC).strftime("%Y%m%dT%H%M%S%f")
        path = os.path.join(directory, f"kai-snapshot-{stamp}.json")
        snap.write(path)
        log.info("cluster snapshot written to %s", path)
        return path

    # -- one cycle -----------------------------------------------------------------------
    def _bind_request_view(self, advance: bool = True) -> list[dict[str, Any]]:
        return self.informers["bindrequests"].items() + list(self._in_flight(advance).values())

    def _in_flight(self, advance: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
        """BindRequests this scheduler created (or is creating) that the informer does not
        show yet, by (namespace, name), forgotten once shown or after a while; and the records
        of direct binds whose pods the cache does not show bound yet
        (:class:`~kai.reconcilers.direct_bind.InFlightBinds`: the incremental snapshot calls this
        after it took the pods it derives again, as that class requires). ``advance=False``:
        a look from elsewhere (a snapshot for a bug report) that moves no record on."""
        cached = self.informers["bindrequests"]
        now = time.monotonic()
        out = {}
        with self._created_lock:
            for key, (br, created) in list(self._created.items()):
                if cached.get(key[1], key[0]) is not None or now - created > _OVERLAY_TTL:
                    del self._created[key]
                else:
                    out[key] = br
        if len(self._direct):
            for record in self._direct.records(self.informers["pods"].get, advance=advance):
                md = record.get("metadata") or {}
                out[(str(md.get("namespace") or ""), str(md.get("name") or ""))] = record
        return out

    def _refresh_config(self) -> None:
        """Take the settings of this scheduler's node pool from the rendered ConfigMap
        (``kai render`` / ``kai controller``) when it changes. The ConfigMap is checked as a
        whole: a bad one is refused (Warning ``InvalidConfig`` Event on it, the shard's
        ``ConfigValid`` condition False, metric ``kai_scheduler_config_valid`` 0) and the last
        good settings stay in force; a good one afterwards clears all three."""
        from kai.api.scheduler_configmap import (
            InvalidSchedulerConfig,
            SchedulerConfigMap,
            read_scheduler_configmap,
        )

        if self.options.config is not None or "config" not in self.informers.informers:
            return
        items = self.informers["config"].items()
        cm = items[0] if items else None
        version = str(cm["metadata"].get("resourceVersion")) if cm else ""
        if version == self._config_version:
            return
        self._config_version = version
        pool = self.options.pool
        settings = SchedulerConfigMap(SchedulerConfig())
        if cm is not None:
            try:
                settings = read_scheduler_configmap(cm, pool.partition)
            except InvalidSchedulerConfig as exc:
                self._config_refused(cm, exc.problems)
                return
        was_refused = self.config_problem is not None
        self.config_problem = None
        self.metrics.config_valid.set(1)
        self.builder.config = settings.config
        self.builder.sharing_modes = settings.sharing_modes
        self.actions = [a for a in settings.config.actions if a not in self._unsupported]
        source = f"SchedulerPolicy {settings.policy}" if settings.policy else "KAI's defaults"
        log.info(
            "scheduler settings of node pool %s: %s; actions %s",
            pool.name,
            source,
            ", ".join(self.actions),
        )
        message = f"node pool {pool.name}: {source} applied"
        # the condition first, the Event after: whoever sees the Event sees the condition
        set_shard_condition(self.kube, pool, "ConfigValid", "True", "Applied", message, rfc3339())
        if cm is not None and was_refused:
            self.recorder.event(cm, "Normal", "ConfigApplied", message)

    def _config_refused(self, cm: dict[str, Any], problems: list[str]) -> None:
        text = "; ".join(problems)
        md = cm["metadata"]
        message = (
            f"ConfigMap {md.get('namespace')}/{md.get('name')} refused, "
            f"the previous settings are kept: {text}"
        )
        self.config_problem = message
        self.metrics.config_valid.set(0)
        log.warning("scheduler %s", message)
        set_shard_condition(
            self.kube,
            self.options.pool,
            "ConfigValid",
            "False",
            "InvalidConfig",
            message,
            rfc3339(),
        )
        self.recorder.event(cm, "Warning", "InvalidConfig", message)

    def run_once(self) -> SessionResult | None:
        t0 = time.monotonic()
        self._refresh_config()
        built = self.snapshot.build()
        self._apply_usage(built)
        t_open = time.monotonic()
        self._report_problems(built)
        self._report_missing_podgroups(built)
        self._clean_bind_requests(built)
        acted: dict[str, frozenset[str]] = {}
        result = self._run_session(built, acted)
        t_session = time.monotonic()
        if result is None:
            return None
        self._record_usage(built, result)
        self._dispatch_binds(result, built)
        futures = []
        # evictions, and the moves: a moved pod is evicted and comes back from its controller
        # on the room the core found (KAI's consolidation); the pipelined job waits for the room
        work = [(e.task, e.action, e.reason) for e in result.evictions]
        work += [(m.task, m.action, m.reason) for m in result.moves]
        for task, action, reason in work:
            futures.append(self.pool.submit(self._evict, built, task, action, reason))
        self._write_job_status(built, result)
        for future in futures:
            try:
                future.result()
            except Exception:
                log.exception("scheduler write failed")
        t_close = time.monotonic()
        self.cycles += 1
        self.last_result = result
        self.last_built = built
        m = self.metrics
        m.open_session.set((t_open - t0) * 1000)
        m.close_session.set((t_close - t_session) * 1000)
        m.e2e.set((t_close - t0) * 1000)
        m.cycle_duration.observe((t_close - t0) * 1000)
        for phase, millis in (
            ("snapshot", t_open - t0),
            ("session", t_session - t_open),
            ("write", t_close - t_session),
        ):
            m.cycle_phase.observe(millis * 1000, {"phase": phase})
        m.cycles.inc()
        m.pending_pods.set(sum(1 for o in result.tasks.values() if o.status is TaskStatus.PENDING))
        self._action_metrics(result, acted)
        self._queue_metrics(built, result)
        for listener in self.result_listeners:
            listener(built, result)
        if result.binds or result.evictions or result.moves:
            log.info(
                "cycle %d: %d bound, %d evicted, %d moved, %d jobs pending (%.0f ms)",
                self.cycles,
                len(result.binds),
                len(result.evictions),
                len(result.moves),
                len(result.job_reasons),
                (t_close - t0) * 1000,
            )
        return result

    def _run_session(
        self, built: BuiltSnapshot, acted: dict[str, frozenset[str]]
    ) -> SessionResult | None:
        from kai.scheduler.session import run_session

        def on_action(name: str, seconds: float, jobs: frozenset[str]) -> None:
            self.metrics.action.set(seconds * 1000, {"action": name})
            self.metrics.action_histogram.observe(seconds * 1000, {"action": name})
            acted[name] = jobs

        while True:
            acted.clear()
            try:
                return run_session(built.snapshot, self.actions, on_action=on_action)
            except UnsupportedActionError as exc:
                log.warning("action %r is not implemented by the core; skipping it", exc.action)
                self._unsupported.add(exc.action)
                self.actions.remove(exc.action)
                if not self.actions:
                    return None

    # -- reporting -----------------------------------------------------------------------
    def _report_problems(self, built: BuiltSnapshot) -> None:
        if len(self._reported) > 10_000:  # forget objects that are fine or gone now
            current = {
                str((p.obj.get("metadata") or {}).get("uid") or p.text) for p in built.problems
            }
            self._reported = {k: v for k, v in self._reported.items() if k in current}
        if len(self._conditions) > 10_000:
            self._conditions = {k: v for k, v in self._conditions.items() if k in built.podgroups}
        for problem in built.problems:
            md = problem.obj.get("metadata") or {}
            uid = str(md.get("uid") or problem.text)
            if self._reported.get(uid) == problem.text:
                continue
            self._reported[uid] = problem.text
            log.warning("left out of scheduling: %s", problem.text)
            self.recorder.event(
                problem.obj,
                "Warning",
                "InvalidObject",
                f"ignored by the scheduler: {problem.field}: {problem.message}",
            )

    def _report_missing_podgroups(self, built: BuiltSnapshot) -> None:
        """A pod naming a PodGroup that does not exist: an Event and ``PodScheduled=False``
        once the grace period is over (:mod:`kai.reconcilers.missing_podgroup`)."""
        if "podgroups" not in self.informers.informers:
            return
        podgroups = self.informers["podgroups"]
        pool = self.options.pool
        # one shard reports a pod: the one whose node pool its labels name
        waiting = [
            p for p in built.ungrouped if pool.holds((p.get("metadata") or {}).get("labels"))
        ]
        found = missing_podgroup.missing(
            waiting, lambda ns, name: podgroups.get(name, ns) is not None
        )
        due, wake = self._missing_groups.due(found, time.monotonic())
        for pod, name in due:
            md = pod.get("metadata") or {}
            text = missing_podgroup.message(str(md.get("namespace") or ""), name)
            log.info("pod %s/%s: %s", md.get("namespace"), md.get("name"), text)
            self.recorder.event(pod, "Warning", missing_podgroup.REASON, text)
            self._mark_unschedulable(pod, text, missing_podgroup.REASON)
        if wake is not None:
            self.trigger.schedule(wake)

    def _clean_bind_requests(self, built: BuiltSnapshot) -> None:
        doomed = list(built.stale_bind_requests)
        doomed += [br for br in built.bind_requests.values() if not bind_request_live(br)]
        for br in doomed:
            md = br["metadata"]
            if md.get("deletionTimestamp") or is_in_flight_record(br):
                continue  # (an in-flight direct bind is no stored object)
            try:
                delete_if_present(
                    self.kube, BIND_REQUESTS, md["name"], md.get("namespace"), uid=md.get("uid")
                )
            except KubeError as exc:
                log.info(
                    "cannot delete BindRequest %s/%s: %s", md.get("namespace"), md["name"], exc
                )
                self.retry_later()

    # -- binds ---------------------------------------------------------------------------
    def _dispatch_binds(self, result: SessionResult, built: BuiltSnapshot) -> None:
        """Send the cycle's binds in the background on the write pool (bounded parallelism):
        the next cycle sees them as Binding through the in-flight overlays, so a big batch of
        binds never stalls scheduling. Pods that need no binder work are bound directly in
        ``direct`` mode; the rest get a BindRequest."""
        direct = self.options.bind_mode == BIND_DIRECT
        later = []  # direct binds go after the BindRequests: the binder's path is the longer
        for decision, groups in self._bind_plan(result, built):
            pod = built.pods.get(decision.task)
            if pod is None:
                continue
            if direct and binder_work(pod, decision) is None:
                key = self._direct.hold(pod, decision)
                later.append((pod, decision, key, _group_annotation(built, pod)))
                continue
            body = self._bind_request_body(built, decision, groups)
            if body is not None:
                self.pool.submit(self._bind, built, decision, body)
        for args in later:
            self.pool.submit(self._bind_direct, *args)

    def _bind_direct(
        self,
        pod: dict[str, Any],
        decision: BindDecision,
        key: tuple[str, str],
        group_annotation: dict[str, str],
    ) -> None:
        """POST the pod's Binding (with the ``received-resource-type`` annotation, as the binder
        writes it, and ``pod-group-name`` when the pod has none yet). Refused or failing: the
        in-flight record goes and the pod is Pending for the next cycle, with a
        ``FailedBinding`` Event."""
        md = pod["metadata"]
        ns, name = key
        t0 = time.monotonic()
        annotations = {RECEIVED_RESOURCE_TYPE: decision.received_resource_type, **group_annotation}
        try:
            refused = post_binding(self.kube, ns, name, decision.node, annotations)
        except KubeError as exc:
            refused = f"BindingError: {exc}"
        if refused:
            self._direct.drop(key)
            log.warning("cannot bind %s/%s to %s: %s", ns, name, decision.node, refused)
            self.recorder.event(pod, "Warning", "FailedBinding", refused)
            return
        self._direct.settle(key)
        now = time.time()
        self.metrics.task_bind.observe((time.monotonic() - t0) * 1000)
        born = parse_time(md.get("creationTimestamp"))
        if born is not None:
            self.metrics.task_scheduling.observe(max(0.0, now - born) * 1000)
        self.recorder.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {decision.node} "
            f"at node-pool {self.options.pool.name}",
        )

    def _bind_plan(
        self, result: SessionResult, built: BuiltSnapshot
    ) -> list[tuple[BindDecision, tuple[str, ...]]]:
        """Each bind with label-safe GPU group ids (new groups get fresh unique ids)."""
        existing = built.existing_groups
        fresh: dict[tuple[str, str], str] = {}
        plan = []
        for decision in result.binds:
            groups = []
            for group in decision.gpu_groups:
                if group in existing.get(decision.node, set()):
                    groups.append(group)
                    continue
                key = (decision.node, group)
                if key not in fresh:
                    fresh[key] = label_safe_group(decision.node, group, decision.task)
                groups.append(fresh[key])
            plan.append((decision, tuple(groups)))
        return plan

    def _bind_request_body(
        self, built: BuiltSnapshot, decision: BindDecision, groups: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """The BindRequest of a decision, registered as in flight."""
        pod = built.pods.get(decision.task)
        if pod is None:
            return None
        md = pod["metadata"]
        ns, name = md["namespace"], md["name"]
        spec: dict[str, Any] = {
            "podName": name,
            "selectedNode": decision.node,
            "receivedResourceType": decision.received_resource_type,
        }
        if decision.gpu_count or decision.gpu_portion:
            spec["receivedGPU"] = {
                "count": int(decision.gpu_count),
                "portion": portion_text(decision.gpu_portion or 1.0),
            }
        if groups:
            spec["selectedGPUGroups"] = list(groups)
        body = {
            "apiVersion": BIND_REQUESTS.api_version,
            "kind": "BindRequest",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"selected-node": decision.node},
                # the binder writes it on the pod through the Binding (group_by_owner.py)
                **({"annotations": group} if (group := _group_annotation(built, pod)) else {}),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": name,
                        "uid": md["uid"],
                        "controller": False,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": spec,
        }
        with self._created_lock:
            self._created[(ns, name)] = (body, math.inf)  # in flight: never expires
        return body

    def _bind(self, built: BuiltSnapshot, decision: BindDecision, body: dict[str, Any]) -> None:
        pod = built.pods[decision.task]
        md = pod["metadata"]
        ns, name = md["namespace"], md["name"]
        t0 = time.monotonic()
        try:
            created = create_if_absent(self.kube, BIND_REQUESTS, body)
        except KubeError as exc:
            with self._created_lock:
                self._created.pop((ns, name), None)
            log.warning("cannot create BindRequest %s/%s: %s", ns, name, exc)
            self.retry_later()  # the pod is pending again
            self.recorder.event(
                pod, "Warning", "FailedBinding", f"cannot create BindRequest: {exc}"
            )
            return
        with self._created_lock:
            if (ns, name) in self._created:
                self._created[(ns, name)] = (body, time.monotonic())
        now = time.time()
        self.metrics.task_bind.observe((time.monotonic() - t0) * 1000)
        born = parse_time(md.get("creationTimestamp"))
        if born is not None:
            self.metrics.task_scheduling.observe(max(0.0, now - born) * 1000)
        if created:
            self.recorder.event(
                pod,
                "Normal",
                "Scheduled",
                f"Successfully assigned {ns}/{name} to {decision.node} "
                f"at node-pool {self.options.pool.name}",
            )

    # -- evictions -----------------------------------------------------------------------
    def _evict(self, built: BuiltSnapshot, task: str, action: str, reason: str) -> None:
        pod = built.pods.get(task)
        if pod is None:
            return
        md = pod["metadata"]
        self.metrics.preemption_attempts.inc()
        try:
            delete_if_present(self.kube, PODS, md["name"], md["namespace"], uid=md.get("uid"))
        except KubeError as exc:
            log.warning("cannot evict %s/%s: %s", md["namespace"], md["name"], exc)
            self.retry_later()
            return
        job_uid = f"{md['namespace']}/{_group_name(built, pod) or ''}"
        pg = built.podgroups.get(job_uid)
        self.metrics.evicted.inc(
            labels={
                "podgroup": (pg or {}).get("metadata", {}).get("name", ""),
                "namespace": md["namespace"],
                "uid": (pg or {}).get("metadata", {}).get("uid", ""),
                "nodepool": self.options.pool.name,
                "action": action,
            }
        )
        self.recorder.event(pod, "Normal", "Evict", f"evicted by {action}: {reason}")

    # -- PodGroup scheduling conditions and annotations ------------------------------------
    def _write_job_status(self, built: BuiltSnapshot, result: SessionResult) -> None:
        # the start time is read only by min-runtime protection: written where that can apply;
        # elsewhere a start of an earlier run is dropped, so that the pods' start (which the
        # snapshot builder reads without the annotation) stands for this run
        started = set(result.started_jobs)
        in_force = min_runtime_in_force(built.snapshot)
        now_text = rfc3339(built.snapshot.now)
        job_of_task = {t.uid: job.uid for job in built.snapshot.jobs for t in job.tasks}
        evicted = {job_of_task.get(e.task) for e in result.evictions}
        evicted |= {job_of_task.get(m.task) for m in result.moves}
        facts: CycleFacts | None = None  # for the reasons, computed once (lazily)
        pending: dict[str, int] = {}  # pending PodGroups by the first reason of the taxonomy
        for job in built.snapshot.jobs:
            pg = built.podgroups.get(job.uid)
            if pg is None:
                continue
            md = pg["metadata"]
            annotations = md.get("annotations") or {}
            patch_md: dict[str, Any] = {}
            if job.uid in started:
                if in_force:
                    patch_md[LAST_START] = now_text
                elif LAST_START in annotations:
                    patch_md[LAST_START] = None
            if job.uid in evicted:
                patch_md[LAST_EVICTION] = now_text  # the core's preemptionDelay counts from it
            statuses = {
                t.uid: result.tasks[t.uid].status if t.uid in result.tasks else t.status
                for t in job.tasks
            }
            active = sum(1 for s in statuses.values() if s in ACTIVE_ALLOCATED_STATUSES)
            stale = is_stale(job, statuses)
            if stale and STALE_SINCE not in annotations:
                patch_md[STALE_SINCE] = now_text
            elif not stale and STALE_SINCE in annotations:
                patch_md[STALE_SINCE] = None
            if patch_md:
                self.status_pool.submit(
                    self._patch, PODGROUPS, pg, {"metadata": {"annotations": patch_md}}
                )
            reasons = result.job_reasons.get(job.uid)
            if reasons and active == 0:
                if facts is None:
                    facts = cycle_facts(built.snapshot, result)
                classified = classify_job(job, result, facts)
                first = classified[0].reason.value
                pending[first] = pending.get(first, 0) + 1
                self._unschedulable(pg, job, classified, built)
            elif not reasons and self._conditions.get(job.uid) is not None:
                self._conditions.pop(job.uid, None)
                if (pg.get("status") or {}).get("schedulingConditions"):
                    self.status_pool.submit(
                        self._patch,
                        PODGROUPS,
                        pg,
                        {"status": {"schedulingConditions": None}},
                        "status",
                    )
        self.metrics.pending_reasons.replace({(reason,): n for reason, n in pending.items()})

    def _unschedulable(
        self, pg: dict[str, Any], job: JobSpec, reasons: list[Classified], built: BuiltSnapshot
    ) -> None:
        """The PodGroup condition, its Event and the pods' ``PodScheduled`` condition, all from
        the pending-reason taxonomy (:mod:`kai.scheduler.reasons`), first reason first."""
        job_uid = job.uid
        text = condition_text(reasons)
        if self._conditions.get(job_uid) == text:
            return
        self._conditions[job_uid] = text
        existing = (pg.get("status") or {}).get("schedulingConditions") or []
        if existing:
            old = existing[-1]
            old_text = "; ".join(
                f"{r.get('reason')}: {r.get('message')}" for r in old.get("reasons") or []
            )
            if old_text == text:
                return
            with contextlib.suppress(ValueError):
                self._transition = max(self._transition, int(old.get("transitionID") or 0))
        self._transition += 1
        condition = {
            "type": "UnschedulableOnNodePool",
            "nodePool": self.options.pool.name,
            "reason": reasons[0].reason.value,
            "message": text,
            "reasons": [{"reason": r.reason.value, "message": r.message} for r in reasons],
            "transitionID": str(self._transition),
            "lastTransitionTime": rfc3339(),
            "status": "True",
        }
        self.status_pool.submit(
            self._patch, PODGROUPS, pg, {"status": {"schedulingConditions": [condition]}}, "status"
        )
        self.recorder.event(pg, "Warning", "Unschedulable", text)
        self.metrics.pending_reasons_total.inc(labels={"reason": reasons[0].reason.value})
        mark = (pg.get("spec") or {}).get("markUnschedulable", True) is not False
        for task in job.tasks:
            pod = built.pods.get(task.uid)
            if pod is not None and task.status is TaskStatus.PENDING:
                self.recorder.event(pod, "Warning", "Unschedulable", text)
                if mark:
                    self._mark_unschedulable(pod, text)

    def _mark_unschedulable(
        self, pod: dict[str, Any], text: str, reason: str = "Unschedulable"
    ) -> None:
        """Pod condition ``PodScheduled=False/<reason>`` (what ``kubectl describe`` shows),
        written only when its message changes."""
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if (
            current is not None
            and current.get("status") == "False"
            and (current.get("message") == text)
        ):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": text,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(),
        }
        others = [c for c in conditions if c.get("type") != "PodScheduled"]
        self.status_pool.submit(
            self._patch, PODS, pod, {"status": {"conditions": [*others, condition]}}, "status"
        )

    def _patch(self, res: Any, obj: dict[str, Any], patch: dict[str, Any], sub: str = "") -> None:
        try:
            patch_if_changed(self.kube, res, obj, patch, sub=sub)
        except ApiError as exc:
            log.info("cannot patch %s %s: %s", res.kind, obj["metadata"].get("name"), exc)
        except KubeError as exc:
            log.info("cannot patch %s %s: %s", res.kind, obj["metadata"].get("name"), exc)

    # -- time-based fairshare ------------------------------------------------------------
    def _apply_usage(self, built: BuiltSnapshot) -> None:
        """Fill each queue's historical usage from the usage source's cache (never waits);
        stale or missing usage leaves it 0: plain fair share, said in the metrics and in the
        ``TimeBasedFairshare`` Queue condition."""
        from kai.reconcilers.usage import UsageConfigError, usage_params_from_configmap

        source = self.options.usage
        if source is None:
            return
        if self.options.config is None and "config" in self.informers.informers:
            items = self.informers["config"].items()
            cm = items[0] if items else None
            version = str(cm["metadata"].get("resourceVersion")) if cm else ""
            if version != self._usage_version:
                self._usage_version = version
                try:
                    source.configure(usage_params_from_configmap(cm))
                except UsageConfigError as exc:
                    log.warning("scheduler ConfigMap: %s; keeping the previous usage settings", exc)
        reading = source.reading(built.snapshot.now)
        self.usage_reading = reading
        self.metrics.usage_age.set(-1 if reading.age is None else reading.age)
        self.metrics.usage_stale.set(0 if reading.usage is not None else 1)
        if reading.usage is None:
            return
        for queue in built.snapshot.queues:
            queue.usage = dict(reading.usage.get(queue.name, {}))

    def _record_usage(self, built: BuiltSnapshot, result: SessionResult) -> None:
        source = self.options.usage
        if source is None:
            return
        nodes = built.snapshot.nodes
        capacity = {
            "gpu": float(sum(n.gpus for n in nodes)),
            "cpu": float(sum(n.cpu_millis for n in nodes)),
            "memory": float(sum(n.memory_bytes for n in nodes)),
        }
        allocated = {name: dict(share.allocated) for name, share in result.queues.items()}
        source.record(built.snapshot.now, allocated, capacity)

    def usage_condition(self) -> dict[str, Any] | None:
        """The ``TimeBasedFairshare`` Queue condition of the last cycle (None: no source)."""
        reading = self.usage_reading
        if self.options.usage is None or reading is None:
            return None
        if reading.usage is not None:
            return {
                "type": "TimeBasedFairshare",
                "status": "True",
                "reason": "UsageAvailable",
                "message": f"historical usage from {self.options.usage.name} divides the "
                "over-quota share",
            }
        return {
            "type": "TimeBasedFairshare",
            "status": "False",
            "reason": "UsageUnavailable",
            "message": f"plain fair share: {reading.reason}",
        }

    # -- metrics -------------------------------------------------------------------------
    def _action_metrics(self, result: SessionResult, acted: dict[str, frozenset[str]]) -> None:
        touched = frozenset().union(*acted.values())  # only these can be credited
        placed_jobs = {
            job
            for job, tasks in self._jobs_of(result, touched).items()
            if any(result.tasks[t].status in ACTIVE_ALLOCATED_STATUSES for t in tasks)
        }
        credited: set[str] = set()
        for action, jobs in acted.items():
            if jobs:
                self.metrics.acted_on.inc(len(jobs), {"action": action})
            newly = (jobs & placed_jobs) - credited
            if newly:
                self.metrics.scheduled.inc(len(newly), {"action": action})
                credited |= newly

    def _jobs_of(self, result: SessionResult, uids: frozenset[str]) -> dict[str, list[str]]:
        """The tasks of the last cycle's jobs named in ``uids``, per job uid."""
        built = self.last_built
        if built is None or not uids:
            return {}
        return {
            job.uid: [t.uid for t in job.tasks if t.uid in result.tasks]
            for job in built.snapshot.jobs
            if job.uid in uids
        }

    def _queue_metrics(self, built: BuiltSnapshot, result: SessionResult) -> None:
        queues = {
            (q.get("metadata") or {}).get("name"): q for q in self.informers["queues"].items()
        }
        display = {
            name: (q.get("spec") or {}).get("displayName") or "" for name, q in queues.items()
        }
        per_core = {"gpu": 1.0, "cpu": 1 / 1000.0, "memory": 1.0}  # core units -> metric units
        fair_scale = {"gpu": 1.0, "cpu": 1 / 1000.0, "memory": 1 / 1e9}  # KAI: fair share in GB
        specs = {q.name: q for q in built.snapshot.queues}
        m = self.metrics
        for resource in ("gpu", "cpu", "memory"):
            fair: dict[tuple[str, ...], float] = {}
            usage: dict[tuple[str, ...], float] = {}
            allocated: dict[tuple[str, ...], float] = {}
            quota: dict[tuple[str, ...], float] = {}
            limit: dict[tuple[str, ...], float] = {}
            for name, share in result.queues.items():
                labels = (name, name, str(display.get(name, "")))
                fair[labels] = share.fair_share.get(resource, 0.0) * fair_scale[resource]
                allocated[labels] = share.allocated.get(resource, 0.0) * per_core[resource]
                spec = specs.get(name)
                usage[labels] = spec.usage.get(resource, 0.0) if spec else 0.0
                res = spec.resources.get(resource) if spec else None
                if res is not None:
                    quota[labels] = _scaled(res.quota, per_core[resource])
                    limit[labels] = _scaled(res.limit, per_core[resource])
            m.fair_share[resource].replace(fair)
            m.usage[resource].replace(usage)
            m.allocated[resource].replace(allocated)
            m.quota[resource].replace(quota)
            m.limit[resource].replace(limit)
        nodes = built.snapshot.nodes
        from kai.scheduler.session import node_gpus

        # as fair share counts them (MIG instances too), so that fair shares add up to it
        m.capacity["gpu"].set(sum(node_gpus(n) for n in nodes if n.ready))
        m.capacity["cpu"].set(sum(n.cpu_millis for n in nodes) / 1000.0)
        m.capacity["memory"].set(float(sum(n.memory_bytes for n in nodes)))
        m.queue_info.replace(
            {
                (
                    q.name,
                    q.name,
                    str(display.get(q.name, "")),
                    q.parent or "",
                    str(q.priority),
                ): 1.0
                for q in built.snapshot.queues
            }
        )


def _group_name(built: BuiltSnapshot, pod: dict[str, Any]) -> str | None:
    """The pod's PodGroup: its annotation, else found from its owner (group_by_owner.py)."""
    ns = pod["metadata"]["namespace"]
    return group_of(pod, lambda name: built.podgroups.get(f"{ns}/{name}"))


def _group_annotation(built: BuiltSnapshot, pod: dict[str, Any]) -> dict[str, str]:
    """``pod-group-name`` for the Binding of a pod that does not carry it yet (empty when it
    does): the API server copies a Binding's annotations onto the pod."""
    if (pod["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION):
        return {}
    name = _group_name(built, pod)
    return {POD_GROUP_ANNOTATION: name} if name else {}


def _scaled(value: float | None, factor: float) -> float:
    """A quota or limit in metric units; unlimited (-1, None or infinite) stays -1."""
    if value is None or value < 0 or math.isinf(value):
        return -1.0
    return value * factor
