"""The whole live system in one process: what ``kai up``, the end-to-end tests and the
benchmark start. Every component talks to the API server over HTTP through its own client,
exactly as separate deployments would; they share nothing but the server.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer, InformerSet
from kai.kube.leader import LeaderElector
from kai.kube.resources import BY_KIND, CRDS, JOBS, NAMESPACES, PODGROUPS, PODS
from kai.kube.writes import create_if_absent, patch_if_changed, with_retries
from kai.metrics import SchedulerMetrics

# each component is imported when it starts: `kai binder` and `kai podgrouper` do not load the
# scheduler (its core and numpy), which costs a process most of a second of CPU at start
if TYPE_CHECKING:
    from kai.reconcilers.binder import Binder
    from kai.reconcilers.podgrouper import PodGrouper
    from kai.reconcilers.scheduler import Scheduler
    from kai.scheduler.snapshot import SchedulerConfig
    from kai.sim.kubelet import Kubelet

log = logging.getLogger("kai.sim.system")


def process_age() -> float:
    """Seconds since this process started (Linux ``/proc``; 0.0 where it cannot be read)."""
    try:
        with open("/proc/self/stat") as handle:
            started = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))


def log_synced(component: str, *informers: InformerSet) -> None:
    """One INFO line of the start-up timeline: when the informers had listed, and each list."""
    log.info(
        "%s: informers synced %.2fs after the process started (%s)",
        component,
        process_age(),
        ", ".join(group.summary() for group in informers if group.informers),
    )


#: components that may share one client and one set of informers (share_informers)
COMPONENTS = ("scheduler", "binder", "podgrouper")
SHARING = frozenset({"binder", "podgrouper"})


PRIORITY_CLASSES = (
    ("train", 50, "Preemptible training workloads (KAI default)"),
    ("build-preemptible", 75, "Preemptible interactive workloads"),
    ("build", 100, "Non-preemptible interactive workloads"),
    ("inference", 125, "Non-preemptible inference workloads"),
)
SYSTEM_NAMESPACES = ("kai-scheduler", "kai-resource-reservation")


def identity(component: str) -> str:
    return f"{component}-{socket.gethostname()}-{os.getpid()}"


def kai_crds() -> list[dict[str, Any]]:
    """The project's CRDs, generated from the kai.api models (same as manifests/crds/)."""
    from kai.api.crd import crd_manifest
    from kai.api.registry import all_kinds, json_schema

    return [crd_manifest(info.model, json_schema(info)) for info in all_kinds()]


def wait_for_crds(kube: Kube, names: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = with_retries(partial(kube.get, CRDS, name))
            conds = {
                c.get("type"): c.get("status")
                for c in (crd.get("status") or {}).get("conditions") or []
            }
            if conds.get("Established") == "True" or not conds:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.05)


