"""Live regression tests of bugs found when kai was tried as a user would (issue 14): each runs
the whole system on an embedded API server and checks what a user sees on the cluster."""

from __future__ import annotations

import time
from typing import Any

from e2e_helpers import Cluster, queue
from live_helpers import eventually

from kai.kube.resources import PODGROUPS, PODS, QUEUES
from kai.sim.nodes import NodeShape, create_nodes
from kai.sim.workloads import ensure_namespace, pod_manifest, submit_job


def _pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.kube.list(PODS, ns)["items"]}


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def test_native_sidecars_are_summed_with_the_main_containers(cluster: Cluster) -> None:
    """A pod of 4 cpu + a 4-cpu native sidecar needs 8 cpu: two do not share an 8-cpu node
    (the old rule max'ed the sidecar like an init container: both were bound, one failed
    OutOfcpu at the kubelet)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=0, cpu="8", memory="64Gi"))
    cluster.start_system()
    for name in ("a", "b"):
        pod = pod_manifest(name, "work", "team", cpu="4", memory="1Gi")
        pod["spec"]["initContainers"] = [
            {
                "name": "proxy",
                "image": "busybox:1.36",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "4", "memory": "1Gi"}},
            }
        ]
        kube.create(PODS, pod)
    eventually(
        lambda: (
            sorted(_phase(p) for p in _pods(cluster, "work").values()) == ["Pending", "Running"]
        ),
        timeout=20,
    )
    time.sleep(1.0)  # a few more cycles: the second pod stays pending, never bound or failed
    pods = _pods(cluster, "work")
    assert sorted(_phase(p) for p in pods.values()) == ["Pending", "Running"]
    pending = next(p for p in pods.values() if _phase(p) == "Pending")
    assert not pending["spec"].get("nodeName")


def _anti_affinity(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": expressions},
                }
            ]
        }
    }


def test_anti_affinity_with_only_match_expressions_selects_what_they_say(
    cluster: Cluster,
) -> None:
    """A term with only matchExpressions used to parse to an empty selector that matched every
    pod, so any pod on a node blocked it."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=4))
    cluster.start_system()
    kube.create(PODS, pod_manifest("web", "work", "team", gpus=1, labels={"app": "web"}))
    eventually(lambda: _phase(_pods(cluster, "work")["web"]) == "Running", timeout=20)
    free = pod_manifest("free", "work", "team", gpus=1, labels={"app": "batch"})
    free["spec"]["affinity"] = _anti_affinity([{"key": "app", "operator": "In", "values": ["db"]}])
    kube.create(PODS, free)
    blocked = pod_manifest("blocked", "work", "team", gpus=1, labels={"app": "batch"})
    blocked["spec"]["affinity"] = _anti_affinity([{"key": "app", "operator": "Exists"}])
    kube.create(PODS, blocked)
    eventually(lambda: _phase(_pods(cluster, "work")["free"]) == "Running", timeout=20)
    time.sleep(1.0)
    assert not _pods(cluster, "work")["blocked"]["spec"].get("nodeName")


STALE_SINCE = "kai.scheduler/stale-podgroup-timestamp"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"


def _group_of(cluster: Cluster, ns: str, prefix: str) -> dict[str, Any]:
    for pg in cluster.kube.list(PODGROUPS, ns)["items"]:
        if pg["metadata"]["name"].startswith(prefix):
            return dict(pg)
    raise AssertionError(f"no PodGroup {prefix}* yet")


def _set_grace(cluster: Cluster, ns: str, prefix: str, grace: str) -> str:
    name = str(eventually(lambda: _group_of(cluster, ns, prefix))["metadata"]["name"])
    cluster.kube.patch(PODGROUPS, name, {"spec": {"stalenessGracePeriod": grace}}, ns)
    return name


def _gang_running(cluster: Cluster, ns: str, job: str, size: int) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]]:
        pods = [p for n, p in _pods(cluster, ns).items() if n.startswith(f"{job}-")]
        assert len(pods) == size and all(_phase(p) == "Running" for p in pods)
        return pods

    return list(eventually(running, timeout=30))


