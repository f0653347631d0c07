"""The whole system end to end: pods go Pending -> Bound -> Running on simulated nodes."""

from __future__ import annotations

from typing import Any

from e2e_helpers import Cluster, make_nodes, queue
from live_helpers import eventually

from kai.kube.client import ApiError
from kai.kube.resources import BIND_REQUESTS, CONFIGMAPS, EVENTS, PODGROUPS, PODS, QUEUES
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job


def _pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return cluster.kube.list(PODS, ns)["items"]


def _events(cluster: Cluster, ns: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.kube.list(EVENTS, ns)["items"] if e["reason"] == reason]


def test_whole_and_fractional_gpus_and_gangs(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=4)
    system = cluster.start_system()
    for i in range(3):
        kube.create(PODS, pod_manifest(f"whole-{i}", "work", "team", gpus=1))
    for i in range(2):
        kube.create(PODS, pod_manifest(f"half-{i}", "work", "team", fraction=0.5))
    submit_job(kube, "gang", "work", "team", pods=2, gpus_per_pod=2, min_member=2)
    eventually(
        lambda: (
            all(p["status"].get("phase") == "Running" for p in _pods(cluster, "work"))
            and len(_pods(cluster, "work")) == 7
        ),
        timeout=20,
    )
    pods = {p["metadata"]["name"]: p for p in _pods(cluster, "work")}
    # the two halves share one device: one reservation pod, one GPU group label
    groups = {pods[f"half-{i}"]["metadata"]["labels"]["runai-gpu-group"] for i in range(2)}
    assert len(groups) == 1
    assert {pods[f"half-{i}"]["spec"]["nodeName"] for i in range(2)} == {
        pods["half-0"]["spec"]["nodeName"]
    }
    reservations = _pods(cluster, "kai-resource-reservation")
    assert len(reservations) == 1
    assert reservations[0]["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"].startswith(
        "GPU-"
    )
    assert pods["half-0"]["metadata"]["annotations"]["received-resource-type"] == "Fraction"
    assert pods["whole-0"]["metadata"]["annotations"]["received-resource-type"] == "Regular"
    cms = {c["metadata"]["name"]: c for c in kube.list(CONFIGMAPS, "work")["items"]}
    cm = next(c for n, c in cms.items() if n.startswith("half-0-") and n.endswith("-evar"))
    assert cm["data"]["GPU_PORTION"] == "0.50"
    assert (
        cm["data"]["NVIDIA_VISIBLE_DEVICES"]
        == (reservations[0]["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"])
    )
    # 3 + 0.5*2 + 2*2 = 8 GPUs: the cluster is full. The fractional pods went through the
    # binder (their BindRequests say Succeeded); the whole-GPU pods were bound by the scheduler
    # directly (bind mode direct): no BindRequest
    eventually(
        lambda: (
            (brs := kube.list(BIND_REQUESTS, "work")["items"])
            and sorted(b["spec"]["podName"] for b in brs) == ["half-0", "half-1"]
            and all((b.get("status") or {}).get("phase") == "Succeeded" for b in brs)
        )
    )
    eventually(lambda: len(_events(cluster, "work", "Scheduled")) == 7)
    # queue status and PodGroup resourcesStatus arrive
    eventually(
        lambda: (
            kube.get(QUEUES, "team").get("status", {}).get("allocated", {}).get("nvidia.com/gpu")
            == "8"
        )
    )
    gang_pg = next(
        p
        for p in kube.list(PODGROUPS, "work")["items"]
        if p["metadata"]["name"].startswith("pg-gang-")
    )
    eventually(
        lambda: (
            kube.get(PODGROUPS, gang_pg["metadata"]["name"], "work")
            .get("status", {})
            .get("resourcesStatus", {})
            .get("allocated", {})
            .get("nvidia.com/gpu")
            == "4"
        )
    )
    assert system.scheduler is not None and system.scheduler.cycles > 0