def apply_objects(kube: Kube, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object, or merge-patch its spec/data/labels when it exists. Returns a
    list of problems (one per refused object); nothing is half-applied per object."""
    problems = []
    for obj in objects:
        res = BY_KIND.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        md = obj.get("metadata") or {}
        what = f"{obj.get('kind')} {md.get('name')}"
        if res is None:
            problems.append(f"{what}: kind not known to kai up; skipped")
            continue
        if res.namespaced and md.get("namespace"):
            create_if_absent(
                kube,
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": md["namespace"]}},
            )
        try:
            if not create_if_absent(kube, res, obj):
                current = kube.get(res, md["name"], md.get("namespace"))
                patch = {k: v for k, v in obj.items() if k in ("spec", "data")}
                patch["metadata"] = {k: v for k, v in md.items() if k in ("labels", "annotations")}
                patch_if_changed(kube, res, current, patch)
        except ApiError as exc:
            problems.append(f"{what}: {exc.message or exc}")
    return problems


def bootstrap(kube: Kube) -> None:
    """CRDs, system namespaces and KAI's PriorityClasses."""
    crds = kai_crds()
    for crd in crds:
        create_if_absent(kube, CRDS, crd)
    wait_for_crds(kube, [c["metadata"]["name"] for c in crds])
    for ns in SYSTEM_NAMESPACES:
        create_if_absent(
            kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    from kai.kube.resources import PRIORITY_CLASSES as PC

    for name, value, description in PRIORITY_CLASSES:
        create_if_absent(
            kube,
            PC,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            },
        )


@dataclass
class SystemOptions:
    scheduler_name: str = "kai-scheduler"
    period: float = 1.0
    coalesce: float = 0.1  # the scheduler's cycle waits this long after the first new work
    status_period: float = 2.0
    config: SchedulerConfig | None = None
    leader_election: bool = True
    lease_namespace: str = "kai-scheduler"
    lease_duration: float = 15.0
    renew_period: float = 10.0
    retry_period: float = 2.0
    kubelet: bool = True
    kubelet_termination_delay: float = 0.0
    kubelet_workers: int = 8  # the simulated kubelet of every node: pod starts in flight
    binder_workers: int = 32
    grouper_workers: int = 32
    queue_label: str = "kai.scheduler/queue"  # the pod-grouper's queue label key
    # "namespace/name" of the pod-grouper's per-kind default priorities ConfigMap (KAI's)
    default_priorities: str | None = None
    node_pool_label: str = "kai.scheduler/node-pool"  # KAI's nodePoolLabelKey
    shard: str | None = None  # the scheduler's SchedulingShard (None: the whole cluster)
    components: tuple[str, ...] = ("scheduler", "binder", "podgrouper", "nodes")
    config_map: str = "kai-scheduler/kai-scheduler-config"  # rendered scheduler settings
    # time-based fairshare: none | accounting | prometheus (kai.reconcilers.usage)
    usage_source: str = "none"
    prometheus_url: str = ""
    usage_history: str = ""  # namespace/name of the accounting history ConfigMap ("" = memory)
    # appended to the Lease holder identities: two Systems of one process (a leader change
    # in a test) must not share an identity, or both would hold the Lease
    identity_suffix: str = ""
    bind_mode: str = "direct"  # the scheduler's: direct | bindRequest (kai.reconcilers.direct_bind)
    # scheduler, binder and pod-grouper of this System share one client and one set of
    # informers (one LIST and WATCH of pods instead of one per component): `kai scheduler
    # --also binder,podgrouper`. False: each its own, as separate processes would have.
    share_informers: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class System:
    """Scheduler, binder, pod-grouper and the simulated node side, on one API server."""

    def __init__(self, kubeconfig: str | None, options: SystemOptions | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.options = options or SystemOptions()
        self.stoppers: list[Any] = []
        self.scheduler: Scheduler | None = None
        self.binder: Binder | None = None
        self.grouper: PodGrouper | None = None
        self.kubelet: Kubelet | None = None
        self.webhook: Any = None  # kai.webhooks.app.WebhookApp with the "webhook" component
        self.metrics = SchedulerMetrics()
        self.informers: dict[str, Any] = {}
        # share_informers: the client, the scheduler's informers, the pod-grouper's others
        self._shared: tuple[Kube, InformerSet, InformerSet] | None = None

    def _kube(self) -> Kube:
        kube = Kube.from_kubeconfig(self.kubeconfig)
        self.stoppers.append(kube.close)
        return kube

    def _elector(self, kube: Kube, lease: str, component: str) -> LeaderElector | None:
        o = self.options
        if not o.leader_election:
            return None
        elector = LeaderElector(
            kube,
            lease,
            o.lease_namespace,
            identity(component) + o.identity_suffix,
            lease_duration=o.lease_duration,
            renew_period=o.renew_period,
            retry_period=o.retry_period,
        ).start()
        self.stoppers.append(elector.stop)
        return elector

    def start(self, sync_timeout: float = 60.0) -> System:
        from kube_emulator.gctune import tune_for_large_caches

        tune_for_large_caches()  # the informer caches grow large: see gctune.py
        wanted = set(self.options.components)
        if self.options.share_informers and "scheduler" in wanted and wanted & SHARING:
            self._start_shared(sync_timeout, wanted)
        if "scheduler" in wanted:
            self._start_scheduler(sync_timeout)
        if "binder" in wanted:
            self._start_binder(sync_timeout)
        if "podgrouper" in wanted:
            self._start_podgrouper(sync_timeout)
        if "nodes" in wanted:
            self._start_nodes(sync_timeout)
        if "webhook" in wanted:
            self._start_webhook(sync_timeout)
        return self

    def _start_webhook(self, sync_timeout: float) -> None:
        """``kai webhook`` in this process, on a free loopback port, registered at its own URL
        (``--self-register``) so that the API server calls it as a real one calls the
        webhook's Service: policy documents, Queues and PodGroups are validated, kai's pods
        get their queue label and fractional-GPU pods their GPU-sharing environment.
        Stopping removes its configurations."""
        from kai.webhooks.app import Options, WebhookApp, free_port

        o = self.options
        port = free_port()
        app = WebhookApp(
            self._kube(),
            Options(
                port=port,
                host="127.0.0.1",
                self_register=f"https://127.0.0.1:{port}",
                namespace=o.lease_namespace,
                scheduler_name=o.scheduler_name,
                workers=8,
            ),
        ).start(sync_timeout)
        self.stoppers.append(app.stop)
        self.webhook = app

    def _start_shared(self, sync_timeout: float, wanted: set[str]) -> None:
        """One client and the scheduler's informers (plus the pod-grouper's Jobs and
        QueueTrees), listed before any component is made: each component then takes what
        the caches already hold (the scheduler's snapshot resyncs, the binder and the
        pod-grouper walk their caches at start) and follows the same watches."""
        from kai.kube.resources import QUEUE_TREES
        from kai.reconcilers.scheduler import make_informers

        o = self.options
        kube = self._kube()
        informers = make_informers(kube, o.scheduler_name, o.config_map)
        # the pod-grouper's own kinds in a set of their own: the scheduler follows every
        # informer of its set, and a Job's status is no scheduling work
        extra = InformerSet(kube)
        if "podgrouper" in wanted:
            extra.add("jobs", JOBS)
            extra.add("queuetrees", QUEUE_TREES)
        for group in (informers, extra):
            group.start()
            self.stoppers.append(group.stop)
        informers.wait_synced(sync_timeout)
        extra.wait_synced(sync_timeout)
        log_synced(
            "+".join(c for c in COMPONENTS if c in wanted),
            informers,
            extra,
        )
        self._shared = (kube, informers, extra)

    def _start_scheduler(self, sync_timeout: float) -> None:
        from kai.reconcilers.scheduler import Scheduler, SchedulerOptions, make_informers
        from kai.reconcilers.shard import load_node_pool
        from kai.reconcilers.status import StatusWriter

        o = self.options
        if self._shared is not None:
            kube, informers, _ = self._shared
        else:
            kube = self._kube()
            informers = make_informers(kube, o.scheduler_name, o.config_map)
        recorder = EventRecorder(kube, "kai-scheduler").start()
        self.stoppers.append(recorder.stop)
        pool = load_node_pool(kube, o.shard, o.node_pool_label)
        # one Lease per scheduler name and node pool: schedulers of different names or shards
        # do not fight over one
        elector = self._elector(kube, pool.lease_name(o.scheduler_name), "kai-scheduler")
        usage = self._usage_source(kube)
        scheduler = Scheduler(
            kube,
            informers,
            recorder,
            SchedulerOptions(
                o.scheduler_name,
                o.period,
                o.config,
                config_map=o.config_map,
                usage=usage,
                pool=pool,
                coalesce=o.coalesce,
                bind_mode=o.bind_mode,
            ),
            self.metrics,
            is_leader=(lambda: elector.is_leader) if elector else None,
        )
        status = StatusWriter(
            kube,
            informers["queues"],
            period=o.status_period,
            workers=2,
            queue_condition=scheduler.usage_condition,
        )
        scheduler.result_listeners.append(status)
        if self._shared is None:
            informers.start()
            self.stoppers.append(informers.stop)
            informers.wait_synced(sync_timeout)
            log_synced("scheduler", informers)
        scheduler.start()
        status.start()
        self.stoppers.append(status.stop)
        self.stoppers.append(scheduler.stop)
        self.scheduler = scheduler
        self.informers["scheduler"] = informers
        if usage is not None:
            usage.start()
            self.stoppers.append(usage.stop)

    def _usage_source(self, kube: Kube) -> Any:
        from kai.reconcilers.usage import make_usage_source

        o = self.options
        metrics = self.metrics

        def on_fetch(seconds: float, error: str) -> None:
            metrics.usage_fetch.observe(seconds * 1000)
            if error:
                metrics.usage_fetch_errors.inc(labels={"source": o.usage_source})

        return make_usage_source(
            o.usage_source,
            prometheus_url=o.prometheus_url,
            kube=kube,
            history_config_map=o.usage_history,
            on_fetch=on_fetch,
        )

    def _start_binder(self, sync_timeout: float) -> None:
        from kai.kube.resources import BIND_REQUESTS
        from kai.reconcilers.binder import Binder

        if self._shared is not None:
            kube, binformers, _ = self._shared
            brs, pods = binformers["bindrequests"], binformers["pods"]
            elector = self._elector(kube, "2ad35f9c.kai.scheduler", "kai-binder")
        else:
            kube = self._kube()
            # the Lease is sought while the informers list (as the scheduler's is), not after
            elector = self._elector(kube, "2ad35f9c.kai.scheduler", "kai-binder")
            binformers = InformerSet(kube)
            brs = binformers.add("bindrequests", BIND_REQUESTS)
            # only its scheduler's pods (reservation pods included): the binder never reads
            # another scheduler's pod, and a pod it misses is read once (`_bind`)
            pods = binformers.add(
                "pods", PODS, field_selector=f"spec.schedulerName={self.options.scheduler_name}"
            )
            binformers.start()
            self.stoppers.append(binformers.stop)
            binformers.wait_synced(sync_timeout)
            log_synced("binder", binformers)
        recorder = EventRecorder(kube, "kai-binder").start()
        self.stoppers.append(recorder.stop)
        self.binder = Binder(
            kube,
            brs,
            pods,
            recorder,
            workers=self.options.binder_workers,
            is_leader=(lambda: elector.is_leader) if elector else None,
            scheduler_name=self.options.scheduler_name,
        ).start()
        self.stoppers.append(self.binder.stop)
        self.informers["binder"] = binformers

    def _start_podgrouper(self, sync_timeout: float) -> None:
        from kai.kube.resources import QUEUE_TREES, QUEUES
        from kai.reconcilers.podgrouper import PodGrouper

        o = self.options
        if self._shared is not None:
            kube, shared, extra = self._shared
            ginformers = InformerSet(kube)  # a view: the informers are the shared ones
            for name in ("pods", "podgroups", "queues"):
                ginformers.informers[name] = shared[name]
            for name in ("jobs", "queuetrees"):
                ginformers.informers[name] = extra[name]
            gpods, jobs, pgs = ginformers["pods"], ginformers["jobs"], ginformers["podgroups"]
            gqueues, gtrees = ginformers["queues"], ginformers["queuetrees"]
        else:
            kube = self._kube()
        # one writer at a time: with several replicas only the Lease holder groups pods (the
        # Lease is sought while the informers list)
        elector = self._elector(kube, "kai-podgrouper", "kai-podgrouper")
        if self._shared is None:
            ginformers = InformerSet(kube)
            gpods = ginformers.add(
                "pods", PODS, field_selector=f"spec.schedulerName={o.scheduler_name}"
            )
            jobs = ginformers.add("jobs", JOBS)
            pgs = ginformers.add("podgroups", PODGROUPS)
            gqueues = ginformers.add("queues", QUEUES)
            gtrees = ginformers.add("queuetrees", QUEUE_TREES)
            ginformers.start()
            self.stoppers.append(ginformers.stop)
            ginformers.wait_synced(sync_timeout)
            log_synced("podgrouper", ginformers)
        recorder = EventRecorder(kube, "kai-podgrouper").start()
        self.stoppers.append(recorder.stop)
        self.grouper = PodGrouper(
            kube,
            gpods,
            jobs,
            pgs,
            recorder,
            scheduler_name=o.scheduler_name,
            workers=o.grouper_workers,
            queue_label=o.queue_label,
            node_pool_label=o.node_pool_label,
            queues=gqueues,
            default_priorities=o.default_priorities,
            queue_trees=gtrees,
            is_leader=(lambda: elector.is_leader) if elector else None,
        ).start()
        self.stoppers.append(self.grouper.stop)
        self.informers["podgrouper"] = ginformers

    def _start_nodes(self, sync_timeout: float) -> None:
        """The node lifecycle controller and, unless disabled, the simulated kubelet."""
        from kai.kube.resources import NODES
        from kai.reconcilers.snapshot_builder import RESERVATION_NAMESPACE
        from kai.sim.kubelet import Kubelet
        from kai.sim.nodes import NodeLifecycle

        o = self.options
        kube = self._kube()
        ninformers = InformerSet(kube)
        nodes: Informer = ninformers.add("nodes", NODES)
        # reservation pods on a watch of their own: behind every other pod change, one process
        # playing every kubelet of a large cluster would see them late (kai.sim.kubelet)
        npods = ninformers.add(
            "pods", PODS, field_selector=f"metadata.namespace!={RESERVATION_NAMESPACE}"
        )
        nreservations = ninformers.add("reservation-pods", PODS, namespace=RESERVATION_NAMESPACE)
        lifecycle = NodeLifecycle(kube, nodes)
        ninformers.start()
        self.stoppers.append(ninformers.stop)
        self.stoppers.append(lifecycle.stop)
        ninformers.wait_synced(sync_timeout)
        if o.kubelet:
            self.kubelet = Kubelet(
                kube,
                npods,
                nodes,
                reservations=nreservations,
                workers=o.kubelet_workers,
                termination_delay=o.kubelet_termination_delay,
            ).start()
            self.stoppers.append(self.kubelet.stop)
        self.informers["nodes"] = ninformers

    def stop(self) -> None:
        # components first (reverse start order), then informers and clients
        for stop in reversed(self.stoppers):
            try:
                stop()
            except Exception:
                log.exception("stopping %r failed", stop)
        self.stoppers.clear()

    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(check: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    stop = threading.Event()
    while time.monotonic() < deadline:
        if check():
            return True
        stop.wait(interval)
    return bool(check())


def default_gitops_path() -> Path | None:
    """examples/gitops of a source checkout, if this is one."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "examples" / "gitops"
        if candidate.is_dir():
            return candidate
    return None
