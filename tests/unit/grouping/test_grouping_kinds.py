"""One test per workload kind: realistic objects and pods -> the right PodGroup."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from workloads_fixtures import (
    jobset,
    jobset_pod,
    obj,
    pod,
    pytorchjob,
    ray_pods,
    raycluster_spec,
    template,
    training_pods,
)

from kai.api.podgroup import PodGroupSpec
from kai.reconcilers.grouping import (
    Chain,
    GroupingError,
    Settings,
    manifest,
    parse_default_priorities,
    plan_for,
)


def group(
    p: dict[str, Any],
    *owners: dict[str, Any],
    pods: list[dict[str, Any]] | None = None,
    extra: list[dict[str, Any]] | None = None,
    settings: Settings | None = None,
) -> tuple[dict[str, Any], str | None, str | None]:
    """(PodGroup, the pod's subgroup, unknown kind) of ``p`` owned by ``owners`` (nearest first)."""
    known = {(o["kind"], o["metadata"]["name"]): o for o in [*owners, *(extra or [])]}

    def read(api_version: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return known.get((kind, name))

    def lister(ns: str, selector: Any) -> list[dict[str, Any]]:
        return [
            q
            for q in pods or []
            if all((q["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        ]

    chain = Chain(p, list(owners), read, lister)
    plan = plan_for(chain)
    pg = manifest(chain, plan, settings or Settings())
    PodGroupSpec.model_validate(pg["spec"])  # what the API server's CRD schema checks
    return pg, plan.subgroup, plan.unknown_kind


def uid_of(o: dict[str, Any]) -> str:
    return str(o["metadata"]["uid"])


def subgroups(pg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in pg["spec"].get("subGroups") or []}


# -- Kubernetes kinds --------------------------------------------------------------------------
def test_bare_pod() -> None:
    p = pod("solo", labels={"kai.scheduler/queue": "team-a"})
    pg, sub, unknown = group(p)
    assert pg["metadata"]["name"] == f"pg-solo-{uid_of(p)}"
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["queue"] == "team-a"
    assert pg["spec"]["priorityClassName"] == "train" and sub is None and unknown is None


def test_job_with_batch_min_member_is_a_gang() -> None:
    job = obj(
        "batch/v1",
        "Job",
        "train",
        {"parallelism": 4, "completions": 4, "template": template()},
        labels={"kai.scheduler/queue": "team-b", "priorityClassName": "build"},
        annotations={"kai.scheduler/batch-min-member": "4"},
    )
    p = pod("train-abcde", job, labels={"batch.kubernetes.io/job-name": "train"})
    pg, _, _ = group(p, job)
    assert pg["metadata"]["name"] == f"pg-train-{uid_of(job)}"
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["queue"] == "team-b" and pg["spec"]["priorityClassName"] == "build"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_bad_batch_min_member_names_the_job_and_annotation() -> None:
    job = obj("batch/v1", "Job", "bad", annotations={"kai.scheduler/batch-min-member": "two"})
    with pytest.raises(GroupingError, match=r"Job ml/bad: annotation kai.scheduler/batch-min"):
        group(pod("bad-x", job), job)


def test_cronjob_groups_each_run() -> None:
    cron = obj(
        "batch/v1",
        "CronJob",
        "nightly",
        {"schedule": "0 2 * * *"},
        labels={"kai.scheduler/queue": "etl"},
    )
    run = obj(
        "batch/v1",
        "Job",
        "nightly-29000000",
        annotations={"kai.scheduler/batch-min-member": "2"},
        owner=cron,
    )
    pg, _, _ = group(pod("nightly-29000000-abcde", run), run, cron)
    assert pg["metadata"]["name"] == f"pg-nightly-29000000-{uid_of(run)}"
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["queue"] == "etl"
    assert "kind: CronJob" in pg["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"]


def test_deployment_pod_per_pod_inference() -> None:
    dep = obj("apps/v1", "Deployment", "web", labels={"kai.scheduler/queue": "serving"})
    rs = obj("apps/v1", "ReplicaSet", "web-7d9f8", owner=dep)
    p = pod("web-7d9f8-xk2lq", rs)
    pg, _, _ = group(p, rs, dep)
    assert pg["metadata"]["name"] == f"pg-web-7d9f8-xk2lq-{uid_of(p)}"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert pg["spec"]["priorityClassName"] == "inference" and pg["spec"]["queue"] == "serving"


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet"])
def test_replicaset_and_statefulset_one_group(kind: str) -> None:
    owner = obj("apps/v1", kind, "db", labels={"kai.scheduler/preemptibility": "non-preemptible"})
    pg, _, _ = group(pod("db-0", owner), owner)
    assert pg["metadata"]["name"] == f"pg-db-{uid_of(owner)}"
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["preemptibility"] == "non-preemptible"


# -- Kubeflow ------------------------------------------------------------------------------------
def test_pytorchjob_master_worker_subgroups_queue_priority() -> None:
    job = pytorchjob(
        "bert", 1, 3, labels={"kai.scheduler/queue": "nlp", "priorityClassName": "build"}
    )
    master = training_pods(job, "master", 1)[0]
    worker = training_pods(job, "worker", 3)[2]
    pg, sub, _ = group(master, job)
    assert pg["spec"]["minMember"] == 4
    assert subgroups(pg) == {
        "master": {"name": "master", "minMember": 1},
        "worker": {"name": "worker", "minMember": 3},
    }
    assert (pg["spec"]["queue"], pg["spec"]["priorityClassName"]) == ("nlp", "build")
    assert sub == "master"
    assert group(worker, job)[1] == "worker"


def test_pytorchjob_elastic_min_replicas() -> None:
    job = pytorchjob("elastic", 0, 6, elastic=(2, 6))
    pg, sub, _ = group(training_pods(job, "worker", 6)[5], job)
    assert pg["spec"]["minMember"] == 2
    assert subgroups(pg) == {"worker": {"name": "worker", "minMember": 2}}
    assert sub == "worker"


def test_pytorchjob_segments_use_the_segment_planner() -> None:
    job = pytorchjob("llm", 1, 8, worker_annotations={"kai.scheduler/segment-size": "4"})
    pods = training_pods(job, "worker", 8)
    pg, sub, _ = group(pods[5], job)
    subs = subgroups(pg)
    assert subs["worker"] == {"name": "worker", "minSubGroup": 2}
    assert subs["worker-segment-0"]["minMember"] == 4
    assert subs["worker-segment-1"] == {
        "name": "worker-segment-1",
        "parent": "worker",
        "minMember": 4,
    }
    assert sub == "worker-segment-1"
    assert group(pods[3], job)[1] == "worker-segment-0"


def test_pytorchjob_bad_segment_size_is_an_error() -> None:
    job = pytorchjob("odd", 0, 2, worker_annotations={"kai.scheduler/segment-size": "8"})
    with pytest.raises(GroupingError, match="segment-size: 8 is more than the 2 worker"):
        group(training_pods(job, "worker", 2)[0], job)


def test_tfjob_sum_of_replicas_and_min_available() -> None:
    spec = {
        "tfReplicaSpecs": {
            "Chief": {"replicas": 1, "template": template()},
            "PS": {"replicas": 2, "template": template()},
            "Worker": {"replicas": 4, "template": template()},
        }
    }
    job = obj("kubeflow.org/v1", "TFJob", "mnist", spec)
    assert group(training_pods(job, "worker", 1)[0], job)[0]["spec"]["minMember"] == 7
    spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": 5}}
    job = obj("kubeflow.org/v1", "TFJob", "mnist2", spec)
    assert group(training_pods(job, "ps", 1)[0], job)[0]["spec"]["minMember"] == 5


def test_xgboost_needs_master_and_worker() -> None:
    good = obj(
        "kubeflow.org/v1",
        "XGBoostJob",
        "xgb",
        {"xgbReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
    )
    assert group(training_pods(good, "worker", 1)[0], good)[0]["spec"]["minMember"] == 3
    bad = obj("kubeflow.org/v1", "XGBoostJob", "xgb-bad", {"xgbReplicaSpecs": {"Worker": {}}})
    with pytest.raises(GroupingError, match=r"XGBoostJob ml/xgb-bad: spec\.xgbReplicaSpecs needs"):
        group(training_pods(bad, "worker", 1)[0], bad)


def test_jaxjob() -> None:
    job = obj("kubeflow.org/v1", "JAXJob", "jax", {"jaxReplicaSpecs": {"Worker": {"replicas": 8}}})
    assert group(training_pods(job, "worker", 1)[0], job)[0]["spec"]["minMember"] == 8


def test_mpijob_waits_for_workers_leaves_the_launcher_out() -> None:
    spec = {
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}},
    }
    job = obj("kubeflow.org/v2beta1", "MPIJob", "hvd", spec)
    workers = training_pods(job, "worker", 4)
    assert group(workers[0], job, pods=workers)[0]["spec"]["minMember"] == 4
    launcher = training_pods(job, "launcher", 1)
    assert group(launcher[0], job, pods=workers + launcher)[0]["spec"]["minMember"] == 5
    assert group(workers[1], job, pods=workers + launcher)[0]["spec"]["minMember"] == 5
    eager = obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "hvd2",
        {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}},
    )
    assert group(training_pods(eager, "worker", 1)[0], eager)[0]["spec"]["minMember"] == 5


def test_trainjob_is_grouped_as_its_jobset() -> None:
    train = obj(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "ft",
        {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
        labels={"kai.scheduler/queue": "research"},
    )
    js, jobs = jobset("ft", [("node", 1, 2)])
    js["metadata"]["ownerReferences"] = [
        {"apiVersion": train["apiVersion"], "kind": "TrainJob", "name": "ft", "uid": uid_of(train)}
    ]
    p = jobset_pod(jobs["node"][0], 1)
    pg, sub, _ = group(p, jobs["node"][0], js, train)
    assert pg["metadata"]["name"] == f"pg-ft-{uid_of(js)}"
    assert pg["spec"]["queue"] == "research"
    assert subgroups(pg)["node-replica-0"]["minMember"] == 2
    assert sub == "node-replica-0"


# -- Ray ------------------------------------------------------------------------------------------
def test_raycluster_head_and_worker_groups() -> None:
    spec = raycluster_spec(
        [
            {"groupName": "gpu-workers", "replicas": 3, "minReplicas": 2, "maxReplicas": 5},
            {"groupName": "tpu-hosts", "replicas": 2, "numOfHosts": 2},
            {"groupName": "spare", "replicas": 4, "suspend": True},
        ]
    )
    cluster = obj(
        "ray.io/v1",
        "RayCluster",
        "rc",
        spec,
        labels={"kai.scheduler/queue": "ray-q", "ray.io/priority-class-name": "build"},
    )
    head = ray_pods(cluster, "headgroup", 1)[0]
    pg, sub, _ = group(head, cluster)
    assert pg["spec"]["minMember"] == 1 + 2 + 4
    assert subgroups(pg) == {
        "head": {"name": "head", "minMember": 1},
        "gpu-workers": {"name": "gpu-workers", "minMember": 2},
        "tpu-hosts": {"name": "tpu-hosts", "minMember": 4},
        "spare": {"name": "spare", "minMember": 0},
    }
    assert sub == "head" and pg["spec"]["priorityClassName"] == "build"
    assert pg["spec"]["queue"] == "ray-q"
    assert group(ray_pods(cluster, "gpu-workers", 1)[0], cluster)[1] == "gpu-workers"


def test_rayjob_groups_by_the_rayjob_with_its_cluster() -> None:
    rayjob = obj(
        "ray.io/v1",
        "RayJob",
        "rayjob-sample",
        {"entrypoint": "python x.py", "rayClusterSpec": raycluster_spec([{"replicas": 2}])},
        labels={"kai.scheduler/queue": "default-queue"},
    )
    cluster = obj(
        "ray.io/v1",
        "RayCluster",
        "rayjob-sample-raycluster-abcde",
        rayjob["spec"]["rayClusterSpec"],
        owner=rayjob,
    )
    worker = ray_pods(cluster, "worker-group-0", 1)[0]
    pg, sub, _ = group(worker, cluster, rayjob)
    assert pg["metadata"]["name"] == f"pg-rayjob-sample-{uid_of(rayjob)}"
    assert pg["spec"]["minMember"] == 3
    assert sub == "worker-group-0"


def test_rayservice_each_cluster_its_own_gang() -> None:
    svc = obj(
        "ray.io/v1",
        "RayService",
        "serve",
        {"rayClusterConfig": raycluster_spec([{"groupName": "w", "replicas": 1}])},
    )
    cluster = obj(
        "ray.io/v1", "RayCluster", "serve-raycluster-x1", svc["spec"]["rayClusterConfig"], owner=svc
    )
    pg, _, _ = group(ray_pods(cluster, "w", 1)[0], cluster, svc)
    assert pg["metadata"]["name"] == f"pg-serve-raycluster-x1-{uid_of(cluster)}"
    assert pg["spec"]["minMember"] == 2


# -- JobSet, LeaderWorkerSet -----------------------------------------------------------------
def test_jobset_any_order_one_subgroup_per_replica() -> None:
    js, jobs = jobset("train", [("driver", 1, 1), ("workers", 2, 4)])
    p = jobset_pod(jobs["workers"][1], 3)
    pg, sub, _ = group(p, jobs["workers"][1], js)
    subs = subgroups(pg)
    assert pg["metadata"]["name"] == f"pg-train-{uid_of(js)}"
    assert pg["spec"]["minSubGroup"] == 2 and "minMember" not in pg["spec"]
    assert subs["workers"] == {"name": "workers", "minSubGroup": 2}
    assert subs["workers-replica-1"] == {
        "name": "workers-replica-1",
        "minMember": 4,
        "parent": "workers",
    }
    assert subs["driver-replica-0"]["minMember"] == 1
    assert sub == "workers-replica-1"


def test_jobset_in_order_and_min_member_annotations() -> None:
    js, jobs = jobset("io", [("a", 1, 2), ("b", 1, 2)])
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {
        "annotations": {"kai.scheduler/batch-min-member": "1"}
    }
    pg, _, _ = group(jobset_pod(jobs["a"][0], 0), jobs["a"][0], js)
    assert pg["spec"]["minSubGroup"] == 1
    assert subgroups(pg)["b-replica-0"]["minMember"] == 1
    js["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "9"}
    assert group(jobset_pod(jobs["a"][0], 0), jobs["a"][0], js)[0]["spec"]["minSubGroup"] == 2


def _lws(
    size: int, policy: dict[str, Any] | None = None, startup: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 2,
        "leaderWorkerTemplate": {
            "size": size,
            "leaderTemplate": template(),
            "workerTemplate": template(),
        },
    }
    if policy:
        spec["leaderWorkerTemplate"]["subGroupPolicy"] = policy
    if startup:
        spec["startupPolicy"] = startup
    return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", spec)


def _lws_pods(lws: dict[str, Any], group_index: int) -> list[dict[str, Any]]:
    """The leader (owned by the leader StatefulSet) and workers (owned by the worker StatefulSet
    the leader pod owns), as the LWS controller creates them; returns [leader, workers...] with
    their owner chains in ``_chains``."""
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    name = lws["metadata"]["name"]
    base = {
        "leaderworkerset.sigs.k8s.io/name": name,
        "leaderworkerset.sigs.k8s.io/group-index": str(group_index),
    }
    leader_sts = obj("apps/v1", "StatefulSet", name, owner=lws)
    leader = pod(
        f"{name}-{group_index}",
        leader_sts,
        labels={**base, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
    )
    worker_sts = obj("apps/v1", "StatefulSet", f"{name}-{group_index}", owner=leader)
    workers = [
        pod(
            f"{name}-{group_index}-{i}",
            worker_sts,
            labels={**base, "leaderworkerset.sigs.k8s.io/worker-index": str(i)},
        )
        for i in range(1, size)
    ]
    _chains[leader["metadata"]["name"]] = [leader_sts, lws]
    for w in workers:
        _chains[w["metadata"]["name"]] = [worker_sts, leader, leader_sts, lws]
    return [leader, *workers]


_chains: dict[str, list[dict[str, Any]]] = {}


def test_leaderworkerset_group_per_replica() -> None:
    lws = _lws(4)
    pods = _lws_pods(lws, 1)
    pg, sub, _ = group(pods[2], *_chains[pods[2]["metadata"]["name"]])
    assert pg["metadata"]["name"] == f"pg-vllm-{uid_of(lws)}-group-1"
    assert pg["spec"]["minMember"] == 4
    assert subgroups(pg) == {
        "leader": {"name": "leader", "minMember": 1},
        "workers": {"name": "workers", "minMember": 3},
    }
    assert sub == "workers"
    assert group(pods[0], *_chains[pods[0]["metadata"]["name"]])[1] == "leader"


def test_leaderworkerset_leader_ready_and_segments() -> None:
    lws = _lws(4, startup="LeaderReady")
    leader = _lws_pods(lws, 0)[0]
    assert group(leader, *_chains[leader["metadata"]["name"]])[0]["spec"]["minMember"] == 1
    lws = _lws(5, {"subGroupPolicyType": "LeaderExcluded", "subGroupSize": 2})
    pods = _lws_pods(lws, 0)
    pg, sub, _ = group(pods[4], *_chains[pods[4]["metadata"]["name"]])
    assert set(subgroups(pg)) == {"leader", "workers", "workers-segment-0", "workers-segment-1"}
    assert sub == "workers-segment-1"


# -- Knative, Spark, others -------------------------------------------------------------------
def test_knative_gang_per_revision() -> None:
    svc = obj("serving.knative.dev/v1", "Service", "llm", labels={"kai.scheduler/queue": "serve"})
    cfg = obj("serving.knative.dev/v1", "Configuration", "llm", owner=svc)
    rev = obj(
        "serving.knative.dev/v1",
        "Revision",
        "llm-00001",
        annotations={"autoscaling.knative.dev/min-scale": "3"},
        owner=cfg,
    )
    dep = obj("apps/v1", "Deployment", "llm-00001-deployment", owner=rev)
    rs = obj("apps/v1", "ReplicaSet", "llm-00001-deployment-5c8d", owner=dep)
    p = pod(
        "llm-00001-deployment-5c8d-abcde", rs, labels={"serving.knative.dev/revision": "llm-00001"}
    )
    pg, _, _ = group(p, rs, dep, rev, cfg, svc)
    assert pg["metadata"]["name"] == f"pg-llm-00001-{uid_of(rev)}"
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["priorityClassName"] == "inference" and pg["spec"]["queue"] == "serve"


def test_spark_driver_and_executors_share_a_group() -> None:
    app = {"spark-app-name": "pi", "spark-app-selector": "spark-0123abcd", "spark-role": "driver"}
    driver = pod("pi-driver", labels={**app, "kai.scheduler/queue": "spark"})
    executor = pod("pi-1f2e-exec-1", driver, labels={**app, "spark-role": "executor"})
    pg_d, _, _ = group(driver)
    pg_e, _, _ = group(executor, driver)
    assert (
        pg_d["metadata"]["name"]
        == pg_e["metadata"]["name"]
        == f"pg-spark-0123abcd-{uid_of(driver)}"
    )
    assert pg_e["spec"]["queue"] == "spark"


def test_spark_operator_application() -> None:
    sa = obj(
        "sparkoperator.k8s.io/v1beta2",
        "SparkApplication",
        "pi",
        labels={"kai.scheduler/queue": "spark"},
    )
    driver = pod("pi-driver", sa, labels={"spark-app-name": "pi", "spark-app-selector": "spark-1"})
    executor = pod(
        "pi-exec-1", driver, labels={"spark-app-name": "pi", "spark-app-selector": "spark-1"}
    )
    pg, _, unknown = group(executor, driver, sa)
    assert pg["metadata"]["name"] == f"pg-pi-{uid_of(sa)}" and unknown is None
    assert pg["spec"]["queue"] == "spark"


def test_unknown_kind_one_group_per_owner_and_flagged() -> None:
    owner = obj("example.com/v1", "Frobnicator", "frob", labels={"kai.scheduler/queue": "q"})
    pg, _, unknown = group(pod("frob-0", owner), owner)
    assert pg["metadata"]["name"] == f"pg-frob-{uid_of(owner)}"
    assert unknown == "example.com/v1/Frobnicator"


def test_topology_preemption_delay_node_pool_from_the_top_owner() -> None:
    job = obj(
        "batch/v1",
        "Job",
        "topo",
        labels={"kai.scheduler/node-pool": "pool-a", "user": "alice"},
        annotations={
            "kai.scheduler/topology": "dc",
            "kai.scheduler/topology-required-placement": "rack",
            "kai.scheduler/preemption-delay": "5m",
            "kai.scheduler/staleness-grace-period": "-1s",
        },
    )
    pg, _, _ = group(pod("topo-x", job), job)
    assert pg["spec"]["topologyConstraint"] == {"topology": "dc", "requiredTopologyLevel": "rack"}
    assert pg["spec"]["preemptionDelay"] == "5m"
    assert pg["spec"]["stalenessGracePeriod"] == "-1s"
    assert pg["metadata"]["labels"]["kai.scheduler/node-pool"] == "pool-a"
    assert pg["metadata"]["labels"]["user"] == "alice"


def test_per_kind_default_priorities_configmap() -> None:
    defaults = parse_default_priorities(
        '[{"typeName": "PyTorchJob", "group": "kubeflow.org", "priorityName": "build",'
        ' "preemptibility": "non-preemptible"}]',
        "ConfigMap x key types",
    )
    job = pytorchjob("p", 0, 1)
    pg, _, _ = group(
        training_pods(job, "worker", 1)[0], job, settings=Settings(kind_defaults=defaults)
    )
    assert pg["spec"]["priorityClassName"] == "build"
    assert pg["spec"]["preemptibility"] == "non-preemptible"
    with pytest.raises(GroupingError, match=r"ConfigMap x key types\[0\].preemptibility"):
        parse_default_priorities(
            '[{"typeName": "A", "preemptibility": "maybe"}]', "ConfigMap x key types"
        )
