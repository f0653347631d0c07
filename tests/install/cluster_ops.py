"""What the install tests do on a real API server: kubectl/helm runs, ServiceAccount
kubeconfigs with bound tokens, the kai components as separate processes, GPU pods."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KAI = [sys.executable, "-m", "kai.cli"]
GPU = "nvidia.com/gpu"


def run(
    args: list[str], check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and out.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
        )
    return out


def token_kubeconfig(admin: Path, kubectl: str, sa: str, namespace: str, path: Path) -> Path:
    """A kubeconfig as a pod of ServiceAccount ``sa`` would have: the admin kubeconfig's server
    and CA, and a bound token from ``kubectl create token`` (no client certificate)."""
    token = run(
        [
            kubectl,
            "--kubeconfig",
            str(admin),
            "create",
            "token",
            sa,
            "-n",
            namespace,
            "--duration",
            "2h",
        ]
    ).stdout.strip()
    config = yaml.safe_load(admin.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if ca is None and cluster.get("certificate-authority"):
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "real",
                        "cluster": {"server": cluster["server"], "certificate-authority-data": ca},
                    }
                ],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": sa, "context": {"cluster": "real", "user": sa}}],
                "current-context": sa,
            }
        )
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def readyz(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2
            ) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0


@dataclass
class Components:
    running: dict[str, Component] = field(default_factory=dict)

    def logs(self) -> str:
        return "\n".join(f"== {n}\n{c.text()}" for n, c in self.running.items())


@contextmanager
def components(
    kubeconfigs: dict[str, Path], namespace: str, scheduler_name: str, workdir: Path
) -> Iterator[Components]:
    """``kai scheduler|binder|podgrouper`` as separate processes, each with its own
    kubeconfig; stopped with SIGTERM (and waited for) on exit."""
    extra = {"scheduler": ["--period", "0.5", "--status-period", "1"]}
    started = Components()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        for component, kubeconfig in kubeconfigs.items():
            log = workdir / f"{component}.log"
            port = free_port()
            args = [
                *KAI,
                component,
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                namespace,
                "--scheduler-name",
                scheduler_name,
                "--metrics-port",
                str(port),
                "--log-level",
                "INFO",
                *extra.get(component, []),
            ]
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    args,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            started.running[component] = Component(component, proc, log, port)
        yield started
    finally:
        for c in started.running.values():
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in started.running.values():
            try:
                c.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait(timeout=10)


def gpu_pod(name: str, namespace: str, scheduler_name: str, gpus: int = 1) -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": resources,
                }
            ],
        },
    }


def gpus_per_node(pods: list[Any]) -> dict[str, int]:
    """GPUs requested by the bound, non-terminal pods, per node (client model objects)."""
    used: dict[str, int] = {}
    for pod in pods:
        if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            amount = int((c.resources.requests or {}).get(GPU, "0") or 0)
            used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + amount
    return used


def wait(check: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s: {what}")


@contextmanager
def reservation_kubelet(core: Any) -> Iterator[None]:
    """Plays the reservation image on the GPU reservation pods (there is no kubelet): publishes
    a GPU UUID in ``run.ai/reserve_for_gpu_index``, as the image does through NVML."""
    import threading

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            for pod in core.list_namespaced_pod("kai-resource-reservation").items:
                annotations = pod.metadata.annotations or {}
                if pod.spec.node_name and "run.ai/reserve_for_gpu_index" not in annotations:
                    uuid = f"GPU-{pod.metadata.uid}"
                    core.patch_namespaced_pod(
                        pod.metadata.name,
                        "kai-resource-reservation",
                        {"metadata": {"annotations": {"run.ai/reserve_for_gpu_index": uuid}}},
                    )

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


@contextmanager
def local_webhook(kubeconfig: Path, kubectl: str, namespace: str, workdir: Path) -> Iterator[Path]:
    """``kai webhook`` as a process here, registered at its own URL (``--self-register``: no
    Service routes to a process on this machine), replacing the configurations an install
    made; yields its log. On exit it stops, and its configurations go with it."""
    port = free_port()
    log = workdir / "webhook.log"
    args = [
        *KAI,
        "webhook",
        "--kubeconfig",
        str(kubeconfig),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(free_port()),
        "--self-register",
        f"https://127.0.0.1:{port}",
        "--namespace",
        namespace,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:

        def registered() -> bool:
            got = run(
                [
                    kubectl,
                    "--kubeconfig",
                    str(kubeconfig),
                    "get",
                    "validatingwebhookconfiguration,mutatingwebhookconfiguration",
                    "-o",
                    "yaml",
                ],
                check=False,
            ).stdout
            return got.count(f"127.0.0.1:{port}") >= 4 and "caBundle" in got

        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        wait(registered, 60, f"kai webhook registered at its URL:\n{log.read_text()}")
        yield log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
