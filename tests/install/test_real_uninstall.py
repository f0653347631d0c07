"""Uninstalling kai keeps the data, on a real Kubernetes v1.36 API server (``helpers.real_cluster``;
skipped where this machine has none).

One cluster of this module's own, fresh: Helm 4 installs the chart the first time (the default
queues, the webhook configurations), then, with ``kai webhook`` serving the admissions and
``kai controller`` turning documents into Queues, ``examples/gitops`` and a workload (a PodGroup
and a pod) are applied. Then each documented install path is run through upgrade, uninstall and
reinstall — Helm 4, Helm 3, kustomize (CRDs a step of their own) — and after every step every
Queue, PodGroup, pod and policy document is still there with its original uid (never deleted and
recreated), and so are the CRDs.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from helpers.real_cluster import RealCluster, real_k8s_dir, start_with_retry

from .cluster_ops import KAI, ROOT, local_webhook, run, wait

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NS = "kai-scheduler"
TEAM = "team-data"
CHART = str(ROOT / "charts" / "kai-scheduler")
POLICY_KINDS = ("queuetrees", "topologypolicies", "sharingpolicies", "schedulerpolicies")
#: the documented kustomize uninstall (docs/install.md): everything of kai but the CRDs (not in
#: the root kustomization) and the default queues (seed data: yours once created)
KUSTOMIZE_UNINSTALL = ("delete", "-k", ".", "-l", "app.kubernetes.io/component!=queues")


class Cluster:
    def __init__(self, cluster: RealCluster, kubectl: str, workdir: Path) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.workdir = workdir
        self.api = config.new_client_from_config(str(cluster.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def k(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([self.kubectl, "--kubeconfig", str(self.cluster.kubeconfig), *args], check)

    def helm(self, helm: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run([helm, "--kubeconfig", str(self.cluster.kubeconfig), *args], timeout=300)

    def data(self) -> dict[tuple[str, str, str], str]:
        """Every Queue, PodGroup, policy document and workload pod: (kind, namespace, name) ->
        uid."""
        found: dict[tuple[str, str, str], str] = {}
        lists = [("Queue", "scheduling.run.ai", "v2", "queues")]
        lists += [("PodGroup", "scheduling.run.ai", "v2alpha2", "podgroups")]
        lists += [(kind, "gitops.kai.scheduler", "v1alpha1", kind) for kind in POLICY_KINDS]
        for kind, group, version, plural in lists:
            items = self.custom.list_cluster_custom_object(group, version, plural)["items"]
            for item in items:
                md = item["metadata"]
                found[(kind, md.get("namespace", ""), md["name"])] = md["uid"]
        for pod in self.core.list_namespaced_pod(TEAM).items:
            found[("Pod", TEAM, pod.metadata.name)] = pod.metadata.uid
        return found

    def crds(self) -> set[str]:
        out = self.k("get", "crd", "-o", "name").stdout.split()
        return {n.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for n in out}


@contextmanager
def _process(name: str, args: list[str], workdir: Path) -> Iterator[Path]:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if real_k8s_dir() is None:
        pytest.skip("no real Kubernetes control plane on this machine (helpers.real_cluster)")
    workdir = tmp_path_factory.mktemp("uninstall")
    scripts = real_k8s_dir()
    assert scripts is not None
    attempt = iter(range(1, 10))
    real = start_with_retry(lambda: RealCluster(workdir / f"k8s-{next(attempt)}", scripts))
    try:
        c = Cluster(real, kubectl, workdir)
        yield c
        c.api.close()
    finally:
        real.stop(wipe=True)


def _workload() -> list[dict[str, Any]]:
    podgroup = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "train-0", "namespace": TEAM},
        "spec": {"minMember": 1, "queue": "default-queue"},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0-worker",
            "namespace": TEAM,
            "labels": {"kai.scheduler/queue": "default-queue"},
            "annotations": {"pod-group-name": "train-0"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    return [podgroup, pod]


def _apply_data(c: Cluster) -> dict[tuple[str, str, str], str]:
    """``examples/gitops`` and a workload, admitted by a running ``kai webhook`` (registered
    at its own URL: no Service routes to a process here) while ``kai controller`` makes the
    Queues; both stop afterwards and the webhook's own registration goes, so the
    install paths below meet the cluster as a real one whose webhook pod is not running."""
    kubeconfig = str(c.cluster.kubeconfig)
    controller = [
        *KAI,
        "controller",
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        NS,
        "--no-leader-election",
        "--resync",
        "2",
    ]
    with (
        local_webhook(c.cluster.kubeconfig, c.kubectl, NS, c.workdir),
        _process("controller", controller, c.workdir) as controller_log,
    ):
        c.k("apply", "-k", str(ROOT / "examples" / "gitops"))
        c.k("create", "namespace", TEAM)
        for obj in _workload():
            path = c.workdir / f"{obj['kind']}.yaml"
            path.write_text(yaml.safe_dump(obj))
            c.k("create", "-f", str(path))
        rendered = yaml.safe_load_all(
            run([*KAI, "render", str(ROOT / "examples" / "gitops")]).stdout
        )
        expected = {d["metadata"]["name"] for d in rendered if d and d["kind"] == "Queue"}

        def queues_made() -> bool:
            names = {k[2] for k in c.data() if k[0] == "Queue"}
            return expected <= names

        wait(queues_made, 90, f"the controller's Queues:\n{controller_log.read_text()}")
    # a self-registered webhook removes its configurations when it stops; make sure
    c.k(
        "delete",
        "validatingwebhookconfiguration,mutatingwebhookconfiguration",
        "kai-webhook",
        "--ignore-not-found",
    )
    data = c.data()
    assert {k[0] for k in data} >= {"Queue", "PodGroup", "Pod", *POLICY_KINDS}, data
    return data


def test_every_documented_uninstall_keeps_the_data(cluster: Cluster, helm: str, helm3: str) -> None:
    c = cluster
    # Helm 4, a fresh cluster: the first install succeeds (the chart looked up a Queue before
    # the CRD it had just created was served)
    c.helm(helm, "install", "kai-scheduler", CHART, "-n", NS, "--create-namespace")
    crds = c.crds()
    assert "queues.scheduling.run.ai" in crds and "queuetrees.gitops.kai.scheduler" in crds
    assert {k[2] for k in c.data() if k[0] == "Queue"} == {"default-parent-queue", "default-queue"}
    assert c.k("get", "validatingwebhookconfiguration", "kai-webhook", "-o", "name").stdout
    data = _apply_data(c)

    def unchanged(step: str) -> None:
        now = c.data()
        lost = sorted(set(data) - set(now))
        recreated = sorted(k for k in data if k in now and now[k] != data[k])
        assert not lost and not recreated, f"after {step}: lost {lost}, recreated {recreated}"
        assert c.crds() == crds, f"after {step}: CRDs {sorted(crds - c.crds())} gone"

    for tool, name in ((helm, "Helm 4"), (helm3, "Helm 3")):
        if name == "Helm 3":
            c.helm(tool, "install", "kai-scheduler", CHART, "-n", NS, "--create-namespace")
            unchanged(f"{name} install over the kept data")
        c.helm(tool, "upgrade", "kai-scheduler", CHART, "-n", NS, "--reuse-values")
        unchanged(f"{name} upgrade")
        c.helm(tool, "uninstall", "kai-scheduler", "-n", NS)
        unchanged(f"{name} uninstall")
        leftovers = c.k(
            "get",
            "deploy,clusterrole,validatingwebhookconfiguration,priorityclass",
            "-A",
            "-o",
            "name",
            "-l",
            "app.kubernetes.io/part-of=kai-scheduler",
        ).stdout
        assert leftovers.strip() == "", leftovers
        if name == "Helm 4":
            c.helm(tool, "install", "kai-scheduler", CHART, "-n", NS, "--create-namespace")
            unchanged(f"{name} reinstall")
            c.helm(tool, "uninstall", "kai-scheduler", "-n", NS)

    # kustomize: the CRDs a step of their own, then the root; its uninstall and a reinstall
    for step in ("install", "reinstall"):
        c.k("apply", "--server-side", "-k", "manifests/crds")
        c.k("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        c.k("apply", "--server-side", "-k", ".")
        unchanged(f"kustomize {step}")
        assert c.k("get", "validatingwebhookconfiguration", "kai-webhook", "-o", "name").stdout
        c.k(*KUSTOMIZE_UNINSTALL, "--timeout=120s")
        unchanged(f"kustomize uninstall after the {step}")
        gone = c.k("get", "validatingwebhookconfiguration,deploy", "-A", "-o", "name").stdout
        assert "kai-webhook" not in gone and "kai-scheduler" not in gone, gone
