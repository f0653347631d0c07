"""Allocate action: gang, elastic, pipelining, limits, quotas, priorities, affinity, taints,
placement strategies, shared GPUs, MIG, subgroups."""

from __future__ import annotations

from builders import cluster, job, node, queue, statuses, task

from kai.scheduler.errors import UnsupportedActionError
from kai.scheduler.session import run_session
from kai.scheduler.snapshot import MigSpec, SubGroupSpec, Taint, Toleration


def run(snap):  # type: ignore[no-untyped-def]
    return run_session(snap, ["allocate"])


def test_unsupported_action_refused_before_running() -> None:
    snap = cluster([node("n0")], [job("a", [task("a-0")])])
    try:
        run_session(snap, ["allocate", "backfill"])
    except UnsupportedActionError as exc:
        assert exc.action == "backfill"
    else:  # pragma: no cover
        raise AssertionError("an unknown action must be refused")
    assert snap.jobs[0].tasks[0].status.value == "Pending"  # nothing ran


def test_every_task_is_reported() -> None:
    snap = cluster(
        [node("n0", gpus=1)],
        [job("a", [task("a-0")]), job("b", [task("b-0", status="Failed")])],
    )
    assert statuses(run(snap)) == {"a-0": ("Binding", "n0"), "b-0": ("Failed", None)}


def test_gang_placed_whole_or_not_at_all() -> None:
    snap = cluster(
        [node("n0", gpus=2), node("n1", gpus=1)],
        [job("big", [task(f"big-{i}") for i in range(4)]), job("small", [task("s-0")], age=-1)],
    )
    result = run(snap)
    got = statuses(result)
    assert all(got[f"big-{i}"] == ("Pending", None) for i in range(4))
    assert got["s-0"][0] == "Binding"
    assert "3 fit before" in result.job_reasons["big"][0].message


def test_elastic_jobs_grow_alternately() -> None:
    snap = cluster(
        [node("n0", gpus=4)],
        [
            job("a", [task(f"a-{i}") for i in range(4)], min_available=1, age=2),
            job("b", [task(f"b-{i}") for i in range(4)], min_available=1, age=1),
        ],
    )
    got = statuses(run(snap))
    assert sum(got[f"a-{i}"][0] == "Binding" for i in range(4)) == 2
    assert sum(got[f"b-{i}"][0] == "Binding" for i in range(4)) == 2


def test_pipelined_on_releasing_resources() -> None:
    snap = cluster(
        [node("n0", gpus=2)],
        [
            job("old", [task("old-0", gpus=2, status="Releasing", node_name="n0")], age=5),
            job("new", [task("new-0", gpus=1)]),
        ],
    )
    assert statuses(run(snap))["new-0"] == ("Pipelined", "n0")


def test_gang_with_a_pipelined_member_is_pipelined_whole() -> None:
    snap = cluster(
        [node("n0", gpus=1), node("n1", gpus=1)],
        [
            job("old", [task("old-0", gpus=1, status="Releasing", node_name="n1")], age=5),
            job("g", [task("g-0"), task("g-1")]),
        ],
    )
    got = statuses(run(snap))
    assert got["g-0"][0] == "Pipelined" and got["g-1"][0] == "Pipelined"


def test_binding_preferred_over_pipelining() -> None:
    snap = cluster(
        [node("n0", gpus=1), node("n1", gpus=1)],
        [
            job("old", [task("old-0", status="Releasing", node_name="n0")], age=5),
            job("new", [task("new-0")]),
        ],
    )
    assert statuses(run(snap))["new-0"] == ("Binding", "n1")


def test_queue_limit_is_never_exceeded() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("a", [task("a-0", gpus=2)]), job("b", [task("b-0", gpus=2)], age=-1)],
        queues=[queue("q", gpu=(1, 3, 1))],
    )
    result = run(snap)
    got = statuses(result)
    assert got["a-0"][0] == "Binding" and got["b-0"][0] == "Pending"
    assert result.job_reasons["b"][0].code == "OverLimit"


def test_parent_limit_applies_to_children() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("a", [task("a-0", gpus=3)])],
        queues=[queue("dept", gpu=(-1, 2, 1)), queue("q", parent="dept")],
    )
    result = run(snap)
    assert statuses(result)["a-0"][0] == "Pending"
    assert result.job_reasons["a"][0].code == "OverLimit"


