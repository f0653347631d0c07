"""Time-based fairshare from a real Prometheus scraping the scheduler's /metrics (issue 17).

Prometheus (the Debian package's ``prometheus`` binary) scrapes the live system's metrics every
second; the scheduler reads usage back with KAI's query shape. The acceptance: usage shifts the
over-quota division towards the queue that used less; Prometheus stopped -> scheduling goes on
with plain fair share and the ``TimeBasedFairshare`` Queue condition says so.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from kai.kube.resources import CONFIGMAPS, PODS, QUEUES
from kai.metrics import MetricsServer
from kai.reconcilers.usage import PrometheusUsage, UsageParams
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.workloads import ensure_namespace, pod_manifest

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed")

POLICY = """\
name: default
nodePool: ""
actions: [allocate, reclaim]
fairshare:
  kValue: 1.0
  windowSize: 2m
  queryResolution: 1s
  fetchInterval: 1s
  stalenessPeriod: 3s
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_prometheus(
    tmp_path: Path, port: int, target_port: int
) -> tuple[subprocess.Popen[bytes], str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "- job_name: kai-scheduler\n"
        f"  static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    assert PROMETHEUS is not None
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    eventually(ready, timeout=30)
    return proc, url


def _running(cluster: Cluster, prefix: str) -> int:
    pods = cluster.kube.list(PODS, "work")["items"]
    return sum(
        1
        for p in pods
        if p["metadata"]["name"].startswith(prefix)
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


def _condition(cluster: Cluster, name: str) -> dict[str, Any] | None:
    q = cluster.kube.get(QUEUES, name)
    for c in (q.get("status") or {}).get("conditions") or []:
        if c.get("type") == "TimeBasedFairshare":
            return dict(c)
    return None


def test_usage_from_prometheus_shifts_the_division_and_a_stop_falls_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    kube = cluster.kube
    ensure_namespace(kube, "kai-scheduler")
    kube.create(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kai-scheduler-config", "namespace": "kai-scheduler"},
            "data": {"scheduler-policy.default.yaml": POLICY},
        },
    )
    kube.create(QUEUES, queue("qa", gpu_quota=0))
    kube.create(QUEUES, queue("qb", gpu_quota=0))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 1, gpus=8)
    # the scheduler asks a Prometheus that is not up yet: plain fair share until it is
    prometheus_port = _free_port()
    system = cluster.start_system(
        usage_source="prometheus", prometheus_url=f"http://127.0.0.1:{prometheus_port}"
    )
    server = MetricsServer([system.metrics.registry], 0, host="127.0.0.1").start()
    proc, url = _start_prometheus(tmp_path, prometheus_port, server.port)
    try:
        scheduler = system.scheduler
        assert scheduler is not None
        for i in range(8):
            kube.create(PODS, pod_manifest(f"a-{i}", "work", "qa", gpus=1))
        eventually(lambda: _running(cluster, "a-") == 8, timeout=30)

        # qa's history builds up in Prometheus and comes back through the scheduler's query
        def qa_used() -> bool:
            reading = scheduler.usage_reading
            return bool(
                reading is not None
                and reading.usage is not None
                and reading.usage.get("qa", {}).get("gpu", 0.0) > 0.5
            )

        eventually(qa_used, timeout=60)
        # the same query, asked directly, agrees: qa used (nearly) the whole cluster
        direct = PrometheusUsage(url, UsageParams(window=120, resolution=1)).fetch()
        assert direct["qa"]["gpu"] > 0.5 and direct.get("qb", {}).get("gpu", 0.0) == 0.0
        assert _condition(cluster, "qa") is not None

        # qb arrives with as much work: plain fair share would split 4/4; qa's usage moves
        # the over-quota share to qb (KAI's formula: weight max(0, w + k (w - U)))
        for i in range(8):
            kube.create(PODS, pod_manifest(f"b-{i}", "work", "qb", gpus=1))

        def shifted() -> bool:
            last = scheduler.last_result
            if last is None or "qb" not in last.queues:
                return False
            return last.queues["qb"].fair_share.get("gpu", 0.0) > 4.5

        eventually(shifted, timeout=30)
        eventually(lambda: _running(cluster, "b-") > 4, timeout=60)
        cond = _condition(cluster, "qb")
        assert cond is not None and cond["status"] == "True", cond
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    # Prometheus is gone: after the staleness period the cycle falls back to plain fair share,
    # says so, and keeps scheduling
    def fell_back() -> bool:
        cond = _condition(cluster, "qa")
        return cond is not None and cond["status"] == "False"

    eventually(fell_back, timeout=30)
    cond = _condition(cluster, "qa")
    assert cond is not None and "plain fair share" in cond["message"], cond
    assert system.metrics.usage_stale.value() == 1
    assert system.metrics.usage_fetch_errors.value({"source": "prometheus"}) >= 1
    create_nodes(kube, 1, NodeShape(gpus=8), prefix="late-node")
    kube.create(PODS, pod_manifest("late-0", "work", "qa", gpus=1))
    eventually(lambda: _running(cluster, "late-") == 1, timeout=30)
    server.stop()
