"""Live on the embedded API server AND on the real one: SchedulingShards, SharingPolicy modes per
node and the scheduler ConfigMap checked as a whole.

- two shards on one cluster (one `kai scheduler --shard` each, one binder, one pod-grouper): the
  pods of each shard land only on its pool's nodes, each shard holds its own Lease, and a pod of
  no running shard stays pending;
- a SharingPolicy that allows no sharing on a pool: no fractional pod is placed there;
- an invalid ConfigMap (``actions: allocate`` as a string, an unknown plugin, a bad argument type)
  is refused whole: the last good settings keep scheduling, an ``InvalidConfig`` Event, the
  shard's ``ConfigValid`` condition False and ``kai_scheduler_config_valid`` 0; fixed again, it
  applies and all three clear.

Each test uses its own scheduler name, node names and ConfigMap, so the session's real cluster
is shared safely; every object it made is deleted at the end.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import both_servers

from helpers.polling import eventually
from kai.kube.client import ApiError, Kube
from kai.kube.resources import (
    BIND_REQUESTS,
    CONFIGMAPS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    QUEUES,
    SCHEDULING_SHARDS,
)
from kai.kube.writes import create_if_absent
from kai.sim.system import System, SystemOptions
from kai.sim.workloads import pod_manifest

NODE_POOL = "kai.scheduler/node-pool"
NOT_READY = "node.kubernetes.io/not-ready"


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    """(kubeconfig, client) of a fresh embedded API server, or of this worker's real one."""
    yield from both_servers(request, tmp_path)