def test_non_preemptible_job_stays_within_quota() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("np", [task("np-0", gpus=3)], priority=100)],
        queues=[queue("q", gpu=(2, -1, 1))],
    )
    result = run(snap)
    assert statuses(result)["np-0"][0] == "Pending"
    assert result.job_reasons["np"][0].code == "NonPreemptibleOverQuota"


def test_unknown_queue_and_inner_queue() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("a", [task("a-0")], queue_name="nope"), job("b", [task("b-0")], queue_name="dept")],
        queues=[queue("dept"), queue("q", parent="dept")],
    )
    result = run(snap)
    assert result.job_reasons["a"][0].code == "QueueDoesNotExist"
    assert result.job_reasons["b"][0].code == "QueueDoesNotExist"
    assert "not a leaf" in result.job_reasons["b"][0].message


def test_higher_priority_job_first() -> None:
    snap = cluster(
        [node("n0", gpus=1)],
        [
            job("low", [task("low-0")], priority=50, age=10),
            job("high", [task("hi-0")], priority=75),
        ],
    )
    got = statuses(run(snap))
    assert got["hi-0"][0] == "Binding" and got["low-0"][0] == "Pending"


def test_older_job_first_at_equal_priority() -> None:
    snap = cluster(
        [node("n0", gpus=1)],
        [job("young", [task("y-0")], age=1), job("old", [task("o-0")], age=2)],
    )
    assert statuses(run(snap))["o-0"][0] == "Binding"


def test_node_affinity_and_reason_counts() -> None:
    snap = cluster(
        [node("n0", gpus=1), node("n1", gpus=1), node("n2", gpus=0)],
        [job("a", [task("a-0", gpus=1, affinity={"kai.scheduler/type": ["n1", "n2"]})])],
    )
    assert statuses(run(snap))["a-0"] == ("Binding", "n1")
    snap = cluster(
        [node("n0", gpus=1), node("n1", gpus=0), node("n2", gpus=0)],
        [job("a", [task("a-0", gpus=1, affinity={"kai.scheduler/type": ["n1", "n2"]})])],
    )
    message = run(snap).job_reasons["a"][0].message
    assert "2 nodes: insufficient gpu" in message and "1 node: node affinity mismatch" in message


def test_taints_and_tolerations() -> None:
    tainted = node("n0", taints=(Taint("dedicated", "infer", "NoSchedule"),))
    snap = cluster([tainted], [job("a", [task("a-0")])])
    assert statuses(run(snap))["a-0"][0] == "Pending"
    tol = (Toleration("dedicated", "Equal", "infer", "NoSchedule"),)
    snap = cluster([tainted], [job("a", [task("a-0", tolerations=tol)])])
    assert statuses(run(snap))["a-0"][0] == "Binding"


def test_not_ready_and_unschedulable_nodes_are_skipped() -> None:
    snap = cluster(
        [node("n0", ready=False), node("n1", unschedulable=True), node("n2", gpus=1)],
        [job("a", [task("a-0")])],
    )
    assert statuses(run(snap))["a-0"] == ("Binding", "n2")


def test_binpack_and_spread() -> None:
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    running = job("r", [task("r-0", gpus=2, status="Running", node_name="n1")], age=9)
    snap = cluster(nodes, [running, job("a", [task("a-0")])])
    assert statuses(run(snap))["a-0"] == ("Binding", "n1")
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    running = job("r", [task("r-0", gpus=2, status="Running", node_name="n1")], age=9)
    snap = cluster(nodes, [running, job("a", [task("a-0")])], placement_gpu="spread")
    assert statuses(run(snap))["a-0"] == ("Binding", "n0")


def test_cpu_only_task_prefers_cpu_only_node() -> None:
    snap = cluster(
        [node("a-gpu", gpus=4), node("b-cpu", gpus=0)],
        [job("c", [task("c-0", gpus=0)])],
    )
    assert statuses(run(snap))["c-0"] == ("Binding", "b-cpu")


def test_fractions_share_a_device_and_pack() -> None:
    snap = cluster(
        [node("n0", gpus=2)],
        [
            job("a", [task("a-0", fraction=0.5)], age=3),
            job("b", [task("b-0", fraction=0.5)], age=2),
            job("c", [task("c-0", gpus=1)], age=1),
        ],
    )
    result = run(snap)
    assert result.tasks["a-0"].gpu_groups == result.tasks["b-0"].gpu_groups == ("n0/0",)
    assert result.tasks["c-0"].status.value == "Binding"