def test_a_finishing_gang_is_not_stale(cluster: Cluster) -> None:
    """Succeeded pods count toward the gang: 2 Succeeded + 2 Running of a gang of 4 is a job
    finishing, not a broken gang (they were dropped before the gang check, and the two running
    pods evicted)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=8))
    cluster.start_system()
    submit_job(kube, "gang", "work", "team", pods=4, gpus_per_pod=1, min_member=4)
    name = _set_grace(cluster, "work", "pg-gang-", "0s")  # stale means evicted at once
    pods = _gang_running(cluster, "work", "gang", 4)
    for pod in pods[:2]:
        kube.patch(
            PODS, pod["metadata"]["name"], {"status": {"phase": "Succeeded"}}, "work", sub="status"
        )
    time.sleep(1.5)  # several scheduling cycles
    phases = sorted(_phase(p) for n, p in _pods(cluster, "work").items() if n.startswith("gang-"))
    assert phases == ["Running", "Running", "Succeeded", "Succeeded"]
    pg = kube.get(PODGROUPS, name, "work")
    assert STALE_SINCE not in (pg["metadata"].get("annotations") or {})


def test_staleness_grace_period_is_read_from_the_podgroup(cluster: Cluster) -> None:
    """``spec.stalenessGracePeriod``: ``0s`` evicts a broken gang at once, ``-1s`` never (it
    was not read: the scheduler's 60 s applied to both); the eviction is stamped on the
    PodGroup (``last-eviction-timestamp``), the staleness on both."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=8))
    cluster.start_system()
    submit_job(kube, "now", "work", "team", pods=2, gpus_per_pod=1, min_member=2)
    submit_job(kube, "never", "work", "team", pods=2, gpus_per_pod=1, min_member=2)
    now = _set_grace(cluster, "work", "pg-now-", "0s")
    never = _set_grace(cluster, "work", "pg-never-", "-1s")
    for job in ("now", "never"):
        broken = _gang_running(cluster, "work", job, 2)[0]["metadata"]["name"]
        kube.delete(PODS, broken, "work")
    eventually(lambda: not [n for n in _pods(cluster, "work") if n.startswith("now-")], timeout=20)
    # the PodGroup's annotations are written by the status writers, after the evictions
    eventually(
        lambda: (
            LAST_EVICTION in (kube.get(PODGROUPS, now, "work")["metadata"].get("annotations") or {})
        )
    )
    eventually(
        lambda: (
            STALE_SINCE in (kube.get(PODGROUPS, never, "work")["metadata"].get("annotations") or {})
        )
    )
    time.sleep(1.0)
    survivors = [p for n, p in _pods(cluster, "work").items() if n.startswith("never-")]
    assert [_phase(p) for p in survivors] == ["Running"]


def test_stale_since_is_written_for_a_job_with_subgroups(cluster: Cluster) -> None:
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=8))
    cluster.start_system()
    kube.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "split", "namespace": "work"},
            "spec": {
                "queue": "team",
                "minMember": 3,
                "stalenessGracePeriod": "-1s",
                "subGroups": [
                    {"name": "leader", "minMember": 1},
                    {"name": "workers", "minMember": 2},
                ],
            },
        },
        "work",
    )
    for name, subgroup in (("leader", "leader"), ("w0", "workers"), ("w1", "workers")):
        pod = pod_manifest(
            f"split-{name}",
            "work",
            "team",
            gpus=1,
            labels={"kai.scheduler/subgroup-name": subgroup},
            annotations={"pod-group-name": "split"},
        )
        kube.create(PODS, pod)
    _gang_running(cluster, "work", "split", 3)
    pg = kube.get(PODGROUPS, "split", "work")
    assert STALE_SINCE not in (pg["metadata"].get("annotations") or {})
    kube.delete(PODS, "split-w1", "work")  # the workers subgroup falls below its minimum
    eventually(
        lambda: (
            STALE_SINCE
            in (kube.get(PODGROUPS, "split", "work")["metadata"].get("annotations") or {})
        ),
        timeout=20,
    )


