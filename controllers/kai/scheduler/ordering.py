"""Order of jobs in a queue, of children in a subgroup tree, and of tasks in a PodSet.
Each order is one fixed chain of rules, written as a sort key so
that no comparison can disagree with another."""

from __future__ import annotations

from kai.scheduler.jobs import JobInfo, PodSet, SubGroupSet
from kai.scheduler.snapshot import TaskSpec

KUBEFLOW_ROLE = "training.kubeflow.org/job-role"
RAY_NODE_TYPE = "ray.io/node-type"


def job_order_key(job: JobInfo) -> tuple[object, ...]:
    """priority (higher first) -> elastic state (below gang, at gang, above) -> older first ->
    name -> uid."""
    return (-job.priority, job.elastic_state(), job.spec.created_at, job.name, job.uid)


def task_order_key(task: TaskSpec) -> tuple[object, ...]:
    """kubeflow master/launcher first -> ray head first -> task priority (labelled before
    unlabelled, higher first) -> older first -> name -> uid."""
    role = task.labels.get(KUBEFLOW_ROLE)
    kubeflow = 0 if role in ("master", "launcher") else 1
    ray = 0 if task.labels.get(RAY_NODE_TYPE) == "head" else 1
    if task.priority is None:
        priority: tuple[int, int] = (1, 0)
    else:
        priority = (0, -task.priority)
    return (kubeflow, ray, priority, task.created_at, task.name, task.uid)


def child_order_key(child: PodSet | SubGroupSet) -> tuple[object, ...]:
    """subgrouporder: unsatisfied first; among satisfied, required (threshold > 0) before
    optional; two optional: fewer allocated first; two required: lower allocated/threshold;
    then name."""
    if not child.satisfied:
        return (0, 0, 0.0, child.name)
    threshold = child.threshold
    allocated = child.satisfied_count
    if threshold > 0:
        return (1, 0, allocated / threshold, child.name)
    return (1, 1, float(allocated), child.name)


def ordered_children(group: SubGroupSet) -> list[PodSet | SubGroupSet]:
    if len(group.children) == 1:
        return list(group.children)
    return sorted(group.children, key=child_order_key)
