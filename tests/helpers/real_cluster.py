"""A real Kubernetes v1.36 control plane for the tests (kube-apiserver, etcd and
kube-controller-manager with every controller but node-lifecycle; no kubelet, no scheduler).

The scripts live outside the repository, in ``../shared/real-k8s`` next to the checkout (override
with ``$KAI_REAL_K8S``); where they are absent, :func:`real_k8s_dir` returns None and the
``real_cluster`` fixture skips, so the suite passes on any machine. Each pytest worker starts its
own cluster (free ports, its own state folder) once per session and stops it at the end.

There is no kubelet: :func:`add_fake_nodes` creates Nodes and plays the kubelet and the
node-lifecycle controller for them (Ready condition, capacity, the ``not-ready`` taint lifted).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def real_k8s_dir() -> Path | None:
    """The folder with ``up.sh``/``down.sh``, or None where this machine has none."""
    configured = os.environ.get("KAI_REAL_K8S")
    folder = Path(configured) if configured else ROOT.parent / "shared" / "real-k8s"
    return folder if (folder / "up.sh").is_file() else None


@dataclass
class RealCluster:
    state: Path
    scripts: Path

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def start(self, timeout: float = 300) -> RealCluster:
        run = subprocess.run(
            ["bash", str(self.scripts / "up.sh"), str(self.state)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if run.returncode != 0 or not self.kubeconfig.exists():
            raise RuntimeError(
                f"real-k8s up.sh failed (exit {run.returncode}):\n"
                f"{run.stdout}\n{run.stderr[-4000:]}"
            )
        return self

    def stop(self, wipe: bool = True) -> None:
        args = ["bash", str(self.scripts / "down.sh"), str(self.state)]
        subprocess.run([*args, "--wipe"] if wipe else args, capture_output=True, timeout=120)


def start_with_retry(make: Callable[[], RealCluster], attempts: int = 2) -> RealCluster:
    """Start a cluster; on a failed start (a port taken between the pick and the bind, a
    component that died under load), stop it and try once more in a fresh folder with fresh
    ports. The last failure is raised with the control plane's log lines."""
    failure: RuntimeError | None = None
    for _ in range(attempts):
        cluster = make()
        try:
            return cluster.start()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            cluster.stop(wipe=True)
            failure = RuntimeError(str(exc))
    assert failure is not None
    raise failure


def start_real_cluster(state: Path) -> RealCluster | None:
    scripts = real_k8s_dir()
    if scripts is None:
        return None
    return RealCluster(state, scripts).start()


def node_manifest(
    name: str,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def add_fake_nodes(
    api: Any, names: list[str], gpus: int = 8, labels: dict[str, str] | None = None
) -> None:
    """Create Ready nodes as a kubelet and the node-lifecycle controller would leave them.

    ``api`` is a ``kubernetes.client.ApiClient``. A real API server taints a new node
    ``node.kubernetes.io/not-ready:NoSchedule``; the taint is lifted here once the node is Ready.
    """
    from datetime import UTC, datetime

    from kubernetes import client

    core = client.CoreV1Api(api)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in names:
        manifest = node_manifest(name, gpus=gpus, labels=labels)
        try:
            core.create_node(manifest)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        status = dict(manifest["status"])
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status (played by the tests)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
        core.patch_node_status(name, {"status": status})
        node = core.read_node(name)
        taints = [t for t in (node.spec.taints or []) if t.key != NOT_READY_TAINT]
        if len(taints) != len(node.spec.taints or []):
            core.patch_node(
                name,
                {"spec": {"taints": [api.sanitize_for_serialization(t) for t in taints] or None}},
            )
