"""The live scheduler's staleness rule (``kai.reconcilers.scheduler.is_stale``): its shortcut for
jobs without subgroups gives the subgroup tree's answer, for every gang size, ``minSubGroup``,
status mix and stray subgroup name."""

from __future__ import annotations

import random

import pytest

from kai.reconcilers.scheduler import is_stale
from kai.scheduler.jobs import DEFAULT_PODSET, build_subgroup_tree
from kai.scheduler.snapshot import ACTIVE_ALLOCATED_STATUSES, JobSpec, TaskSpec, TaskStatus


def _by_tree(job: JobSpec, statuses: dict[str, TaskStatus]) -> bool:
    if any(s is TaskStatus.SUCCEEDED for s in statuses.values()):
        return False
    if not any(s in ACTIVE_ALLOCATED_STATUSES for s in statuses.values()):
        return False
    root, podsets = build_subgroup_tree(job)
    for task in job.tasks:
        podset = podsets.get(task.subgroup or DEFAULT_PODSET)
        if podset is not None:
            podset.count(statuses[task.uid], 1)
    return not root.satisfied


@pytest.mark.parametrize("seed", range(20))
def test_flat_job_shortcut_matches_the_subgroup_tree(seed: int) -> None:
    rng = random.Random(seed)
    stale_seen = fresh_seen = 0
    for case in range(300):
        tasks = [
            TaskSpec(
                f"t{case}-{i}",
                f"t{i}",
                f"j{case}",
                TaskStatus.PENDING,
                1000.0,
                0.0,
                subgroup=rng.choice([None, None, None, DEFAULT_PODSET, "stray"]),
            )
            for i in range(rng.randint(1, 6))
        ]
        job = JobSpec(
            f"j{case}",
            f"j{case}",
            "q",
            50,
            True,
            0.0,
            tasks,
            min_available=rng.choice([None, 0, 1, 2, 3, 4, 7]),
            min_subgroup=rng.choice([None, None, 0, 1, 2]),
        )
        choices = list(TaskStatus)
        statuses = {t.uid: rng.choice(choices) for t in tasks}
        want = _by_tree(job, statuses)
        assert is_stale(job, statuses) is want, (job, statuses)
        stale_seen += want
        fresh_seen += not want
    assert stale_seen and fresh_seen  # both answers were exercised