def test_preemption_delay_is_read_from_the_podgroup(cluster: Cluster) -> None:
    """A pending job with ``spec.preemptionDelay`` does not preempt before the delay is over
    (it was not read live: the delay never applied on a cluster)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=2))
    cluster.start_system()
    for i in range(2):
        kube.create(PODS, pod_manifest(f"low-{i}", "work", "team", gpus=1, priority_class="train"))
    eventually(
        lambda: (
            all(
                _phase(p) == "Running"
                for n, p in _pods(cluster, "work").items()
                if n.startswith("low-")
            )
            and len(_pods(cluster, "work")) == 2
        ),
        timeout=20,
    )
    kube.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "urgent", "namespace": "work"},
            "spec": {
                "queue": "team",
                "minMember": 1,
                "priorityClassName": "inference",
                "preemptionDelay": "1h",
            },
        },
        "work",
    )
    kube.create(
        PODS,
        pod_manifest(
            "urgent",
            "work",
            "team",
            gpus=1,
            priority_class="inference",
            annotations={"pod-group-name": "urgent"},
        ),
    )

    def delayed() -> bool:
        conditions = (kube.get(PODGROUPS, "urgent", "work").get("status") or {}).get(
            "schedulingConditions"
        ) or []
        # KAI's reason name, as the core gives it
        reasons = [r for c in conditions for r in c.get("reasons") or []]
        return any(
            r.get("reason") == "PreemptionDelayNotElapsed"
            and "within its preemption delay window" in (r.get("message") or "")
            for r in reasons
        )

    eventually(delayed, timeout=20)
    assert all(
        _phase(p) == "Running" for n, p in _pods(cluster, "work").items() if n.startswith("low-")
    )
    # without the delay the same pod preempts one of the low-priority pods
    kube.patch(PODGROUPS, "urgent", {"spec": {"preemptionDelay": None}}, "work")
    eventually(lambda: _phase(_pods(cluster, "work")["urgent"]) == "Running", timeout=30)


def test_a_queue_whose_parent_does_not_exist_says_so(cluster: Cluster) -> None:
    """It showed ``status: {}``; now KAI's ``Orphan`` condition, gone once the parent exists."""
    kube = cluster.kube
    kube.create(QUEUES, queue("lost", parent="nowhere"))
    kube.create(QUEUES, queue("below", parent="lost"))
    cluster.start_system()

    def conditions(name: str) -> list[dict[str, Any]]:
        return list((kube.get(QUEUES, name).get("status") or {}).get("conditions") or [])

    lost = eventually(lambda: conditions("lost"), timeout=20)
    assert lost[0]["type"] == "Orphan" and lost[0]["status"] == "True"
    assert "'nowhere' does not exist" in lost[0]["message"]
    below = eventually(lambda: conditions("below"), timeout=20)
    assert "ancestor 'lost'" in below[0]["message"]
    kube.create(QUEUES, queue("nowhere"))
    eventually(lambda: not conditions("lost") and not conditions("below"), timeout=20)