class Made:
    """What a test created, deleted again at the end (the real cluster is shared)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.objects: list[tuple[Any, str, str | None]] = []
        self.systems: list[System] = []

    def create(self, res: Any, obj: dict[str, Any]) -> dict[str, Any]:
        created = self.kube.create(res, obj)
        md = created["metadata"]
        self.objects.append((res, md["name"], md.get("namespace")))
        return created

    def start(self, kubeconfig: str, **options: Any) -> System:
        defaults: dict[str, Any] = {
            "period": 0.2,
            "status_period": 0.3,
            "lease_duration": 2.0,
            "renew_period": 0.5,
            "retry_period": 0.1,
            "kubelet": False,
            # no binder runs in most of these tests: the scheduler's decisions are read off
            # its BindRequests, so every pod takes that path
            "bind_mode": "bindRequest",
        }
        system = System(kubeconfig, SystemOptions(**{**defaults, **options})).start()
        self.systems.append(system)
        return system

    def close(self) -> None:
        for system in self.systems:
            system.stop()
        for res, name, namespace in reversed(self.objects):
            with contextlib.suppress(ApiError):
                self.kube.delete(res, name, namespace)


@pytest.fixture
def made(api: tuple[str, Kube]) -> Iterator[Made]:
    out = Made(api[1])
    try:
        yield out
    finally:
        out.close()


def _ready_node(made: Made, name: str, gpus: int, labels: dict[str, str]) -> None:
    """A Ready node, as a kubelet and the node-lifecycle controller would leave it."""
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    made.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        },
    )
    kube = made.kube
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    kube.patch(
        NODES,
        name,
        {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}},
        sub="status",
        content_type="application/merge-patch+json",
    )

    def untainted() -> bool:
        node = kube.get(NODES, name)
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY]
        if len(kept) != len(taints):
            kube.patch(
                NODES,
                name,
                {"spec": {"taints": kept or None}},
                content_type="application/merge-patch+json",
            )
            return False
        return True

    eventually(untainted, timeout=10)


def _queue(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}},
    }


def _namespace(made: Made, name: str) -> None:
    if create_if_absent(
        made.kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    ):
        made.objects.insert(0, (NAMESPACES, name, None))


def _pods_on(kube: Kube, namespace: str) -> dict[str, str | None]:
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in kube.list(PODS, namespace=namespace)["items"]
    }


def _events(kube: Kube, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list(EVENTS, namespace=namespace)["items"]
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == name
    ]


def test_two_shards_place_pods_only_on_their_pools_nodes(api: tuple[str, Kube], made: Made) -> None:
    kubeconfig, kube = api
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-shards-{tag}"
    ns = f"shards-{tag}"
    _namespace(made, ns)
    pools = {"a": f"pa-{tag}", "b": f"pb-{tag}"}
    nodes: dict[str, list[str]] = {}
    for key, value in pools.items():
        made.create(
            SCHEDULING_SHARDS,
            {
                "apiVersion": "kai.scheduler/v1",
                "kind": "SchedulingShard",
                "metadata": {"name": f"shard-{key}-{tag}"},
                "spec": {"partitionLabelValue": value},
            },
        )
        made.create(QUEUES, _queue(f"q{key}-{tag}", {NODE_POOL: value}))
        nodes[key] = [f"n{key}-{tag}-{i}" for i in range(2)]
        for name in nodes[key]:
            _ready_node(made, name, 4, {NODE_POOL: value})
    for key in pools:
        made.start(
            kubeconfig,
            scheduler_name=scheduler,
            components=("scheduler",),
            shard=f"shard-{key}-{tag}",
            identity_suffix=f"-{key}",
        )
    made.start(kubeconfig, scheduler_name=scheduler, components=("binder", "podgrouper"))
    for key, value in pools.items():
        for i in range(6):  # 6 one-GPU pods per pool: both of its nodes get some
            made.create(
                PODS,
                pod_manifest(
                    f"p{key}-{i}",
                    ns,
                    f"q{key}-{tag}",
                    gpus=1,
                    scheduler_name=scheduler,
                    labels={NODE_POOL: value},
                ),
            )
    # a pod of no running shard (no node-pool label, and no default shard runs): never placed
    made.create(PODS, pod_manifest("orphan", ns, f"qa-{tag}", gpus=1, scheduler_name=scheduler))

    eventually(lambda: all(v for k, v in _pods_on(kube, ns).items() if k != "orphan"), timeout=60)
    placed = _pods_on(kube, ns)
    for key in pools:
        wrong = {
            p: n for p, n in placed.items() if p.startswith(f"p{key}-") and n not in nodes[key]
        }
        assert not wrong, f"pods of shard {key} outside its pool: {wrong}"
    pgs = {
        pg["metadata"]["labels"].get(NODE_POOL)
        for pg in kube.list(PODGROUPS, namespace=ns)["items"]
    }
    assert set(pools.values()) <= pgs  # the pod-grouper copied the pool label
    leases = {lease["metadata"]["name"] for lease in kube.list(LEASES, "kai-scheduler")["items"]}
    assert {f"{scheduler}-{v}" for v in pools.values()} <= leases
    assert placed["orphan"] is None
    assert not [
        br
        for br in kube.list(BIND_REQUESTS, namespace=ns)["items"]
        if br["spec"]["podName"] == "orphan"
    ]


def test_the_default_scheduler_leaves_other_pools_alone(api: tuple[str, Kube], made: Made) -> None:
    """A scheduler without --shard serves KAI's default pool: the nodes, Queues and workloads
    without the node-pool label. A pool-x pod waits for pool-x's shard (it is neither placed on
    the unlabelled node nor on pool-x's node by the default scheduler), and the default
    scheduler's pods never land on pool-x's node."""
    kubeconfig, kube = api
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-default-{tag}"
    ns = f"default-{tag}"
    pool = f"px-{tag}"
    _namespace(made, ns)
    plain, pooled = f"plain-{tag}", f"pooled-{tag}"
    _ready_node(made, plain, 4, {})
    _ready_node(made, pooled, 4, {NODE_POOL: pool})
    made.create(
        SCHEDULING_SHARDS,
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "metadata": {"name": f"shard-{tag}"},
            "spec": {"partitionLabelValue": pool},
        },
    )
    made.create(QUEUES, _queue(f"q-{tag}"))
    made.create(QUEUES, _queue(f"qx-{tag}", {NODE_POOL: pool}))
    default = made.start(kubeconfig, scheduler_name=scheduler, components=("scheduler",))
    made.start(kubeconfig, scheduler_name=scheduler, components=("podgrouper",))
    # pool-x's pods first: the cycle that places the last default pod has seen them all
    for i in range(3):
        made.create(
            PODS,
            pod_manifest(
                f"x-{i}",
                ns,
                f"qx-{tag}",
                gpus=1,
                scheduler_name=scheduler,
                labels={NODE_POOL: pool},
            ),
        )
    for i in range(3):
        made.create(PODS, pod_manifest(f"d-{i}", ns, f"q-{tag}", gpus=1, scheduler_name=scheduler))
    eventually(lambda: len(_bind_requests(kube, ns)) == 3, timeout=30)
    assert default.scheduler is not None
    time.sleep(0.5)  # (and a late decision would show)
    decisions = _bind_requests(kube, ns)
    assert decisions == {f"d-{i}": plain for i in range(3)}, decisions
    # pool-x's shard places its pods, on its node only
    made.start(
        kubeconfig,
        scheduler_name=scheduler,
        components=("scheduler",),
        shard=f"shard-{tag}",
        identity_suffix="-x",
    )
    eventually(lambda: len(_bind_requests(kube, ns)) == 6, timeout=30)
    decisions = _bind_requests(kube, ns)
    assert {p: n for p, n in decisions.items() if p.startswith("x-")} == {
        f"x-{i}": pooled for i in range(3)
    }, decisions


def _configmap(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "kai-scheduler"},
        "data": {k: v if isinstance(v, str) else yaml.safe_dump(v) for k, v in data.items()},
    }


def _bind_requests(kube: Kube, namespace: str) -> dict[str, str]:
    """pod -> node of the scheduler's decisions (no binder runs in these tests)."""
    return {
        br["spec"]["podName"]: br["spec"]["selectedNode"]
        for br in kube.list(BIND_REQUESTS, namespace=namespace)["items"]
    }


