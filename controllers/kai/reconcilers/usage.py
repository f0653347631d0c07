"""Historical queue usage for time-based fairshare, behind one interface.

A queue's normalised usage is KAI's ``U = Σ_t 2^(−Δt/T½)·alloc(t) / Σ_t 2^(−Δt/T½)·capacity(t)``
over the window (sliding: the last ``windowSize``; tumbling: since the start of the current
period), sampled every ``resolution``. The core turns it into the over-quota share weight
``max(0, w + k·(w − U))``. Two sources compute it:

- :class:`PrometheusUsage` asks a Prometheus server with KAI's query shape
  (``sum_over_time((alloc * 0.5^((now − time()) / T½))[window:resolution])``, divided by the same
  over the capacity), in a background thread every ``fetchInterval``; cycles read the cache and
  never wait for the network.
- :class:`AccountingUsage` needs no Prometheus: the scheduler records what each queue held in
  every cycle into per-``resolution`` buckets, and keeps the buckets in a ConfigMap so that a
  restart keeps the history.

Both answer :meth:`UsageSource.reading`: usage per queue and resource, or ``None`` with the
reason when the data is missing or older than ``stalenessPeriod`` — the scheduler then divides by
plain fair share and says so (a Queue condition and ``kai_usage_stale``); it never blocks.
"""

from __future__ import annotations

import abc
import json
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai.api.duration import parse_duration

log = logging.getLogger("kai.scheduler.usage")

RESOURCES = ("gpu", "cpu", "memory")

#: The per-queue allocation metrics the scheduler exports (label ``queue_name``), and the
#: cluster capacity it exports; KAI's defaults read ``kube_node_status_capacity`` of
#: kube-state-metrics instead (set ``capacityMetrics`` to use them).
ALLOCATION_METRICS = {
    "gpu": "kai_queue_allocated_gpus",
    "cpu": "kai_queue_allocated_cpu_cores",
    "memory": "kai_queue_allocated_memory_bytes",
}
CAPACITY_METRICS = {
    "gpu": "sum(kai_cluster_capacity_gpus)",
    "cpu": "sum(kai_cluster_capacity_cpu_cores)",
    "memory": "sum(kai_cluster_capacity_memory_bytes)",
}


class UsageConfigError(ValueError):
    """A bad time-based fairshare setting (names the field)."""


_UNITS = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PROM_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")


def parse_window(text: str) -> float:
    """Seconds of a Prometheus duration (``1w``, ``2d12h``) or a Go duration (``1h30m``)."""
    value = text.strip()
    position, total = 0, 0.0
    while position < len(value):
        match = _PROM_DURATION.match(value, position)
        if match is None:
            return parse_duration(value)
        number, unit = float(match.group(1)), match.group(2)
        total += number / 1000.0 if unit == "ms" else number * _UNITS[unit]
        position = match.end()
    if not value:
        raise ValueError("empty duration")
    return total


@dataclass(frozen=True)
class UsageParams:
    """The time-based fairshare knobs (``fairshare`` of the rendered SchedulerPolicy)."""

    window: float = 7 * 86400.0  # seconds
    half_life: float = 0.0  # seconds; 0 = no decay
    window_type: str = "sliding"  # sliding | tumbling
    tumbling_start: float = 0.0  # Unix time of the first tumbling window
    fetch_interval: float = 60.0
    staleness: float = 300.0
    resolution: float = 60.0
    query_timeout: float = 10.0

    @classmethod
    def from_settings(cls, fairshare: Mapping[str, Any]) -> UsageParams:
        def seconds(key: str, default: float) -> float:
            raw = fairshare.get(key)
            if raw is None or raw == "":
                return default
            try:
                return parse_window(str(raw))
            except ValueError as exc:
                raise UsageConfigError(f"fairshare.{key}: {exc}") from None

        window_type = str(fairshare.get("windowType") or "sliding")
        if window_type not in ("sliding", "tumbling"):
            raise UsageConfigError(
                f"fairshare.windowType: {window_type!r} is not supported (sliding or tumbling)"
            )
        params = cls(
            window=seconds("windowSize", 7 * 86400.0),
            half_life=max(0.0, seconds("halfLifePeriod", 0.0)),
            window_type=window_type,
            fetch_interval=seconds("fetchInterval", 60.0),
            staleness=seconds("stalenessPeriod", 300.0),
            resolution=seconds("queryResolution", 60.0),
            query_timeout=seconds("usageQueryTimeout", 10.0),
        )
        start = fairshare.get("tumblingWindowStartTime")
        if start:
            from kai.reconcilers.snapshot_builder import parse_time

            parsed = parse_time(str(start))
            if parsed is None:
                raise UsageConfigError(
                    f"fairshare.tumblingWindowStartTime: {start!r} is not an RFC 3339 time"
                )
            params = _replace(params, tumbling_start=parsed)
        if params.window <= 0:
            raise UsageConfigError("fairshare.windowSize: must be above 0")
        if params.resolution <= 0:
            raise UsageConfigError("fairshare.queryResolution: must be above 0")
        # KAI: the staleness period is at least the fetch interval
        return _replace(params, staleness=max(params.staleness, params.fetch_interval))

    def window_start(self, now: float) -> float:
        """The oldest moment that counts at ``now``."""
        if self.window_type == "tumbling":
            periods = math.floor((now - self.tumbling_start) / self.window)
            return self.tumbling_start + max(0, periods) * self.window
        return now - self.window

    def decay(self, age: float) -> float:
        return 0.5 ** (age / self.half_life) if self.half_life > 0 else 1.0


