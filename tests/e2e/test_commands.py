"""The live commands as a user runs them: `kai up` headless plus kubectl, `kai scheduler` /
`kai binder` / `kai podgrouper` against a running API server, metrics, clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from kai.kube.resources import PODS, QUEUES
from kai.sim.workloads import ensure_namespace, pod_manifest

KAI = [sys.executable, "-m", "kai.cli"]


def _find_kubectl() -> str | None:
    from helpers.tools import find_kubectl

    return find_kubectl()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


DASHBOARD = (
    Path(__file__).resolve().parents[2] / "charts/kai-scheduler/dashboards/kai-scheduler.json"
)
#: dashboard metrics that must have samples (not just a declared family) in a running kai up
MUST_MOVE = {
    "kai_queue_allocated_gpus",
    "kai_queue_fair_share_gpu",
    "kai_queue_deserved_gpus",
    "kai_queue_gpu_usage",
    "kai_cluster_capacity_gpus",
    "kai_podgroups_scheduled_by_action_total",
    "kai_podgroups_acted_on_by_action_total",
    "kai_action_latency_milliseconds_bucket",
    "kai_cycle_phase_latency_milliseconds_bucket",
    "kai_e2e_scheduling_duration_milliseconds_bucket",
    "kai_scheduling_cycles_total",
    "process_resident_memory_bytes",
}


def _dashboard_metrics_missing(url: str) -> list[str]:
    """Metrics a dashboard panel queries that the scrape of ``url`` lacks."""
    import json
    import re
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    samples = {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    dashboard = json.loads(DASHBOARD.read_text())
    wanted: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            wanted |= set(re.findall(r"\b((?:kai|process)_[a-z0-9_]+)\b", target["expr"]))
    assert wanted >= MUST_MOVE
    missing = []
    for name in sorted(wanted):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        declared = name in families or base in families
        if name not in samples and (name in MUST_MOVE or not declared):
            missing.append(name)
    return missing


def test_kai_up_headless_then_kubectl(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "up.kubeconfig"
    proc = subprocess.Popen(
        [
            *KAI,
            "up",
            "--nodes",
            "4",
            "--gpus-per-node",
            "8",
            "--period",
            "0.3",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("kubeconfig: "):
                break
            assert time.monotonic() < deadline, "".join(lines)
        assert lines and lines[-1].strip() == f"kubeconfig: {kubeconfig}", "".join(lines)
        # the metrics URL is printed next to the kubeconfig (--metrics-port 0: a free port)
        metrics_url = next(
            line.split(" ", 1)[1].strip() for line in lines if line.startswith("metrics: ")
        )
        assert metrics_url.startswith("http://127.0.0.1:") and metrics_url.endswith("/metrics")
        from kai.kube.client import Kube

        kube = Kube.from_kubeconfig(str(kubeconfig))
        eventually(
            lambda: (
                (
                    pods := [
                        p
                        for p in kube.list(PODS)["items"]
                        if p["metadata"]["namespace"] != "kai-resource-reservation"
                    ]
                )
                and sum(p["status"].get("phase") == "Running" for p in pods) >= 20
            ),
            timeout=30,
        )
        queues = {q["metadata"]["name"] for q in kube.list(QUEUES)["items"]}
        assert {"research", "nlp", "pretraining", "notebooks"} <= queues
        # the admission webhook runs by default, registered with the embedded API server: every
        # fractional-GPU pod of the sample mix got KAI's GPU-sharing environment
        assert any("kai up: admission webhook" in line for line in lines), "".join(lines)
        fractional = [
            p
            for p in kube.list(PODS)["items"]
            if "gpu-fraction" in (p["metadata"].get("annotations") or {})
        ]
        assert fractional
        for p in fractional:
            env = {e["name"] for c in p["spec"]["containers"] for e in c.get("env") or []}
            assert "NVIDIA_VISIBLE_DEVICES" in env, p["metadata"]["name"]
        eventually(lambda: _dashboard_metrics_missing(metrics_url) == [], timeout=30)
        kubectl = _find_kubectl()
        if kubectl is not None:
            out = subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), "get", "pods", "-A", "-o", "wide"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            assert "Running" in out.stdout and "gpu-node-0" in out.stdout
            nodes = subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert nodes.stdout.count("Ready") == 4
        kube.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "kai up: stopped" in rest


@pytest.mark.parametrize("command", ["scheduler", "binder", "podgrouper"])
def test_live_command_without_cluster_says_so(command: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [*KAI, command, "--kubeconfig", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": ""},
    )
    assert out.returncode == 2
    assert "missing: no such file" in out.stderr
    assert "Traceback" not in out.stderr


def test_separate_processes_schedule_and_serve_metrics(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=4)
    cluster.start_system(components=("nodes",))  # simulated nodes/kubelet in-process
    port = _free_port()
    common = ["--kubeconfig", cluster.kubeconfig, "--log-level", "WARNING"]
    procs = [
        subprocess.Popen(
            [*KAI, "scheduler", *common, "--period", "0.2", "--metrics-port", str(port)]
        ),
        subprocess.Popen([*KAI, "binder", *common]),
        subprocess.Popen([*KAI, "podgrouper", *common]),
    ]
    try:
        for i in range(4):
            kube.create(PODS, pod_manifest(f"p-{i}", "work", "team", gpus=1))
        eventually(
            lambda: all(
                p["status"].get("phase") == "Running" for p in kube.list(PODS, "work")["items"]
            ),
            timeout=60,
            interval=0.2,
        )

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        text = eventually(lambda: "kai_queue_fair_share_gpu{" in scrape() and scrape())
        assert "kai_e2e_scheduling_latency_milliseconds" in text
        assert 'queue_name="team"' in text
        assert json.dumps("kai_task_scheduling_latency_milliseconds_bucket")[1:-1] in text
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in procs]
    assert codes == [0, 0, 0]


def test_kai_up_json_logs_and_ctrl_c(tmp_path: Path) -> None:
    """With --log-format json every line on standard output is a JSON object (the kubeconfig
    line carries the path); Ctrl-C stops everything and exits 130."""
    kubeconfig = tmp_path / "up.kubeconfig"
    proc = subprocess.Popen(
        [
            *KAI,
            "up",
            "--nodes",
            "2",
            "--no-workloads",
            "--log-format",
            "json",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[dict[str, object]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(json.loads(line))
            if "kubeconfig" in lines[-1]:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines += [json.loads(line) for line in rest.splitlines()]
    assert lines[0]["message"].startswith("starting: API server https://")  # type: ignore[union-attr]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(line.get("kubeconfig") == str(kubeconfig) for line in lines)
    assert lines[-1]["message"] == "stopped"
    assert "Traceback" not in err
