"""A ``minSubGroup`` above the number of children: never satisfied, as in KAI.
The job stays pending with a reason naming the subgroup, the minSubGroup and
the child count; nothing is scheduled in its place (no silent cap at the child count)."""

from __future__ import annotations

from builders import cluster, job, node, statuses, task

from kai.scheduler.jobs import build_subgroup_tree, unreachable_sets
from kai.scheduler.session import run_session
from kai.scheduler.snapshot import SubGroupSpec, TaskSpec


def _leaves() -> tuple[list[SubGroupSpec], list[TaskSpec]]:
    subgroups = [SubGroupSpec("a", None, min_available=1), SubGroupSpec("b", None, min_available=1)]
    tasks = [task("a-0", subgroup="a"), task("b-0", subgroup="b")]
    return subgroups, tasks


def test_root_min_subgroup_above_child_count_stays_pending_with_reason() -> None:
    subgroups, tasks = _leaves()
    snap = cluster([node("n0", gpus=4)], [job("j", tasks, subgroups=subgroups, min_subgroup=3)])
    result = run_session(snap, ["allocate"])
    assert {name: got[0] for name, got in statuses(result).items()} == {
        "a-0": "Pending",
        "b-0": "Pending",
    }
    (reason,) = result.job_reasons["j"]
    assert reason.code == "NotReady"
    assert "the job's root has minSubGroup 3 but only 2 child subgroups" in reason.message
    assert reason.details == {"subgroup": None, "minSubGroup": 3, "children": 2}


def test_inner_min_subgroup_above_child_count_names_the_subgroup() -> None:
    subgroups = [
        SubGroupSpec("g", None, min_subgroup=2),
        SubGroupSpec("g1", "g", min_available=1),
        SubGroupSpec("x", None, min_available=1),
    ]
    tasks = [task("g1-0", subgroup="g1"), task("x-0", subgroup="x")]
    snap = cluster([node("n0", gpus=4)], [job("j", tasks, subgroups=subgroups)])
    result = run_session(snap, ["allocate"])
    assert all(got[0] == "Pending" for got in statuses(result).values())
    (reason,) = result.job_reasons["j"]
    assert "subgroup 'g' has minSubGroup 2 but only 1 child subgroup;" in reason.message
    assert reason.details == {"subgroup": "g", "minSubGroup": 2, "children": 1}


def test_min_subgroup_equal_to_child_count_still_schedules() -> None:
    subgroups, tasks = _leaves()
    snap = cluster([node("n0", gpus=4)], [job("j", tasks, subgroups=subgroups, min_subgroup=2)])
    result = run_session(snap, ["allocate"])
    assert {got[0] for got in statuses(result).values()} == {"Binding"}
    assert "j" not in result.job_reasons


def test_threshold_is_not_capped_and_the_set_is_never_satisfied() -> None:
    subgroups, tasks = _leaves()
    spec = job("j", tasks, subgroups=subgroups, min_subgroup=3)
    root, podsets = build_subgroup_tree(spec)
    assert root.threshold == 3 and root.unreachable
    for podset in podsets.values():
        podset.active = podset.alive = 1  # every child satisfied and ready
    assert not root.satisfied and not root.ready
    assert unreachable_sets(root) == [root]


def test_running_job_under_unreachable_min_subgroup_is_stale() -> None:
    """docs/design/core.md: the project's stale rule is the gang rule, so a running job whose
    minSubGroup can never be met is stale (KAI, looking only at PodSets, would not call it so)."""
    subgroups, _ = _leaves()
    tasks = [
        task("a-0", subgroup="a", status="Running", node_name="n0"),
        task("b-0", subgroup="b", status="Running", node_name="n0"),
    ]
    spec = job("j", tasks, subgroups=subgroups, min_subgroup=3)
    snap = cluster([node("n0", gpus=4)], [spec], staleness_grace_period=0.0)
    result = run_session(snap, ["stalegangeviction"])
    assert {got[0] for got in statuses(result).values()} == {"Releasing"}