def _replace(params: UsageParams, **changes: Any) -> UsageParams:
    from dataclasses import replace

    return replace(params, **changes)


@dataclass
class UsageReading:
    """What a cycle gets: ``usage`` (queue -> resource -> normalised usage) when fresh, else
    ``None`` and ``reason`` (why the cycle falls back to plain fair share)."""

    usage: dict[str, dict[str, float]] | None
    age: float | None = None  # seconds since the data was computed
    reason: str = ""


class UsageSource(abc.ABC):
    """The interface the scheduler reads; each source implements :meth:`reading`."""

    name = "none"

    def __init__(self, params: UsageParams | None = None) -> None:
        self.params = params or UsageParams()

    def configure(self, params: UsageParams) -> None:
        """New settings from the scheduler ConfigMap (applied from the next fetch on)."""
        self.params = params

    @abc.abstractmethod
    def reading(self, now: float | None = None) -> UsageReading:
        """The usage a cycle starting at ``now`` divides by (cached, never a network wait)."""

    def record(  # noqa: B027  a hook: only the accounting source keeps what it is given
        self,
        now: float,
        allocated: Mapping[str, Mapping[str, float]],
        capacity: Mapping[str, float],
    ) -> None:
        """What every queue holds after a cycle (only the accounting source keeps it)."""

    def start(self) -> UsageSource:
        return self

    def stop(self) -> None:
        return


# -- Prometheus ------------------------------------------------------------------------------


def _duration_text(seconds: float) -> str:
    whole = max(1, round(seconds))
    return f"{whole}s"


def usage_queries(params: UsageParams, now: float) -> dict[str, tuple[str, str]]:
    """KAI's query shape per resource: (allocation per queue, capacity), evaluated at ``now``."""
    start = params.window_start(now)
    window = _duration_text(now - start)
    step = _duration_text(params.resolution)

    def decayed(expr: str) -> str:
        if params.half_life > 0:
            expr = f"({expr}) * 0.5^(({now:.3f} - time()) / {params.half_life:g})"
        return f"sum_over_time(({expr})[{window}:{step}])"

    return {
        resource: (
            f"sum by (queue_name) ({decayed(ALLOCATION_METRICS[resource])})",
            decayed(CAPACITY_METRICS[resource]),
        )
        for resource in RESOURCES
    }