def test_a_pool_without_sharing_gets_no_fractional_pod(api: tuple[str, Kube], made: Made) -> None:
    """SharingPolicies: the default pool (a node without the node-pool label, 8 GPUs) allows no
    sharing, pool frac-<tag> (1 GPU, served by its shard) allows fractions. Four half-GPU pods
    of each pool: those of frac-<tag> fill its one shared GPU two by two (two stay pending);
    none of the default pool's is placed although eight whole GPUs are free (without the
    policies they would go there); and no pod crosses to the other pool's node."""
    kubeconfig, kube = api
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-sharing-{tag}"
    ns = f"sharing-{tag}"
    whole, frac = f"whole-{tag}", f"frac-{tag}"
    _namespace(made, ns)
    _ready_node(made, whole, 8, {})
    _ready_node(made, frac, 1, {NODE_POOL: frac})
    made.create(
        SCHEDULING_SHARDS,
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "metadata": {"name": f"shard-{tag}"},
            "spec": {"partitionLabelValue": frac},
        },
    )
    made.create(QUEUES, _queue(f"q-{tag}"))
    made.create(QUEUES, _queue(f"qf-{tag}", {NODE_POOL: frac}))
    cm = f"sched-{tag}"
    made.create(
        CONFIGMAPS,
        _configmap(
            cm,
            {
                "sharing-policy.default.yaml": {"name": "default", "nodePool": "", "modes": []},
                f"sharing-policy.{frac}.yaml": {
                    "name": frac,
                    "nodePool": frac,
                    "modes": ["fraction"],
                },
            },
        ),
    )
    systems = {
        pool: made.start(
            kubeconfig,
            scheduler_name=scheduler,
            components=("scheduler",),
            config_map=f"kai-scheduler/{cm}",
            **({"shard": f"shard-{tag}", "identity_suffix": "-frac"} if pool else {}),
        )
        for pool in ("", frac)
    }
    made.start(kubeconfig, scheduler_name=scheduler, components=("podgrouper",))
    for i in range(4):
        made.create(
            PODS, pod_manifest(f"half-{i}", ns, f"q-{tag}", fraction=0.5, scheduler_name=scheduler)
        )
        made.create(
            PODS,
            pod_manifest(
                f"fhalf-{i}",
                ns,
                f"qf-{tag}",
                fraction=0.5,
                scheduler_name=scheduler,
                labels={NODE_POOL: frac},
            ),
        )
    eventually(lambda: len(_bind_requests(kube, ns)) == 2, timeout=30)
    # later cycles weighed the others (pending with a reason) and left them pending; with
    # nothing changing the schedulers then sleep (cycles are triggered by new work)
    for pool, system in systems.items():
        sched = system.scheduler
        assert sched is not None
        wanted = 2 if pool else 4
        eventually(
            lambda s=sched, n=wanted: (
                s.last_result is not None and len(s.last_result.job_reasons) == n
            )
        )
    decisions = _bind_requests(kube, ns)
    assert len(decisions) == 2, decisions
    assert set(decisions.values()) == {frac}, decisions
    assert all(pod.startswith("fhalf-") for pod in decisions), decisions


