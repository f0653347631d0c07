"""Usage sources (accounting, persistence, staleness), the metrics endpoint and the chart's
PrometheusRule (checked by promtool when it is installed)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai.metrics import MetricsServer, Registry, SchedulerMetrics
from kai.reconcilers.usage import (
    AccountingUsage,
    PrometheusUsage,
    UsageConfigError,
    UsageParams,
    parse_window,
    usage_params_from_configmap,
    usage_queries,
)

ROOT = Path(__file__).resolve().parents[3]


class MemoryStore:
    def __init__(self) -> None:
        self.data: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        return self.data

    def save(self, data: dict[str, Any]) -> None:
        self.data = yaml.safe_load(yaml.safe_dump(data))  # a real copy, as a ConfigMap keeps it


def test_accounting_usage_is_decayed_allocation_over_capacity_and_survives_a_restart() -> None:
    params = UsageParams(window=100, half_life=10, resolution=1, fetch_interval=1)
    store = MemoryStore()
    acc = AccountingUsage(params, store, save_every=0)
    acc.record(0, {}, {})
    for t in range(1, 21):  # a holds 8 of 16 GPUs for 10 s, then b holds 8 for 10 s
        holder = "a" if t <= 10 else "b"
        acc.record(float(t), {holder: {"gpu": 8.0}}, {"gpu": 16.0})
    usage = acc.reading(20.0).usage
    assert usage is not None
    # b's GPU-seconds are more recent: less decayed than a's
    assert usage["b"]["gpu"] > usage["a"]["gpu"] > 0
    assert usage["a"]["gpu"] + usage["b"]["gpu"] == pytest.approx(0.5)
    # no decay: equal GPU-seconds are equal usage
    flat = AccountingUsage(UsageParams(window=100, resolution=1, fetch_interval=1))
    flat.buckets = acc.buckets
    flat_usage = flat.reading(20.0).usage
    assert flat_usage is not None
    assert flat_usage["a"]["gpu"] == pytest.approx(flat_usage["b"]["gpu"]) == pytest.approx(0.25)
    # a restart: the history comes back from the store
    again = AccountingUsage(params, store)
    restored = again.reading(20.0).usage
    assert restored is not None
    assert {q: pytest.approx(v) for q, v in usage.items()} == restored
    # the sliding window forgets: 200 s later nothing counts
    assert again.reading(220.0).usage == {}


def test_prometheus_source_is_stale_without_data_and_never_blocks() -> None:
    src = PrometheusUsage("http://127.0.0.1:9", UsageParams(query_timeout=0.5))
    reading = src.reading()
    assert reading.usage is None and "no usage from Prometheus" in reading.reason
    src._fetch_once()  # nothing listens on port 9: an error, remembered, no exception
    assert "URLError" in src.last_error or "Connection" in src.last_error
    src._cache = (0.0, {"a": {"gpu": 0.5}})
    old = src.reading(now=10_000.0)
    assert old.usage is None and "staleness limit" in old.reason
    fresh = src.reading(now=10.0)
    assert fresh.usage == {"a": {"gpu": 0.5}}


def test_kai_query_shape_and_settings() -> None:
    params = UsageParams(window=3600, half_life=600, resolution=60)
    alloc, capacity = usage_queries(params, 1000.0)["gpu"]
    assert alloc == (
        "sum by (queue_name) (sum_over_time(((kai_queue_allocated_gpus) * "
        "0.5^((1000.000 - time()) / 600))[3600s:60s]))"
    )
    assert capacity.startswith("sum_over_time(((sum(kai_cluster_capacity_gpus))")
    no_decay = usage_queries(UsageParams(window=60, resolution=1), 5.0)["gpu"][0]
    assert "0.5^" not in no_decay
    assert parse_window("1w") == 7 * 86400 and parse_window("1h30m") == 5400
    tumbling = UsageParams(window=100, window_type="tumbling", tumbling_start=50)
    assert tumbling.window_start(260) == 250
    cm = {
        "data": {
            "scheduler-policy.default.yaml": "name: d\nnodePool: ''\nfairshare:\n"
            "  windowSize: 2h\n  halfLifePeriod: 30m\n  fetchInterval: 10s\n"
        }
    }
    p = usage_params_from_configmap(cm)
    assert (p.window, p.half_life, p.fetch_interval, p.staleness) == (7200, 1800, 10, 300)
    bad = {"data": {"scheduler-policy.default.yaml": "nodePool: ''\nfairshare: {windowSize: x}"}}
    with pytest.raises(UsageConfigError, match=r"scheduler-policy.default.yaml\] fairshare"):
        usage_params_from_configmap(bad)


def test_metrics_endpoint_serves_text_and_openmetrics_with_process_metrics() -> None:
    metrics = SchedulerMetrics()
    other = Registry()
    other.counter("kai_test_events", "test", ("kind",)).inc(labels={"kind": "x"})
    metrics.scheduled.inc(2, {"action": "allocate"})
    server = MetricsServer([metrics.registry, other], 0, host="127.0.0.1").start()
    try:
        with urllib.request.urlopen(server.url(), timeout=5) as answer:
            text = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert 'kai_podgroups_scheduled_by_action_total{action="allocate"} 2.0' in text
        assert 'kai_test_events_total{kind="x"} 1.0' in text
        assert "process_resident_memory_bytes" in text and "python_gc_objects_collected" in text
        request = urllib.request.Request(
            server.url(), headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            om = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
        assert om.rstrip().endswith("# EOF")
        assert "# TYPE kai_podgroups_scheduled_by_action counter" in om
    finally:
        server.stop()
    gauge = metrics.fair_share["gpu"]
    gauge.replace({("a", "a", ""): 3.0})
    gauge.replace({("b", "b", ""): 2.0})
    assert (
        'queue_name="a"' not in metrics.registry.exposition().split("kai_queue_fair_share_gpu")[2]
    )
    with pytest.raises(ValueError, match="labels"):
        metrics.scheduled.inc(labels={"wrong": "x"})


def test_chart_prometheus_rules_pass_promtool(helm: str, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    out = subprocess.run(
        [
            helm,
            "template",
            "kai",
            str(ROOT / "charts/kai-scheduler"),
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/deploy/prometheusrules.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rule = yaml.safe_load(out.stdout)
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert names == {"KaiSchedulerCycleTooSlow", "KaiQueueStarvedBelowQuota", "KaiWebhookErrors"}
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