def test_new_device_ids_avoid_existing_ones() -> None:
    snap = cluster(
        [node("n0", gpus=2)],
        [
            job(
                "r", [task("r-0", fraction=0.7, status="Running", node_name="n0", groups=("n0/0",))]
            ),
            job("a", [task("a-0", fraction=0.5)]),
        ],
    )
    result = run(snap)
    assert result.tasks["a-0"].gpu_groups == ("n0/1",)


def test_shared_device_not_offered_to_whole_gpu_requests() -> None:
    snap = cluster(
        [node("n0", gpus=1)],
        [
            job(
                "r", [task("r-0", fraction=0.2, status="Running", node_name="n0", groups=("n0/0",))]
            ),
            job("a", [task("a-0", gpus=1)]),
        ],
    )
    assert statuses(run(snap))["a-0"][0] == "Pending"


def test_gpu_memory_request_and_spread_devices() -> None:
    snap = cluster(
        [node("n0", gpus=2)],
        [job("a", [task("a-0", gpu_memory=30), task("a-1", gpu_memory=30)])],
        gpu_sharing_placement="spread",
    )
    result = run(snap)
    assert {result.tasks["a-0"].gpu_groups, result.tasks["a-1"].gpu_groups} == {
        ("n0/0",),
        ("n0/1",),
    }


def test_new_device_needs_two_pod_slots() -> None:
    snap = cluster([node("n0", gpus=1, max_pods=1)], [job("a", [task("a-0", fraction=0.5)])])
    assert statuses(run(snap))["a-0"][0] == "Pending"


def test_mig_requests_only_on_mixed_mig_nodes() -> None:
    mig = MigSpec("mixed", 1, (("nvidia.com/mig-1g.10gb", 2),))
    snap = cluster(
        [node("a-plain", gpus=4), node("b-mig", gpus=0, mig=mig)],
        [job("m", [task("m-0", mig={"nvidia.com/mig-1g.10gb": 1})])],
    )
    assert statuses(run(snap))["m-0"] == ("Binding", "b-mig")


def test_subgroups_every_leaf_reaches_its_minimum() -> None:
    subgroups = [
        SubGroupSpec("leader", None, min_available=1),
        SubGroupSpec("workers", None, min_available=2),
    ]
    tasks = [
        task("l-0", subgroup="leader"),
        task("w-0", subgroup="workers"),
        task("w-1", subgroup="workers"),
        task("w-2", subgroup="workers"),
    ]
    snap = cluster([node("n0", gpus=3)], [job("j", tasks, subgroups=subgroups)])
    got = statuses(run(snap))
    assert got["l-0"][0] == "Binding"
    assert sum(got[f"w-{i}"][0] == "Binding" for i in range(3)) == 2


def test_min_subgroup_allows_optional_children() -> None:
    subgroups = [SubGroupSpec("a", None, min_available=2), SubGroupSpec("b", None, min_available=2)]
    tasks = [task("a-0", subgroup="a"), task("a-1", subgroup="a")]
    tasks += [task("b-0", subgroup="b"), task("b-1", subgroup="b")]
    snap = cluster([node("n0", gpus=3)], [job("j", tasks, subgroups=subgroups, min_subgroup=1)])
    got = statuses(run(snap))
    assert sorted(v[0] for v in got.values()) == ["Binding", "Binding", "Pending", "Pending"]


def test_task_priority_orders_tasks_inside_a_job() -> None:
    tasks = [task("t-a"), task("t-b", priority=1), task("t-c", priority=5)]
    snap = cluster([node("n0", gpus=1)], [job("j", tasks, min_available=1)])
    got = statuses(run(snap))
    assert got["t-c"][0] == "Binding"


def test_pod_anti_affinity_spreads_replicas() -> None:
    tasks = [
        task(
            f"r-{i}",
            labels={"app": "web"},
            pod_anti_affinity=("kubernetes.io/hostname", {"app": "web"}),
        )
        for i in range(3)
    ]
    nodes = [node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}) for i in range(2)]
    got = statuses(run(cluster(nodes, [job("j", tasks, min_available=1)])))
    placed = [v[1] for v in got.values() if v[0] == "Binding"]
    assert sorted(placed) == ["n0", "n1"]


def test_pod_affinity_follows_placed_task() -> None:
    nodes = [node(f"n{i}", labels={"zone": f"z{i}"}) for i in range(3)]
    jobs = [
        job("db", [task("db-0", status="Running", node_name="n2", labels={"app": "db"})], age=5),
        job("web", [task("web-0", pod_affinity=("zone", {"app": "db"}))]),
    ]
    assert statuses(run(cluster(nodes, jobs)))["web-0"] == ("Binding", "n2")


