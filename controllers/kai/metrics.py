"""Prometheus metrics with KAI's names, in the text exposition format (version 0.0.4).

A small registry (gauges, counters, histograms with labels) and an HTTP server for ``/metrics``;
no third-party dependency. Names and labels are KAI's (prefix ``kai_``).
"""

from __future__ import annotations

import abc
import bisect
import math
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class _Metric(abc.ABC):
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)
        self._lock = threading.Lock()

    def _label_text(self, values: LabelValues, extra: str = "") -> str:
        parts = [f'{k}="{_escape(v)}"' for k, v in zip(self.labels, values, strict=True)]
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}" if parts else ""

    def _key(self, labels: dict[str, str] | None) -> LabelValues:
        labels = labels or {}
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labels)}")
        return tuple(str(labels[k]) for k in self.labels)

    @abc.abstractmethod
    def expose(self) -> list[str]:
        """The metric's sample lines in the Prometheus text format."""


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self.values: dict[LabelValues, float] = {}

    def set(self, value: float, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            self.values[self._key(labels)] = float(value)

    def replace(self, series: dict[LabelValues, float]) -> None:
        """Set the whole series at once (series not given disappear, e.g. deleted queues)."""
        with self._lock:
            self.values = dict(series)

    def expose(self) -> list[str]:
        with self._lock:
            items = sorted(self.values.items())
        return [f"{self.name}{self._label_text(k)} {_fmt(v)}" for k, v in items]


class Counter(Gauge):
    kind = "counter"

    def inc(self, amount: float = 1.0, labels: dict[str, str] | None = None) -> None:
        key = self._key(labels)
        with self._lock:
            self.values[key] = self.values.get(key, 0.0) + amount


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        buckets: Sequence[float],
        labels: Sequence[str] = (),
    ) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = tuple(sorted(buckets))
        self.series: dict[LabelValues, list[float]] = {}  # bucket counts..., sum, count

    def observe(self, value: float, labels: dict[str, str] | None = None) -> None:
        key = self._key(labels)
        with self._lock:
            data = self.series.get(key)
            if data is None:
                data = self.series[key] = [0.0] * (len(self.buckets) + 2)
            index = bisect.bisect_left(self.buckets, value)
            if index < len(self.buckets):
                data[index] += 1
            data[-2] += value
            data[-1] += 1

    def expose(self) -> list[str]:
        lines: list[str] = []
        with self._lock:
            items = sorted((k, list(v)) for k, v in self.series.items())
        for key, data in items:
            running = 0.0
            for bound, count in zip(self.buckets, data, strict=False):
                running += count
                le = f'le="{_fmt(bound)}"'
                lines.append(f"{self.name}_bucket{self._label_text(key, le)} {_fmt(running)}")
            inf = 'le="+Inf"'
            lines.append(f"{self.name}_bucket{self._label_text(key, inf)} {_fmt(data[-1])}")
            lines.append(f"{self.name}_sum{self._label_text(key)} {_fmt(data[-2])}")
            lines.append(f"{self.name}_count{self._label_text(key)} {_fmt(data[-1])}")
        return lines


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


class Registry:
    def __init__(self) -> None:
        self.metrics: dict[str, _Metric] = {}

    def _add(self, metric: Any) -> Any:
        if metric.name in self.metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self.metrics[metric.name] = metric
        return metric

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, help_text, labels))  # type: ignore[no-any-return]

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, help_text, labels))  # type: ignore[no-any-return]

    def histogram(
        self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        return self._add(Histogram(name, help_text, buckets, labels))  # type: ignore[no-any-return]

    def exposition(self) -> str:
        lines: list[str] = []
        for metric in self.metrics.values():
            lines.append(f"# HELP {metric.name} {metric.help}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            lines.extend(metric.expose())
        return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves ``/metrics`` of one or more registries on ``port``, with the probes: ``/healthz``
    and ``/livez`` answer ``ok`` while the process serves; ``/readyz`` answers ``ok`` once
    ``ready()`` is true (e.g. every informer has listed), else 503 ``not ready``."""

    def __init__(
        self,
        registries: Sequence[Registry],
        port: int,
        host: str = "0.0.0.0",
        ready: Callable[[], bool] | None = None,
    ) -> None:
        registries = list(registries)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body = "".join(r.exposition() for r in registries).encode()
                    ctype = "text/plain; version=0.0.4; charset=utf-8"
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

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


LATENCY_BUCKETS = exponential_buckets(5, 2, 10)  # KAI: 5 ms x 2^k, 10 buckets


class SchedulerMetrics:
    """The scheduler's metrics (KAI names, ``kai_`` prefix)."""

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
            "PodGroups that got pods allocated, by action",
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
        queue_labels = ("queue_name", "queue_metadata_name", "queue_display_name")
        self.fair_share = {
            "gpu": r.gauge("kai_queue_fair_share_gpu", "Fair share of GPUs", queue_labels),
            "cpu": r.gauge(
                "kai_queue_fair_share_cpu_cores", "Fair share of CPU cores", queue_labels
            ),
            "memory": r.gauge(
                "kai_queue_fair_share_memory_gb", "Fair share of memory (GB)", queue_labels
            ),
        }
        self.usage = {
            "gpu": r.gauge("kai_queue_gpu_usage", "GPUs allocated to the queue", queue_labels),
            "cpu": r.gauge("kai_queue_cpu_usage", "CPU cores allocated to the queue", queue_labels),
            "memory": r.gauge(
                "kai_queue_memory_usage", "Memory (GB) allocated to the queue", queue_labels
            ),
        }
        self.pending_pods = r.gauge("kai_pending_pods", "Pods waiting to be scheduled")
        self.cycles = r.counter("kai_scheduling_cycles_total", "Scheduling cycles run")
