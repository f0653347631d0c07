"""Which tasks of a job to place next (KAI ``GetTasksToAllocate``).

Gang phase: a SubGroupSet below its threshold K takes its K best children (subgrouporder) and
asks each for its missing tasks; a PodSet below its minimum gives ``min_available − active``
pending tasks in task order. Elastic phase (the set is satisfied): the first child in order that
has something to give gives it, and a satisfied PodSet gives exactly one extra task. So a gang is
placed all at once and extras one at a time, each time re-competing in queue order.
"""

from __future__ import annotations

from kai.scheduler.jobs import JobInfo, PodSet, SubGroupSet, TaskInfo
from kai.scheduler.ordering import ordered_children
from kai.scheduler.snapshot import TaskStatus


def _collect(node: PodSet | SubGroupSet) -> list[TaskInfo]:
    if isinstance(node, PodSet):
        pending = [t for t in node.tasks if t.status is TaskStatus.PENDING]
        if not node.satisfied:
            return pending[: node.min_available - node.active]
        return pending[:1]
    children = ordered_children(node)
    if not node.satisfied:
        out: list[TaskInfo] = []
        for child in children[: node.threshold]:
            if not child.satisfied:
                out.extend(_collect(child))
        return out
    for child in children:
        tasks = _collect(child)
        if tasks:
            return tasks
    return []


def tasks_to_allocate(job: JobInfo) -> list[TaskInfo]:
    return _collect(job.root)


def must_pipeline_whole_gang(job: JobInfo) -> bool:
    """A PodSet holding a pipelined task with fewer truly allocated tasks than its minimum: the
    job's allocations of this attempt must all become pipelined (no partial gang binds)."""
    for podset in job.podsets.values():
        if podset.allocated >= podset.min_available:
            continue
        if any(t.status is TaskStatus.PIPELINED for t in podset.tasks):
            return True
    return False