def test_an_invalid_configmap_is_refused_whole_and_the_last_good_one_kept(
    api: tuple[str, Kube], made: Made
) -> None:
    kubeconfig, kube = api
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-config-{tag}"
    ns = f"config-{tag}"
    pool = f"cfg-{tag}"
    shard = f"cfg-{tag}"
    _namespace(made, ns)
    made.create(
        SCHEDULING_SHARDS,
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "metadata": {"name": shard},
            "spec": {"partitionLabelValue": pool},
        },
    )
    _ready_node(made, f"cfg-{tag}", 8, {NODE_POOL: pool})
    made.create(QUEUES, _queue(f"q-{tag}", {NODE_POOL: pool}))
    cm = f"sched-{tag}"
    good = {"name": "p", "nodePool": pool, "actions": ["allocate"]}
    made.create(CONFIGMAPS, _configmap(cm, {"scheduler-policy.p.yaml": good}))
    system = made.start(
        kubeconfig,
        scheduler_name=scheduler,
        components=("scheduler", "podgrouper"),
        config_map=f"kai-scheduler/{cm}",
        shard=shard,
    )

    def submit(name: str) -> None:
        made.create(
            PODS,
            pod_manifest(
                name, ns, f"q-{tag}", gpus=1, scheduler_name=scheduler, labels={NODE_POOL: pool}
            ),
        )

    def condition() -> dict[str, Any]:
        status = kube.get(SCHEDULING_SHARDS, shard).get("status") or {}
        return next(c for c in status.get("conditions") or [] if c["type"] == "ConfigValid")

    def metric() -> str:
        return system.metrics.registry.exposition()

    submit("before")
    eventually(lambda: "before" in _bind_requests(kube, ns), timeout=30)
    eventually(lambda: condition()["status"] == "True", timeout=10)
    bad_cases = [
        ({**good, "actions": "allocate"}, "actions: expected a list of action names"),
        ({**good, "plugins": {"nosuchplugin": {"enabled": True}}}, "nosuchplugin: unknown plugin"),
        (
            {**good, "plugins": {"proportion": {"arguments": {"kValue": "lots"}}}},
            "'kValue': 'lots' is not a number",
        ),
        ({**good, "plugins": {"gpupack": {"priority": "high"}}}, "priority: expected an integer"),
    ]
    for i, (bad, words) in enumerate(bad_cases):
        current = kube.get(CONFIGMAPS, cm, "kai-scheduler")
        current["data"] = _configmap(cm, {"scheduler-policy.p.yaml": bad})["data"]
        # the good section of another pool in the same ConfigMap is refused with it: no half
        current["data"]["scheduler-policy.other.yaml"] = yaml.safe_dump(
            {"name": "other", "nodePool": "other", "actions": ["allocate"]}
        )
        kube.replace(CONFIGMAPS, current)
        eventually(
            lambda words=words: any(
                words in e["message"] for e in _events(kube, "kai-scheduler", cm, "InvalidConfig")
            ),
            timeout=15,
        )
        refused = eventually(
            lambda words=words: (
                (c := condition())["status"] == "False" and words in c["message"] and c
            ),
            timeout=15,
        )
        assert refused["reason"] == "InvalidConfig"
        assert re.search(r"^kai_scheduler_config_valid 0(\.0)?$", metric(), re.M)
        # the last good settings keep scheduling
        submit(f"during-{i}")
        eventually(lambda i=i: f"during-{i}" in _bind_requests(kube, ns), timeout=30)
    current = kube.get(CONFIGMAPS, cm, "kai-scheduler")
    current["data"] = _configmap(cm, {"scheduler-policy.p.yaml": good})["data"]
    kube.replace(CONFIGMAPS, current)
    eventually(lambda: condition()["status"] == "True", timeout=15)
    eventually(lambda: _events(kube, "kai-scheduler", cm, "ConfigApplied"), timeout=15)
    assert re.search(r"^kai_scheduler_config_valid 1(\.0)?$", metric(), re.M)
    submit("after")
    eventually(lambda: "after" in _bind_requests(kube, ns), timeout=30)