class PrometheusUsage(UsageSource):
    """Usage from a Prometheus server (``url``: its base URL, e.g. ``http://prometheus:9090``),
    fetched in the background and cached."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        params: UsageParams | None = None,
        *,
        on_fetch: Callable[[float, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(params)
        self.url = url.rstrip("/")
        self.on_fetch = on_fetch  # (seconds, error or "") after every fetch
        self.clock = clock
        self._cache: tuple[float, dict[str, dict[str, float]]] | None = None
        self.last_error = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _query(self, query: str, at: float) -> list[dict[str, Any]]:
        body = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"}).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(request, timeout=self.params.query_timeout) as answer:
            data = json.loads(answer.read())
        if data.get("status") != "success":
            raise RuntimeError(f"query failed: {data.get('error') or data}")
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def fetch(self) -> dict[str, dict[str, float]]:
        """One synchronous fetch (the background thread calls it; tests may too)."""
        now = self.clock()
        usage: dict[str, dict[str, float]] = {}
        for resource, (alloc_q, capacity_q) in usage_queries(self.params, now).items():
            capacity_rows = self._query(capacity_q, now)
            capacity = float(capacity_rows[0]["value"][1]) if capacity_rows else 0.0
            if not capacity > 0:
                continue
            for row in self._query(alloc_q, now):
                queue = row["metric"].get("queue_name")
                if queue:
                    usage.setdefault(queue, {})[resource] = float(row["value"][1]) / capacity
        with self._lock:
            self._cache = (now, usage)
        return usage

    def _fetch_once(self) -> None:
        started = time.perf_counter()
        error = ""
        try:
            self.fetch()
        except (OSError, urllib.error.URLError, ValueError, KeyError, RuntimeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("usage from Prometheus %s: %s", self.url, error)
        self.last_error = error
        if self.on_fetch is not None:
            self.on_fetch(time.perf_counter() - started, error)

    def reading(self, now: float | None = None) -> UsageReading:
        now = self.clock() if now is None else now
        with self._lock:
            cache = self._cache
        if cache is None:
            reason = f"no usage from Prometheus {self.url} yet"
            if self.last_error:
                reason += f" ({self.last_error})"
            return UsageReading(None, None, reason)
        age = max(0.0, now - cache[0])
        if age > self.params.staleness:
            reason = (
                f"usage from Prometheus {self.url} is {age:.0f}s old "
                f"(staleness limit {self.params.staleness:.0f}s)"
            )
            if self.last_error:
                reason += f": {self.last_error}"
            return UsageReading(None, age, reason)
        return UsageReading(cache[1], age)

    def configure(self, params: UsageParams) -> None:
        changed = params != self.params
        super().configure(params)
        if changed:
            self._wake.set()

    def start(self) -> PrometheusUsage:
        self._thread = threading.Thread(target=self._loop, name="usage-prometheus", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._fetch_once()
            self._wake.wait(self.params.fetch_interval)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.params.query_timeout + 5)
            self._thread = None


# -- built-in accounting ---------------------------------------------------------------------


@dataclass
class _Bucket:
    start: float
    allocated: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> res -> x·s
    capacity: dict[str, float] = field(default_factory=dict)  # res -> capacity·s


class AccountingUsage(UsageSource):
    """The scheduler's own accounting: allocation × time per queue, in buckets of ``resolution``
    seconds (at most 2,000 buckets: a long window gets coarser buckets), decayed by the
    half-life at read time. ``store``: where the buckets persist (load/save a JSON-able dict),
    e.g. :class:`ConfigMapStore`."""

    name = "accounting"
    MAX_BUCKETS = 2000

    def __init__(
        self,
        params: UsageParams | None = None,
        store: Any = None,
        *,
        save_every: float = 30.0,
    ) -> None:
        super().__init__(params)
        self.store = store
        self.save_every = save_every
        self.buckets: list[_Bucket] = []
        self._last: float | None = None
        self._last_save = 0.0
        self._lock = threading.Lock()
        if store is not None:
            try:
                self._load(store.load())
            except Exception as exc:  # no history is better than no scheduler
                log.warning("cannot read the usage history: %s; starting afresh", exc)

    @property
    def bucket_seconds(self) -> float:
        return max(self.params.resolution, self.params.window / self.MAX_BUCKETS)

    def record(
        self,
        now: float,
        allocated: Mapping[str, Mapping[str, float]],
        capacity: Mapping[str, float],
    ) -> None:
        with self._lock:
            last, self._last = self._last, now
            if last is None or now <= last:
                return
            # what was held since the previous record (gaps longer than a fetch interval,
            # e.g. a restart, are not filled: nobody knows what ran then)
            span = min(now - last, max(self.params.fetch_interval, 2 * self.bucket_seconds))
            size = self.bucket_seconds
            start = math.floor(now / size) * size
            if not self.buckets or self.buckets[-1].start != start:
                self.buckets.append(_Bucket(start))
            bucket = self.buckets[-1]
            for queue, figures in allocated.items():
                row = bucket.allocated.setdefault(queue, {})
                for resource, value in figures.items():
                    row[resource] = row.get(resource, 0.0) + value * span
            for resource, value in capacity.items():
                bucket.capacity[resource] = bucket.capacity.get(resource, 0.0) + value * span
            oldest = now - self.params.window - size
            while self.buckets and self.buckets[0].start < oldest:
                self.buckets.pop(0)
            due = now - self._last_save >= self.save_every
        if due and self.store is not None:
            self.save(now)

    def reading(self, now: float | None = None) -> UsageReading:
        now = time.time() if now is None else now
        params = self.params
        begin = params.window_start(now)
        totals: dict[str, dict[str, float]] = {}
        capacity: dict[str, float] = {}
        with self._lock:
            buckets = list(self.buckets)
            last = self._last
        for bucket in buckets:
            if bucket.start + self.bucket_seconds <= begin:
                continue
            weight = params.decay(now - bucket.start)
            for queue, figures in bucket.allocated.items():
                row = totals.setdefault(queue, {})
                for resource, value in figures.items():
                    row[resource] = row.get(resource, 0.0) + weight * value
            for resource, value in bucket.capacity.items():
                capacity[resource] = capacity.get(resource, 0.0) + weight * value
        usage = {
            queue: {r: v / capacity[r] for r, v in row.items() if capacity.get(r, 0.0) > 0}
            for queue, row in totals.items()
        }
        return UsageReading(usage, None if last is None else max(0.0, now - last))

    def _load(self, data: Mapping[str, Any] | None) -> None:
        if not data:
            return
        try:
            self.buckets = [
                _Bucket(float(b["start"]), dict(b["allocated"]), dict(b["capacity"]))
                for b in data.get("buckets", [])
            ]
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("usage history unreadable (%s); starting afresh", exc)
            self.buckets = []

    def dump(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": 1,
                "bucketSeconds": self.bucket_seconds,
                "buckets": [
                    {"start": b.start, "allocated": b.allocated, "capacity": b.capacity}
                    for b in self.buckets
                ],
            }

    def save(self, now: float | None = None) -> None:
        self._last_save = time.time() if now is None else now
        if self.store is not None:
            try:
                self.store.save(self.dump())
            except Exception as exc:  # the history is kept in memory; the next save retries
                log.warning("cannot save the usage history: %s", exc)

    def stop(self) -> None:
        self.save()


class ConfigMapStore:
    """Keeps the accounting history in ConfigMap ``namespace/name`` (key ``usage.json``)."""

    KEY = "usage.json"

    def __init__(self, kube: Any, namespace: str, name: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name

    def load(self) -> dict[str, Any] | None:
        from kai.kube.client import ApiError
        from kai.kube.resources import CONFIGMAPS

        try:
            cm = self.kube.get(CONFIGMAPS, self.name, self.namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        text = ((cm or {}).get("data") or {}).get(self.KEY)
        if not text:
            return None
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    def save(self, data: dict[str, Any]) -> None:
        from kai.kube.client import ApiError
        from kai.kube.resources import CONFIGMAPS

        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "kai-scheduler"},
            },
            "data": {self.KEY: json.dumps(data, separators=(",", ":"), sort_keys=True)},
        }
        try:
            self.kube.replace(CONFIGMAPS, body)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.kube.create(CONFIGMAPS, body, self.namespace)


def usage_params_from_configmap(cm: Mapping[str, Any] | None) -> UsageParams:
    """The default node pool's ``fairshare`` settings from the rendered scheduler ConfigMap
    (the ``scheduler-policy.*.yaml`` document with ``nodePool: ""``); KAI's defaults without
    one. Raises :class:`UsageConfigError` naming the key and field."""
    import yaml

    data = (cm or {}).get("data") or {}
    for key in sorted(data):
        if not key.startswith("scheduler-policy."):
            continue
        try:
            doc = yaml.safe_load(data[key])
        except yaml.YAMLError as exc:
            raise UsageConfigError(f"data[{key}]: not YAML: {exc}") from exc
        if not isinstance(doc, dict) or (doc.get("nodePool") or "") != "":
            continue
        fairshare = doc.get("fairshare") or {}
        if not isinstance(fairshare, dict):
            raise UsageConfigError(f"data[{key}] fairshare: expected a mapping")
        try:
            return UsageParams.from_settings(fairshare)
        except UsageConfigError as exc:
            raise UsageConfigError(f"data[{key}] {exc}") from None
    return UsageParams()


def make_usage_source(
    kind: str,
    *,
    prometheus_url: str = "",
    kube: Any = None,
    history_config_map: str = "",
    on_fetch: Callable[[float, str], None] | None = None,
) -> UsageSource | None:
    """``none`` | ``prometheus`` (needs ``prometheus_url``) | ``accounting`` (kept in
    ``history_config_map`` = ``namespace/name`` when given)."""
    if kind == "none":
        return None
    if kind == "prometheus":
        if not prometheus_url:
            raise UsageConfigError("--usage-source prometheus needs --prometheus-url")
        return PrometheusUsage(prometheus_url, on_fetch=on_fetch)
    if kind == "accounting":
        store = None
        if history_config_map:
            namespace, _, name = history_config_map.partition("/")
            if not namespace or not name:
                raise UsageConfigError(
                    f"--usage-history {history_config_map!r}: expected NAMESPACE/NAME"
                )
            store = ConfigMapStore(kube, namespace, name)
        return AccountingUsage(store=store)
    raise UsageConfigError(f"--usage-source {kind!r}: expected none, prometheus or accounting")
