"""`kai up` as a new user meets it: the sample MIG pods run on the MIG nodes (the bundled
SharingPolicy allows MIG in the default pool), every object it creates reads through the
official Python client's typed models, and deleting a Job removes its pods and frees their
GPUs (the Job controller drops its tracking finalizer)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from live_helpers import eventually

from kai.kube.resources import JOBS, PODS

KAI = [sys.executable, "-m", "kai.cli"]


def _start(kubeconfig: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            *KAI,
            "up",
            "--nodes",
            "3",
            "--mig-nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--period",
            "0.3",
            "--metrics-port",
            "-1",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("kubeconfig: "):
            return proc
        assert time.monotonic() < deadline, "".join(lines)
    proc.kill()
    raise AssertionError("kai up ended before printing its kubeconfig:\n" + "".join(lines))


def _pods(kube: Any, ns: str | None = None) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list(PODS, ns)["items"]
        if p["metadata"]["namespace"] != "kai-resource-reservation"
    ]


def test_kai_up_mig_sample_official_client_and_job_deletion(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    from kubernetes import client, config

    from kai.kube.client import Kube

    kubeconfig = tmp_path / "up.kubeconfig"
    proc = _start(kubeconfig)
    try:
        kube = Kube.from_kubeconfig(str(kubeconfig))

        def mig_running() -> bool:
            mig = [
                p for p in _pods(kube, "online-eval") if p["metadata"]["name"].startswith("mig-")
            ]
            return len(mig) == 4 and all(p["status"].get("phase") == "Running" for p in mig)

        eventually(mig_running, timeout=45)
        on = {
            p["spec"]["nodeName"]
            for p in _pods(kube, "online-eval")
            if "mig-" in p["metadata"]["name"]
        }
        assert on == {"mig-node-00"}

        # every kind kai up creates, through the official client's typed API (models with
        # required fields: a missing one raises ValueError while deserialising)
        api = config.new_client_from_config(str(kubeconfig))
        try:
            core = client.CoreV1Api(api)
            nodes = core.list_node().items
            assert len(nodes) == 3
            for node in nodes:
                info = node.status.node_info
                assert info.boot_id and info.machine_id and info.system_uuid
                assert info.kernel_version and info.os_image and info.kube_proxy_version == ""
            pods = core.list_pod_for_all_namespaces().items
            assert any(p.status.phase == "Running" for p in pods)
            running = [p for p in pods if p.status.phase == "Running"]
            assert all(c.image_id for p in running for c in p.status.container_statuses)
            core.list_namespace()
            # core/v1 Events, as KAI's recorders write them (no eventTime: the events.k8s.io/v1
            # view of such Events has a null eventTime on a real server too)
            core.list_event_for_all_namespaces()
            core.list_config_map_for_all_namespaces()
            core.list_service_account_for_all_namespaces()
            client.BatchV1Api(api).list_job_for_all_namespaces()
            client.CoordinationV1Api(api).list_lease_for_all_namespaces()
            client.SchedulingV1Api(api).list_priority_class()
        finally:
            api.close()

        # deleting a Job deletes its pods (no tracking finalizer left behind)
        ns, job = "fm-pretraining", "pretraining-gang-0"
        assert kube.get(JOBS, job, ns)

        def of_job() -> list[dict[str, Any]]:
            return [
                p
                for p in _pods(kube, ns)
                if (p["metadata"].get("labels") or {}).get("job-name") == job
            ]

        eventually(lambda: len(of_job()) == 4, timeout=30)
        kube.delete(JOBS, job, ns, propagation_policy="Background")
        eventually(lambda: not of_job(), timeout=45)
        kube.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