def test_host_ports_keep_two_pods_apart(cluster: Cluster) -> None:
    """Two pods asking for host port 8080/TCP do not share a node (host ports were ignored)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=8))
    cluster.start_system()
    for name in ("a", "b"):
        pod = pod_manifest(name, "work", "team", gpus=1)
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        kube.create(PODS, pod)
    other = pod_manifest("udp", "work", "team", gpus=1)
    other["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}
    ]
    kube.create(PODS, other)
    eventually(
        lambda: (
            sorted(_phase(p) for p in _pods(cluster, "work").values())
            == ["Pending", "Running", "Running"]
        ),
        timeout=20,
    )
    time.sleep(1.0)
    pods = _pods(cluster, "work")
    assert _phase(pods["udp"]) == "Running"  # another protocol: no conflict
    assert sorted(_phase(pods[n]) for n in ("a", "b")) == ["Pending", "Running"]


def test_min_runtime_switched_on_protects_a_job_that_started_before(cluster: Cluster) -> None:
    """Jobs started while no min runtime was in force carry no last-start-timestamp; once a
    queue's preemptMinRuntime is set they are protected at once, from their pods' start (it
    used to leave them unprotected until they started again)."""
    kube = cluster.kube
    kube.create(QUEUES, queue("team"))
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=2))
    cluster.start_system()
    for i in range(2):
        kube.create(PODS, pod_manifest(f"low-{i}", "work", "team", gpus=1, priority_class="train"))
    eventually(
        lambda: sum(_phase(p) == "Running" for p in _pods(cluster, "work").values()) == 2,
        timeout=20,
    )
    groups = kube.list(PODGROUPS, "work")["items"]
    assert all(
        "kai.scheduler/last-start-timestamp" not in (g["metadata"].get("annotations") or {})
        for g in groups
    )
    kube.patch(QUEUES, "team", {"spec": {"preemptMinRuntime": "2m"}})
    kube.create(PODS, pod_manifest("urgent", "work", "team", gpus=1, priority_class="inference"))

    def considered() -> bool:  # the scheduler tried the urgent pod and left it pending
        conditions = (_pods(cluster, "work")["urgent"].get("status") or {}).get("conditions")
        return any(c.get("type") == "PodScheduled" for c in conditions or [])

    eventually(considered, timeout=20)
    time.sleep(2.0)  # ten cycles: no eviction
    pods = _pods(cluster, "work")
    assert _phase(pods["urgent"]) == "Pending"
    assert all(_phase(pods[f"low-{i}"]) == "Running" for i in range(2))
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
    # without the min runtime the same pod preempts one of them
    kube.patch(QUEUES, "team", {"spec": {"preemptMinRuntime": None}})
    eventually(lambda: _phase(_pods(cluster, "work")["urgent"]) == "Running", timeout=30)


def test_capacity_metric_counts_mig_instances_as_fair_share_does(cluster: Cluster) -> None:
    """A mixed MIG node counts in kai_cluster_capacity_gpus as in fair share (an instance of a
    <N>g profile = N GPUs, KAI's rule): the queues' fair shares add up to the metric (it used to
    leave the MIG node out, so fair shares summed above the cluster's capacity)."""
    import re

    kube = cluster.kube
    for name in ("a", "b"):
        kube.create(QUEUES, queue(name, gpu_quota=0))  # all over quota: capacity is divided
    ensure_namespace(kube, "work")
    create_nodes(kube, 1, NodeShape(gpus=4))
    create_nodes(kube, 1, NodeShape(gpus=1, mig={"nvidia.com/mig-1g.10gb": 7}), prefix="mig")
    system = cluster.start_system()
    for name, count in (("a", 6), ("b", 6)):
        for i in range(count):
            kube.create(PODS, pod_manifest(f"{name}-{i}", "work", name, gpus=1))
    for i in range(8):
        body = pod_manifest(f"m-{i}", "work", "b")
        body["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
        kube.create(PODS, body)

    def figures() -> tuple[float, float] | None:
        text = system.metrics.registry.exposition()
        cap = re.search(r"^kai_cluster_capacity_gpus (\S+)$", text, re.M)
        fair = re.findall(
            r'^kai_queue_fair_share_gpu\{[^}]*queue_name="[ab]"[^}]*\} (\S+)$', text, re.M
        )
        if cap is None or len(fair) != 2 or float(cap.group(1)) == 0:
            return None
        return float(cap.group(1)), sum(float(f) for f in fair)

    def settled() -> tuple[float, float] | None:
        found = figures()
        return found if found is not None and found[1] > 10.5 else None

    capacity, fair = eventually(settled, timeout=30)
    assert capacity == 11.0  # 4 whole GPUs + 7 instances of 1g
    assert abs(fair - capacity) < 1e-6, (fair, capacity)
