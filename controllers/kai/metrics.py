"""Prometheus metrics with KAI's names (prefix ``kai_``), exposed by ``prometheus_client``.

Each component keeps its metrics in a :class:`Registry` (a ``prometheus_client``
``CollectorRegistry`` with small typed helpers that take labels as a dict and can replace a
gauge's whole series at once, e.g. when a queue is deleted). :class:`MetricsServer` serves one or
more registries on ``/metrics`` together with the process and Python GC metrics, in the
Prometheus text format or in OpenMetrics when the scraper asks for it (``Accept:
application/openmetrics-text``), plus the ``/healthz``, ``/livez`` and ``/readyz`` probes.

Counters are exposed with the ``_total`` suffix (``prometheus_client`` adds it to a counter
registered without it), so KAI's ``kai_podgroups_scheduled_by_action`` is scraped as
``kai_podgroups_scheduled_by_action_total``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client import Counter as _PCounter
from prometheus_client import Gauge as _PGauge
from prometheus_client import Histogram as _PHistogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# ``*_created`` series double every counter and histogram for nothing a dashboard uses.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

LabelValues = tuple[str, ...]

__all__ = [
    "LATENCY_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricsServer",
    "Registry",
    "SchedulerMetrics",
    "exponential_buckets",
]


class _Metric:
    def __init__(self, metric: Any, labels: Sequence[str]) -> None:
        self._metric = metric
        self.name: str = metric._name
        self.labels = tuple(labels)

    def _child(self, labels: dict[str, str] | None) -> Any:
        if not self.labels:
            if labels:
                raise ValueError(f"{self.name}: takes no labels, got {sorted(labels)}")
            return self._metric
        labels = labels or {}
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labels)}")
        return self._metric.labels(**{k: str(v) for k, v in labels.items()})

    def series(self, labels: dict[str, str] | None = None) -> Any:
        """One series (``prometheus_client``'s child) to update directly: a hot path looks it
        up once instead of on every update."""
        return self._child(labels)

    def value(self, labels: dict[str, str] | None = None) -> float:
        """The current value of one series (the sum, for a histogram); 0 when absent."""
        wanted = {k: str(v) for k, v in (labels or {}).items()}
        for family in self._metric.collect():
            for sample in family.samples:
                if sample.name in (self.name, self.name + "_total", self.name + "_sum") and (
                    sample.labels == wanted
                ):
                    return float(sample.value)
        return 0.0


class Gauge(_Metric):
    def set(self, value: float, labels: dict[str, str] | None = None) -> None:
        self._child(labels).set(float(value))

    def replace(self, series: dict[LabelValues, float]) -> None:
        """Set the whole series at once (series not given disappear, e.g. deleted queues)."""
        with self._metric._lock:
            metrics = dict(self._metric._metrics)
        for key in metrics:
            if key not in series:
                self._metric.remove(*key)
        for key, value in series.items():
            self._metric.labels(*key).set(float(value))


class Counter(_Metric):
    def inc(self, amount: float = 1.0, labels: dict[str, str] | None = None) -> None:
        self._child(labels).inc(amount)


class Histogram(_Metric):
    def observe(self, value: float, labels: dict[str, str] | None = None) -> None:
        self._child(labels).observe(value)


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


class Registry:
    """The metrics of one component."""

    def __init__(self) -> None:
        self.collector_registry = CollectorRegistry(auto_describe=True)
        self.metrics: dict[str, _Metric] = {}

    def _add(self, metric: _Metric) -> Any:
        self.metrics[metric.name] = metric
        return metric

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        metric = _PGauge(name, help_text, labels, registry=self.collector_registry)
        return self._add(Gauge(metric, labels))  # type: ignore[no-any-return]

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        metric = _PCounter(name, help_text, labels, registry=self.collector_registry)
        return self._add(Counter(metric, labels))  # type: ignore[no-any-return]

    def histogram(
        self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        metric = _PHistogram(
            name, help_text, labels, registry=self.collector_registry, buckets=list(buckets)
        )
        return self._add(Histogram(metric, labels))  # type: ignore[no-any-return]

    def collect(self) -> Iterable[Metric]:
        return self.collector_registry.collect()

    def exposition(self) -> str:
        """The registry in the Prometheus text format."""
        return prometheus_client.generate_latest(self.collector_registry).decode()


class _Union(Collector):
    def __init__(self, registries: Sequence[Registry]) -> None:
        self.registries = list(registries)

    def collect(self) -> Iterable[Metric]:
        for registry in self.registries:
            yield from registry.collect()


def serving_registry(registries: Sequence[Registry]) -> CollectorRegistry:
    """What ``/metrics`` serves: the registries plus process, platform and GC metrics."""
    combined = CollectorRegistry(auto_describe=False)
    combined.register(_Union(registries))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        combined.register(collector)
    return combined


class MetricsServer:
    """Serves ``/metrics`` of one or more registries on ``port`` (0 = a free port, then in
    ``.port``), with the probes: ``/healthz`` and ``/livez`` answer ``ok`` while the process
    serves; ``/readyz`` answers ``ok`` once ``ready()`` is true (e.g. every informer has
    listed), else 503 ``not ready``."""

    def __init__(
        self,
        registries: Sequence[Registry],
        port: int,
        host: str = "0.0.0.0",
        ready: Callable[[], bool] | None = None,
    ) -> None:
        combined = self.registry = serving_registry(registries)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
                    body = encoder(combined)
                    code = 200
                elif self.path in ("/healthz", "/livez"):
                    body, ctype, code = b"ok", "text/plain", 200
                elif self.path == "/readyz":
                    if ready is None or ready():
                        body, ctype, code = b"ok", "text/plain", 200
                    else:
                        body, ctype, code = b"not ready", "text/plain", 503
                else:
                    body, ctype, code = b"not found", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # a scraper hanging up early is not worth a traceback

        self.httpd = Server((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


LATENCY_BUCKETS = exponential_buckets(5, 2, 10)  # KAI: 5 ms x 2^k, 10 buckets
QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")


class SchedulerMetrics:
    """The scheduler's metrics (KAI names, ``kai_`` prefix), and the queue metrics KAI's
    queue-controller exports (``kai_queue_info``, quotas, limits, allocation), which this
    scheduler writes from the same cycle's view."""

    def __init__(self, registry: Registry | None = None) -> None:
        r = self.registry = registry or Registry()
        self.e2e = r.gauge(
            "kai_e2e_scheduling_latency_milliseconds", "Duration of the last scheduling cycle"
        )
        self.config_valid = r.gauge(
            "kai_scheduler_config_valid",
            "1 while the scheduler ConfigMap is in force, 0 while a refused one waits to be fixed",
        )
        self.config_valid.set(1)
        self.open_session = r.gauge(
            "kai_open_session_latency_milliseconds", "Time to build the last cycle's snapshot"
        )
        self.close_session = r.gauge(
            "kai_close_session_latency_milliseconds",
            "Time to write the last cycle's decisions and status",
        )
        self.action = r.gauge(
            "kai_action_scheduling_latency_milliseconds",
            "Duration of each action in the last cycle",
            ("action",),
        )
        self.action_histogram = r.histogram(
            "kai_action_latency_milliseconds",
            "Duration of each action, every cycle",
            exponential_buckets(0.5, 2, 16),
            ("action",),
        )
        self.cycle_phase = r.histogram(
            "kai_cycle_phase_latency_milliseconds",
            "Duration of the phases of a cycle: snapshot, session, write",
            exponential_buckets(0.5, 2, 16),
            ("phase",),
        )
        self.cycle_duration = r.histogram(
            "kai_e2e_scheduling_duration_milliseconds",
            "Duration of whole scheduling cycles",
            exponential_buckets(0.5, 2, 18),
        )
        self.task_scheduling = r.histogram(
            "kai_task_scheduling_latency_milliseconds",
            "Pod creation to bind attempt",
            exponential_buckets(5, 2, 16),
        )
        self.task_bind = r.histogram(
            "kai_task_bind_latency_milliseconds",
            "Time to create the BindRequest of a pod",
            LATENCY_BUCKETS,
        )
        self.scheduled = r.counter(
            "kai_podgroups_scheduled_by_action",
            "PodGroups that got pods placed, by the action that placed them first in a cycle",
            ("action",),
        )
        self.acted_on = r.counter(
            "kai_podgroups_acted_on_by_action",
            "PodGroups whose placement an action changed (placed, pipelined or evicted)",
            ("action",),
        )
        self.evicted = r.counter(
            "kai_pod_group_evicted_pods_total",
            "Pods evicted, by podgroup and action",
            ("podgroup", "namespace", "uid", "nodepool", "action"),
        )
        self.preemption_attempts = r.counter(
            "kai_total_preemption_attempts", "Victim evictions attempted"
        )
        self.fair_share = {
            "gpu": r.gauge("kai_queue_fair_share_gpu", "Fair share of GPUs", QUEUE_LABELS),
            "cpu": r.gauge(
                "kai_queue_fair_share_cpu_cores", "Fair share of CPU cores", QUEUE_LABELS
            ),
            "memory": r.gauge(
                "kai_queue_fair_share_memory_gb", "Fair share of memory (GB)", QUEUE_LABELS
            ),
        }
        self.usage = {
            "gpu": r.gauge(
                "kai_queue_gpu_usage",
                "Normalised historical GPU usage of the queue (time-based fairshare)",
                QUEUE_LABELS,
            ),
            "cpu": r.gauge(
                "kai_queue_cpu_usage", "Normalised historical CPU usage of the queue", QUEUE_LABELS
            ),
            "memory": r.gauge(
                "kai_queue_memory_usage",
                "Normalised historical memory usage of the queue",
                QUEUE_LABELS,
            ),
        }
        self.allocated = {
            "gpu": r.gauge("kai_queue_allocated_gpus", "GPUs allocated to the queue", QUEUE_LABELS),
            "cpu": r.gauge(
                "kai_queue_allocated_cpu_cores", "CPU cores allocated to the queue", QUEUE_LABELS
            ),
            "memory": r.gauge(
                "kai_queue_allocated_memory_bytes",
                "Memory (bytes) allocated to the queue",
                QUEUE_LABELS,
            ),
        }
        self.quota = {
            "gpu": r.gauge("kai_queue_deserved_gpus", "Deserved (quota) GPUs", QUEUE_LABELS),
            "cpu": r.gauge("kai_queue_quota_cpu_cores", "Quota of CPU cores", QUEUE_LABELS),
            "memory": r.gauge(
                "kai_queue_quota_memory_bytes", "Quota of memory (bytes)", QUEUE_LABELS
            ),
        }
        self.limit = {
            "gpu": r.gauge(
                "kai_queue_limit_gpus", "GPU limit of the queue (-1: unlimited)", QUEUE_LABELS
            ),
            "cpu": r.gauge(
                "kai_queue_limit_cpu_cores", "CPU limit of the queue (-1: unlimited)", QUEUE_LABELS
            ),
            "memory": r.gauge(
                "kai_queue_limit_memory_bytes",
                "Memory limit of the queue in bytes (-1: unlimited)",
                QUEUE_LABELS,
            ),
        }
        self.capacity = {
            "gpu": r.gauge("kai_cluster_capacity_gpus", "GPUs of the scheduler's nodes"),
            "cpu": r.gauge("kai_cluster_capacity_cpu_cores", "CPU cores of the scheduler's nodes"),
            "memory": r.gauge(
                "kai_cluster_capacity_memory_bytes", "Memory (bytes) of the scheduler's nodes"
            ),
        }
        self.queue_info = r.gauge(
            "kai_queue_info",
            "One series per queue (value 1) carrying its parent and priority",
            (*QUEUE_LABELS, "parent_queue", "priority"),
        )
        self.pending_pods = r.gauge("kai_pending_pods", "Pods waiting to be scheduled")
        self.pending_reasons = r.gauge(
            "kai_pending_podgroups_by_reason",
            "Pending PodGroups in the last cycle, by the reason the scheduler gave first",
            ("reason",),
        )
        self.pending_reasons_total = r.counter(
            "kai_unschedulable_reasons",
            "Unschedulable verdicts written to PodGroups, by reason",
            ("reason",),
        )
        self.cycles = r.counter("kai_scheduling_cycles_total", "Scheduling cycles run")
        self.usage_fetch = r.histogram(
            "kai_usage_query_latency_milliseconds",
            "Time to fetch queue usage for time-based fairshare",
            LATENCY_BUCKETS,
        )
        self.usage_fetch_errors = r.counter(
            "kai_usage_fetch_errors", "Failed usage fetches, by source", ("source",)
        )
        self.usage_age = r.gauge(
            "kai_usage_age_seconds",
            "Age of the queue usage the last cycle used (-1: none yet)",
        )
        self.usage_stale = r.gauge(
            "kai_usage_stale",
            "1 while the last cycle fell back to plain fair share (usage stale or unreachable)",
        )
