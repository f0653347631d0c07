"""kai installed on a real Kubernetes v1.36 API server (``helpers.real_cluster``; skipped
where this machine has none): ``kubectl apply --server-side -k .``, then the scheduler, binder
and pod-grouper run as their own ServiceAccounts (bound tokens, as in a pod) and bind 100 GPU
pods onto fake nodes with no 403 and no over-committed node; a role with one verb less makes its
component fail visibly; the chart installs beside it in a second namespace under another release
name, upgrades, and uninstalls leaving nothing but the CRDs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from helpers.real_cluster import RealCluster, add_fake_nodes, real_k8s_dir, start_with_retry

from .cluster_ops import (
    ROOT,
    components,
    gpu_pod,
    gpus_per_node,
    local_webhook,
    reservation_kubelet,
    run,
    token_kubeconfig,
    wait,
)

pytestmark = pytest.mark.integration

NS = "kai-scheduler"
COMPONENTS = ("scheduler", "binder", "podgrouper")
GPUS_PER_NODE = 8


class Installed:
    def __init__(self, cluster: RealCluster, kubectl: str, workdir: Path) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.workdir = workdir
        self.api = config.new_client_from_config(str(cluster.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def k(self, *args: str, check: bool = True) -> Any:
        return run([self.kubectl, "--kubeconfig", str(self.cluster.kubeconfig), *args], check)

    def kubeconfigs(self, namespace: str) -> dict[str, Path]:
        return {
            c: token_kubeconfig(
                self.cluster.kubeconfig,
                self.kubectl,
                f"kai-{c}",
                namespace,
                self.workdir / f"{namespace}-{c}.kubeconfig",
            )
            for c in COMPONENTS
        }

    def namespace(self, name: str) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise


@pytest.fixture(scope="module")
def installed(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A real cluster of this module's own (the install is cluster-wide) with kai applied by
    kustomize as docs/install.md says: the CRDs first (``-k manifests/crds``), once they are
    Established the root (``-k .``: the components, the webhook configurations, the default
    Queues). No pod runs here (no kubelet), so ``kai webhook`` serves the admissions from this
    process's machine, registered at its own URL, for the whole module."""
    if real_k8s_dir() is None:
        pytest.skip("no real Kubernetes control plane on this machine (helpers.real_cluster)")
    workdir = tmp_path_factory.mktemp("install")
    scripts = real_k8s_dir()
    assert scripts is not None
    attempt = iter(range(1, 10))
    cluster = start_with_retry(lambda: RealCluster(workdir / f"k8s-{next(attempt)}", scripts))
    try:
        inst = Installed(cluster, kubectl, workdir)
        inst.k("apply", "--server-side", "-k", "manifests/crds")
        inst.k("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        inst.k("apply", "--server-side", "-k", ".")
        assert inst.k("get", "validatingwebhookconfiguration", "kai-webhook", "-o", "name").stdout
        with local_webhook(cluster.kubeconfig, kubectl, NS, workdir):
            yield inst
        inst.api.close()
    finally:
        cluster.stop(wipe=True)


def _bind_pods(
    inst: Installed, namespace: str, scheduler: str, nodes: list[str], count: int
) -> None:
    """Fake nodes, then ``count`` one-GPU pods; waits until every pod is bound."""
    add_fake_nodes(inst.api, nodes, gpus=GPUS_PER_NODE)
    inst.namespace(namespace)
    for i in range(count):
        inst.core.create_namespaced_pod(namespace, gpu_pod(f"gpu-{i:03d}", namespace, scheduler))

    def all_bound() -> bool:
        pods = inst.core.list_namespaced_pod(namespace).items
        return len(pods) == count and all(p.spec.node_name for p in pods)

    wait(all_bound, 120, f"{count} pods of {scheduler} bound")


def _assert_no_overcommit(inst: Installed) -> None:
    used = gpus_per_node(inst.core.list_pod_for_all_namespaces().items)
    capacity = {
        n.metadata.name: int((n.status.allocatable or {}).get("nvidia.com/gpu", "0"))
        for n in inst.core.list_node().items
    }
    over = {n: (u, capacity.get(n, 0)) for n, u in used.items() if u > capacity.get(n, 0)}
    assert not over, f"over-committed nodes (used, capacity): {over}"


def _assert_no_403(logs: str) -> None:
    bad = [line for line in logs.splitlines() if " 403 " in line or "Forbidden" in line]
    assert not bad, "\n".join(bad[:20])


def test_kustomize_install_components_as_service_accounts(installed: Installed) -> None:
    inst = installed
    # what the kustomize base created, as the chart renders it
    deployments = client.AppsV1Api(inst.api).list_namespaced_deployment(NS).items
    assert {d.metadata.name for d in deployments} >= {f"kai-{c}" for c in COMPONENTS}
    for d in deployments:
        spec = d.spec.template.spec
        assert spec.service_account_name == d.metadata.name
        assert spec.security_context.run_as_non_root is True
        container = spec.containers[0]
        assert container.security_context.read_only_root_filesystem is True
        assert container.security_context.capabilities.drop == ["ALL"]
        assert container.liveness_probe.http_get.path == "/healthz"
        assert container.readiness_probe.http_get.path == "/readyz"
    classes = client.SchedulingV1Api(inst.api).list_priority_class().items
    assert {c.metadata.name: c.value for c in classes if c.value in (50, 75, 100, 125)} == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }
    queues = inst.custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")["items"]
    assert {q["metadata"]["name"]: q["spec"].get("parentQueue") for q in queues} == {
        "default-parent-queue": None,
        "default-queue": "default-parent-queue",
    }

    kubeconfigs = inst.kubeconfigs(NS)
    nodes = [f"kust-node-{i:02d}" for i in range(13)]  # 104 GPUs for 100 one-GPU pods
    with components(kubeconfigs, NS, "kai-scheduler", inst.workdir / "kust") as running:
        wait(
            lambda: all(c.readyz() == 200 for c in running.running.values()),
            120,
            "every component ready",
        )
        _bind_pods(inst, "team-kust", "kai-scheduler", nodes, 100)
        # the pod-grouper's PodGroups are in default-queue (no queue label on the pods)
        pgs = inst.custom.list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", "team-kust", "podgroups"
        )["items"]
        assert len(pgs) == 100 and {pg["spec"]["queue"] for pg in pgs} == {"default-queue"}
        # GPU sharing: the binder's reservation pod (its Role in kai-resource-reservation) and
        # the GPU-sharing ConfigMaps in the workload's namespace
        with reservation_kubelet(inst.core):
            for i in range(2):
                pod = gpu_pod(f"half-{i}", "team-kust", "kai-scheduler", gpus=0)
                pod["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
                inst.core.create_namespaced_pod("team-kust", pod)
            wait(
                lambda: all(
                    inst.core.read_namespaced_pod(f"half-{i}", "team-kust").spec.node_name
                    for i in range(2)
                ),
                90,
                "the fractional pods bound",
            )
        reservations = inst.core.list_namespaced_pod("kai-resource-reservation").items
        assert len(reservations) == 1, [r.metadata.name for r in reservations]
        shared = inst.core.list_namespaced_config_map("team-kust").items
        assert any(cm.data and "NVIDIA_VISIBLE_DEVICES" in str(cm.data) for cm in shared)
        logs = running.logs()
    _assert_no_overcommit(inst)
    _assert_no_403(logs)


def _without_verb(inst: Installed, role: str, resource: str, verb: str) -> Any:
    """Remove ``verb`` on ``resource`` from ClusterRole ``role``; returns the original rules."""
    current = inst.rbac.read_cluster_role(role)
    original = inst.api.sanitize_for_serialization(current.rules)
    rules = []
    for rule in original:
        if resource in rule.get("resources", []) and verb in rule["verbs"]:
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
            if not rule["verbs"]:
                continue  # a rule needs a verb: the rule goes
        rules.append(rule)
    assert rules != original, f"{role} has no {verb} on {resource}"
    inst.rbac.patch_cluster_role(role, {"rules": rules})
    return original


def test_one_verb_less_fails_visibly(installed: Installed) -> None:
    """The scheduler without ``create`` on pods/binding (a whole-GPU pod is bound directly, bind
    mode ``direct``): a 403 in its log, a ``FailedBinding`` Event with the API server's message,
    the pod not bound; with the verb back, it binds. The scheduler without ``list`` on nodes: a
    403 in its log and /readyz answers 503."""
    inst = installed
    role = f"{NS}:scheduler"
    original = _without_verb(inst, role, "pods/binding", "create")
    add_fake_nodes(inst.api, ["verb-node-00"], gpus=GPUS_PER_NODE)
    inst.namespace("team-verb")
    try:
        with components(
            inst.kubeconfigs(NS), NS, "kai-scheduler", inst.workdir / "verb"
        ) as running:
            inst.core.create_namespaced_pod(
                "team-verb", gpu_pod("lonely", "team-verb", "kai-scheduler")
            )

            def failed_binding() -> Any:
                events = inst.core.list_namespaced_event("team-verb").items
                return [
                    e
                    for e in events
                    if e.reason == "FailedBinding" and e.involved_object.name == "lonely"
                ]

            failed = wait(failed_binding, 120, "a FailedBinding Event")
            assert "forbidden" in (failed[0].message or "").lower(), failed[0].message
            assert (
                " 403 " in running.running["scheduler"].text()
                or "Forbidden" in running.running["scheduler"].text()
            ), running.running["scheduler"].text()
            assert inst.core.read_namespaced_pod("lonely", "team-verb").spec.node_name is None
            inst.rbac.patch_cluster_role(role, {"rules": original})
            wait(
                lambda: inst.core.read_namespaced_pod("lonely", "team-verb").spec.node_name,
                120,
                "the pod bound once the verb is back",
            )
    finally:
        inst.rbac.patch_cluster_role(role, {"rules": original})

    role = f"{NS}:scheduler"
    original = _without_verb(inst, role, "nodes", "list")
    try:
        only = {"scheduler": inst.kubeconfigs(NS)["scheduler"]}
        with components(only, NS, "kai-scheduler", inst.workdir / "verb2") as running:
            scheduler = running.running["scheduler"]
            wait(
                lambda: "nodes" in scheduler.text() and " 403 " in scheduler.text(),
                30,
                "a 403 on nodes in the scheduler's log",
            )
            assert scheduler.readyz() == 503
    finally:
        inst.rbac.patch_cluster_role(role, {"rules": original})


def _other_installs_reservation_counts(inst: Installed) -> None:
    """A GPU reservation pod of the other install (schedulerName kai-scheduler) holds a whole
    GPU for kai2-scheduler: of 8 pods pinned to an 8-GPU node holding one, 7 bind."""
    add_fake_nodes(inst.api, ["shared-node"], gpus=GPUS_PER_NODE)
    reservation = gpu_pod("gpu-reservation-other", "kai-resource-reservation", "kai-scheduler")
    reservation["spec"]["nodeName"] = "shared-node"
    reservation["metadata"]["labels"] = {"app": "kai-resource-reservation"}
    inst.core.create_namespaced_pod("kai-resource-reservation", reservation)
    for i in range(GPUS_PER_NODE):
        pod = gpu_pod(f"pinned-{i}", "team-shared", "kai2-scheduler")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "shared-node"}
        inst.namespace("team-shared")
        inst.core.create_namespaced_pod("team-shared", pod)

    def bound() -> int:
        return sum(
            1 for p in inst.core.list_namespaced_pod("team-shared").items if p.spec.node_name
        )

    wait(lambda: bound() == GPUS_PER_NODE - 1, 120, "7 pinned pods bound")
    time.sleep(3)  # several scheduling cycles (period 0.5 s)
    assert bound() == GPUS_PER_NODE - 1
    inst.core.delete_namespaced_pod("gpu-reservation-other", "kai-resource-reservation")