def test_cpu_and_memory_fit_are_enforced() -> None:
    snap = cluster(
        [node("n0", gpus=4, cpu=2000)],
        [job("a", [task("a-0", cpu=1500)]), job("b", [task("b-0", cpu=1000)], age=-1)],
    )
    result = run(snap)
    assert statuses(result)["b-0"][0] == "Pending"
    assert "insufficient cpu" in result.job_reasons["b"][0].message


def test_proportion_disabled_ignores_limits() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("a", [task("a-0", gpus=4)])],
        queues=[queue("q", gpu=(0, 1, 1))],
        proportion=False,
    )
    assert statuses(run(snap))["a-0"][0] == "Binding"


def test_queue_depth_per_action_limits_jobs_per_leaf_queue() -> None:
    snap = cluster(
        [node("n0", gpus=4)],
        [job(f"j{i}", [task(f"j{i}-0")], age=10 - i) for i in range(4)],
        queue_depth_per_action={"allocate": 2},
    )
    got = statuses(run(snap))
    assert [got[f"j{i}-0"][0] for i in range(4)] == ["Binding", "Binding", "Pending", "Pending"]


def test_job_with_too_few_tasks_for_its_gang_is_not_ready() -> None:
    specs = [task("g-0"), task("g-1", status="Gated")]
    snap = cluster([node("n0", gpus=4)], [job("g", specs, min_available=2)])
    result = run(snap)
    assert statuses(result)["g-0"][0] == "Pending"
    assert result.job_reasons["g"][0].code == "NotReady"


def test_elastic_extra_pipelined_alone_keeps_the_gang_bound() -> None:
    snap = cluster(
        [node("n0", gpus=1), node("n1", gpus=1)],
        [
            job("old", [task("old-0", status="Releasing", node_name="n1")], age=9),
            job("e", [task("e-0"), task("e-1")], min_available=1),
        ],
    )
    got = statuses(run(snap))
    assert {got["e-0"][0], got["e-1"][0]} == {"Binding", "Pipelined"}


def test_multi_device_fraction_takes_distinct_devices() -> None:
    snap = cluster([node("n0", gpus=2)], [job("m", [task("m-0", fraction=0.5, num_devices=2)])])
    result = run(snap)
    assert sorted(result.tasks["m-0"].gpu_groups) == ["n0/0", "n0/1"]
    assert result.binds[0].received_resource_type == "Fraction"
    assert result.binds[0].gpu_count == 2


def test_mig_single_strategy_takes_no_profile_requests() -> None:
    mig = MigSpec("single", 1, (("nvidia.com/mig-1g.10gb", 7),))
    snap = cluster(
        [node("n0", gpus=7, mig=mig)],
        [job("m", [task("m-0", mig={"nvidia.com/mig-1g.10gb": 1})])],
    )
    result = run(snap)
    assert statuses(result)["m-0"][0] == "Pending"
    assert "MIG instances are only on MIG nodes" in result.job_reasons["m"][0].message


def test_fraction_pipelined_onto_releasing_shared_memory() -> None:
    snap = cluster(
        [node("n0", gpus=1)],
        [
            job(
                "r",
                [
                    task("r-0", fraction=0.5, status="Running", node_name="n0", groups=("n0/7",)),
                    task("r-1", fraction=0.5, status="Releasing", node_name="n0", groups=("n0/7",)),
                ],
                age=9,
                min_available=1,
            ),
            job("f", [task("f-0", fraction=0.5)]),
        ],
    )
    result = run(snap)
    assert statuses(result)["f-0"] == ("Pipelined", "n0")
    assert result.tasks["f-0"].gpu_groups == ("n0/7",)


def test_orphan_queue_subtree_is_dropped() -> None:
    snap = cluster(
        [node("n0", gpus=8)],
        [job("a", [task("a-0")], queue_name="leaf"), job("b", [task("b-0")], queue_name="q")],
        queues=[queue("q"), queue("mid", parent="gone"), queue("leaf", parent="mid")],
    )
    result = run(snap)
    assert result.job_reasons["a"][0].code == "QueueDoesNotExist"
    assert "'gone'" in result.job_reasons["a"][0].message
    assert statuses(result)["b-0"][0] == "Binding"
