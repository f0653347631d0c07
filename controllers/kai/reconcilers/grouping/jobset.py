"""JobSet (jobset.x-k8s.io): one PodGroup per JobSet, a parent subgroup per replicatedJob and a
leaf per replica (one child Job), as KAI does since v0.16.

JobSet's pods carry ``jobset.sigs.k8s.io/replicatedjob-name`` and ``jobset.sigs.k8s.io/job-index``.
"""

from __future__ import annotations

from kai.reconcilers.grouping.base import (
    Chain,
    GroupingError,
    Plan,
    annotations_of,
    count,
    describe,
    dig,
    labels_of,
    leaf,
    min_member_annotation,
    topology_of,
)
from kai.reconcilers.grouping.registry import default_plan, register

REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"


@register("jobset.x-k8s.io/*", "JobSet")
def jobset(chain: Chain) -> Plan:
    """Leaf ``<rj>-replica-<i>``: minMember = the template's ``kai.scheduler/batch-min-member``
    else its ``parallelism`` (default 1); parent ``<rj>``: minSubGroup = its replicas; root
    minSubGroup = the JobSet's ``kai.scheduler/batch-min-member`` (capped at the number of
    replicatedJobs) else 1 with ``startupPolicyOrder: InOrder``, else every replicatedJob."""
    js = chain.top
    plan = default_plan(chain)
    rjobs = dig(js, "spec", "replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise GroupingError(f"{describe(js)}: spec.replicatedJobs is required")
    subgroups = []
    names = []
    for index, rjob in enumerate(rjobs):
        rjob = rjob if isinstance(rjob, dict) else {}
        path = f"spec.replicatedJobs[{index}]"
        name = rjob.get("name")
        if not name:
            raise GroupingError(f"{describe(js)}: {path}.name is required")
        names.append(str(name))
        replicas = count(js, f"{path}.replicas", rjob.get("replicas"), 1)
        template = rjob.get("template") or {}
        members = min_member_annotation(js, annotations_of(template)) or count(
            js, f"{path}.template.spec.parallelism", dig(template, "spec", "parallelism"), 1
        )
        topology = topology_of(annotations_of(template))
        subgroups.append({"name": str(name), "minSubGroup": replicas})
        for replica in range(replicas):
            subgroups.append(leaf(f"{name}-replica-{replica}", members, str(name), topology))
    root = min_member_annotation(js)
    if root:
        root = min(root, len(rjobs))
    elif dig(js, "spec", "startupPolicy", "startupPolicyOrder") == "InOrder":
        root = 1
    else:
        root = len(rjobs)
    plan.subgroups = subgroups
    plan.min_member = None
    plan.min_subgroup = root
    pod_labels = labels_of(chain.pod)
    rjob_name, job_index = pod_labels.get(REPLICATED_JOB), pod_labels.get(JOB_INDEX)
    if rjob_name in names and job_index is not None:
        plan.subgroup = f"{rjob_name}-replica-{count(chain.pod, f'label {JOB_INDEX}', job_index)}"
    return plan