def test_helm_install_beside_kustomize_upgrade_uninstall(installed: Installed, helm: str) -> None:
    """A second install from the chart (release kai2 in namespace kai2, scheduler name
    kai2-scheduler) does not clash with the kustomize one; its components bind 100 pods as its
    ServiceAccounts; helm upgrade applies a change; helm uninstall leaves only the CRDs."""
    inst = installed
    kc = ["--kubeconfig", str(inst.cluster.kubeconfig)]
    chart = str(ROOT / "charts" / "kai-scheduler")
    install = run(
        [
            helm,
            *kc,
            "install",
            "kai2",
            chart,
            "-n",
            "kai2",
            "--create-namespace",
            "--set",
            "schedulerName=kai2-scheduler",
            # one webhook per cluster: the kustomize install has it
            "--set",
            "webhook.enabled=false",
            "--wait=false",
        ]
    )
    assert "kai2-scheduler" in install.stdout  # NOTES.txt
    kubeconfigs = inst.kubeconfigs("kai2")
    nodes = [f"helm-node-{i:02d}" for i in range(13)]
    with components(kubeconfigs, "kai2", "kai2-scheduler", inst.workdir / "helm") as running:
        wait(
            lambda: all(c.readyz() == 200 for c in running.running.values()),
            120,
            "every component ready",
        )
        _bind_pods(inst, "team-helm", "kai2-scheduler", nodes, 100)
        _other_installs_reservation_counts(inst)
        logs = running.logs()
    _assert_no_overcommit(inst)
    _assert_no_403(logs)

    run(
        [
            helm,
            *kc,
            "upgrade",
            "kai2",
            chart,
            "-n",
            "kai2",
            "--reuse-values",
            "--set",
            "scheduler.period=2",
        ]
    )
    args = client.AppsV1Api(inst.api).read_namespaced_deployment("kai-scheduler", "kai2")
    assert "--period=2" in args.spec.template.spec.containers[0].args

    run([helm, *kc, "uninstall", "kai2", "-n", "kai2", "--wait"])
    # the namespace stays (Helm never deletes what --create-namespace made) with only what
    # the cluster itself puts into every namespace
    cluster_own = {
        "serviceaccount/default",
        "configmap/kube-root-ca.crt",
        "configmap/openshift-service-ca.crt",
    }
    leftovers = inst.k(
        "get", "all,sa,role,rolebinding,pdb,cm,secret", "-n", "kai2", "-o", "name"
    ).stdout
    assert set(leftovers.split()) <= cluster_own, leftovers
    reservation = inst.k("get", "role,rolebinding", "-n", "kai-resource-reservation", "-o", "name")
    assert "kai2" not in reservation.stdout, reservation.stdout
    cluster_wide = inst.k(
        "get",
        "clusterrole,clusterrolebinding,priorityclass,queue,ns",
        "-o",
        "name",
        "-l",
        "app.kubernetes.io/instance=kai2",
    ).stdout
    assert cluster_wide.strip() == "", cluster_wide
    # the kustomize install is untouched; the CRDs stay (Helm never deletes crds/)
    inst.rbac.read_cluster_role(f"{NS}:scheduler")
    assert inst.k("get", "crd", "queues.scheduling.run.ai", "-o", "name").stdout.strip()
    assert inst.k("get", "priorityclass", "train", "-o", "name").stdout.strip()