def test_unschedulable_gang_waits_whole_and_says_why(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 2, gpus=2)
    cluster.start_system()
    submit_job(kube, "big", "work", "team", pods=3, gpus_per_pod=2, min_member=3)
    pg = eventually(
        lambda: next(
            (
                p
                for p in kube.list(PODGROUPS, "work")["items"]
                if (p.get("status") or {}).get("schedulingConditions")
            ),
            None,
        ),
        timeout=20,
    )
    condition = pg["status"]["schedulingConditions"][0]
    assert condition["type"] == "UnschedulableOnNodePool"
    assert condition["reasons"] and condition["reasons"][0]["message"]
    eventually(lambda: _events(cluster, "work", "Unschedulable"))
    assert not any(p["spec"].get("nodeName") for p in _pods(cluster, "work"))

    def scheduled_false() -> bool:
        for pod in _pods(cluster, "work"):
            conds = {c["type"]: c for c in pod["status"].get("conditions") or []}
            cond = conds.get("PodScheduled")
            if not cond or cond["status"] != "False" or cond["reason"] != "Unschedulable":
                return False
        return True

    eventually(scheduled_false)
    assert not kube.list(BIND_REQUESTS, "work")["items"]


def test_unknown_queue_and_malformed_pod_do_not_stop_the_rest(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 1, gpus=4)
    cluster.start_system()
    kube.create(PODS, pod_manifest("lost", "work", "no-such-queue", gpus=1))
    bad = pod_manifest("bad", "work", "team", gpus=1)
    bad["metadata"]["annotations"] = {"gpu-fraction": "lots"}
    kube.create(PODS, bad)
    kube.create(PODS, pod_manifest("good", "work", "team", gpus=1))
    eventually(lambda: kube.get(PODS, "good", "work")["status"].get("phase") == "Running")
    pg = eventually(
        lambda: next(
            (
                p
                for p in kube.list(PODGROUPS, "work")["items"]
                if p["spec"]["queue"] == "no-such-queue"
                and (p.get("status") or {}).get("schedulingConditions")
            ),
            None,
        )
    )
    assert pg["status"]["schedulingConditions"][0]["reasons"][0]["reason"] == "QueueDoesNotExist"
    event = eventually(
        lambda: next(
            (
                e
                for e in _events(cluster, "work", "InvalidObject")
                if e["involvedObject"]["name"] == "bad"
            ),
            None,
        )
    )
    assert "gpu-fraction" in event["message"]
    assert not kube.get(PODS, "bad", "work")["spec"].get("nodeName")
    assert not kube.get(PODS, "lost", "work")["spec"].get("nodeName")


def test_restart_loses_nothing_and_never_binds_twice(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 4, gpus=8)
    bindings: dict[str, list[str]] = {}

    def watch_binds(event: Any) -> None:
        if event.tkey == ("", "pods") and event.type == "MODIFIED":
            before = (event.prev or {}).get("spec", {}).get("nodeName")
            after = event.obj.get("spec", {}).get("nodeName")
            if after != before:
                bindings.setdefault(event.obj["metadata"]["name"], []).append(after or "")

    cluster.server.core.store.listeners.append(watch_binds)
    first = cluster.start_system()
    for i in range(20):
        kube.create(PODS, pod_manifest(f"p-{i:02d}", "work", "team", gpus=1))
    eventually(lambda: sum(1 for p in _pods(cluster, "work") if p["spec"].get("nodeName")) >= 5)
    first.stop()  # a crash-like stop in the middle of the work (leases released)
    for i in range(20, 30):
        kube.create(PODS, pod_manifest(f"p-{i:02d}", "work", "team", gpus=1))
    cluster.start_system()
    eventually(lambda: all(p["spec"].get("nodeName") for p in _pods(cluster, "work")), timeout=20)
    assert len(bindings) == 30
    assert all(len(nodes) == 1 for nodes in bindings.values()), bindings
    for pod in _pods(cluster, "work"):
        try:
            br = kube.get(BIND_REQUESTS, pod["metadata"]["name"], "work")
        except ApiError:
            continue
        assert br["spec"]["selectedNode"] == pod["spec"]["nodeName"]