def test_a_pod_without_queue_label_goes_to_its_namespaces_queue(
    api: tuple[str, Kube], made: Made
) -> None:
    """The pod-grouper resolves a namespace to a queue as the mutating webhook does: from a
    QueueTree's leaf ``namespaces`` (before kai controller compiled it) and from the
    ``gitops.kai.scheduler/namespaces`` annotation of a compiled Queue; explicit labels win."""
    from kai.kube.resources import QUEUE_TREES

    kubeconfig, kube = api
    tag = uuid.uuid4().hex[:6]
    scheduler = f"kai-ns-{tag}"
    by_tree, by_queue, unmapped = f"tree-{tag}", f"compiled-{tag}", f"free-{tag}"
    for ns in (by_tree, by_queue, unmapped):
        _namespace(made, ns)
    made.create(
        QUEUE_TREES,
        {
            "apiVersion": "gitops.kai.scheduler/v1alpha1",
            "kind": "QueueTree",
            "metadata": {"name": f"t-{tag}"},
            "spec": {
                "queues": [
                    {
                        "name": f"dept-{tag}",
                        "children": [{"name": f"leaf-{tag}", "namespaces": [by_tree]}],
                    }
                ]
            },
        },
    )
    compiled = _queue(f"compiled-q-{tag}")
    compiled["metadata"]["annotations"] = {"gitops.kai.scheduler/namespaces": by_queue}
    made.create(QUEUES, compiled)
    made.start(kubeconfig, scheduler_name=scheduler, components=("podgrouper",))
    for ns in (by_tree, by_queue, unmapped):
        made.create(PODS, pod_manifest("bare", ns, None, scheduler_name=scheduler))
    made.create(PODS, pod_manifest("labelled", by_tree, f"own-{tag}", scheduler_name=scheduler))

    def queues() -> dict[tuple[str, str], str]:
        out = {}
        for ns in (by_tree, by_queue, unmapped):
            for pg in kube.list(PODGROUPS, namespace=ns)["items"]:
                owner = pg["metadata"]["ownerReferences"][0]["name"]
                out[(ns, owner)] = pg["spec"]["queue"]
        return out

    eventually(lambda: len(queues()) == 4, timeout=30)
    assert queues() == {
        (by_tree, "bare"): f"leaf-{tag}",
        (by_queue, "bare"): f"compiled-q-{tag}",
        (unmapped, "bare"): "default-queue",
        (by_tree, "labelled"): f"own-{tag}",
    }