def test_priority_preemption_evicts_and_binds_the_preemptor(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team", gpu_quota=2, gpu_limit=-1))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 1, gpus=2)
    system = cluster.start_system()
    for i in range(2):
        kube.create(PODS, pod_manifest(f"low-{i}", "work", "team", gpus=1))
    eventually(
        lambda: (
            all(p["status"].get("phase") == "Running" for p in _pods(cluster, "work"))
            and len(_pods(cluster, "work")) == 2
        )
    )
    kube.create(PODS, pod_manifest("urgent", "work", "team", gpus=2, priority_class="build"))
    eventually(
        lambda: kube.get(PODS, "urgent", "work")["status"].get("phase") == "Running", timeout=30
    )
    eventually(  # the victims were deleted (and their deletion finished by the kubelet)
        lambda: not any(p["metadata"]["name"].startswith("low-") for p in _pods(cluster, "work"))
    )
    evictions = [
        e
        for e in _events(cluster, "work", "Evict")
        if e["involvedObject"]["name"].startswith("low-")
    ]
    assert len(evictions) == 2 and "preempt" in evictions[0]["message"]
    text = system.metrics.registry.exposition()
    assert "kai_pod_group_evicted_pods_total{" in text and 'action="preempt"' in text
    # the terminal view shows the queue and the preemptor
    from pathlib import Path

    from kai.commands.up import View

    def shown() -> bool:  # the view reads the informer caches, which may lag the GET above
        view = View(system).render("http://x", Path("kubeconfig"))
        return "team" in view and "urgent" in view and "Running" in view

    assert eventually(shown, timeout=10)


def test_gitops_rendered_settings_reach_the_live_scheduler(cluster: Cluster) -> None:
    from kai.gitops.compile import compile_documents
    from kai.gitops.validate import validate_paths
    from kai.kube.resources import CONFIGMAPS
    from kai.sim.system import apply_objects, default_gitops_path

    system = cluster.start_system()
    assert system.scheduler is not None
    eventually(lambda: system.scheduler.cycles > 0)
    assert system.scheduler.builder.config.k_value == 1.0  # no ConfigMap yet: KAI defaults
    report = validate_paths([str(default_gitops_path())])
    assert apply_objects(cluster.kube, compile_documents(report.documents)) == []
    eventually(lambda: system.scheduler.builder.config.k_value == 1.5)
    assert system.scheduler.builder.config.queue_depth_per_action["allocate"] == 25
    # a broken edit keeps the last good settings and says why
    cluster.kube.patch(
        CONFIGMAPS,
        "kai-scheduler-config",
        {"data": {"scheduler-policy.default.yaml": "nodePool: ''\nstaleGangGracePeriod: x\n"}},
        "kai-scheduler",
    )
    eventually(lambda: _events(cluster, "kai-scheduler", "InvalidConfig"))
    assert system.scheduler.builder.config.k_value == 1.5


def test_reservation_pod_goes_when_its_last_fraction_pod_ends(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    make_nodes(cluster, 1, gpus=1)
    cluster.start_system()
    kube.create(PODS, pod_manifest("brief", "work", "team", fraction=0.5, duration=0.5))
    eventually(lambda: _pods(cluster, "kai-resource-reservation"))
    eventually(lambda: kube.get(PODS, "brief", "work")["status"].get("phase") == "Succeeded")
    eventually(lambda: not _pods(cluster, "kai-resource-reservation"), timeout=20)
    # the device is free again: a whole-GPU pod fits on the single-GPU node
    kube.create(PODS, pod_manifest("whole", "work", "team", gpus=1))
    eventually(lambda: kube.get(PODS, "whole", "work")["status"].get("phase") == "Running")


def test_mig_instances_on_a_mig_node(cluster: Cluster) -> None:
    from kai.sim.nodes import NodeShape, create_nodes

    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=1, mig={"nvidia.com/mig-1g.10gb": 7}), prefix="mig")
    cluster.start_system()
    for i in range(2):
        body = pod_manifest(f"slice-{i}", "work", "team")
        body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
        kube.create(PODS, body)
    eventually(
        lambda: (
            all(
                p["status"].get("phase") == "Running" and p["spec"]["nodeName"] == "mig-00"
                for p in _pods(cluster, "work")
            )
            and len(_pods(cluster, "work")) == 2
        )
    )
    pod = kube.get(PODS, "slice-0", "work")
    assert pod["metadata"]["annotations"]["received-resource-type"] == "MigInstance"
