"""LeaderWorkerSet (leaderworkerset.x-k8s.io): one PodGroup per replica group (a leader and its
workers).

The LWS controller owns the leader StatefulSet; each leader pod owns its group's worker
StatefulSet. Pods carry ``leaderworkerset.sigs.k8s.io/group-index`` and
``leaderworkerset.sigs.k8s.io/worker-index`` (0 = the leader).
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
    md,
    segment_subgroups,
)
from kai.reconcilers.grouping.registry import default_plan, register
from kai.reconcilers.segments import SEGMENT_SIZE, SegmentError, plan_segments

GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


@register("leaderworkerset.x-k8s.io/*", "LeaderWorkerSet")
def leader_worker_set(chain: Chain) -> Plan:
    """minMember = ``size`` (``startupPolicy: LeaderCreated``, the default) or 1 while the
    leader is not scheduled under ``LeaderReady``; subgroups ``leader`` (1) and ``workers``
    (size - 1), or segments from ``subGroupPolicy.subGroupSize`` /
    ``kai.scheduler/segment-size`` (``LeaderWorker``: the leader is in segment 0;
    ``LeaderExcluded``: the workers alone are segmented)."""
    lws = chain.top
    template = dig(lws, "spec", "leaderWorkerTemplate") or {}
    size = count(lws, "spec.leaderWorkerTemplate.size", template.get("size"), 1)
    if size < 1:
        raise GroupingError(f"{describe(lws)}: spec.leaderWorkerTemplate.size must be at least 1")
    pod_labels = labels_of(chain.pod)
    raw_group = pod_labels.get(GROUP_INDEX)
    if raw_group is None:
        raise GroupingError(f"{describe(chain.pod)}: label {GROUP_INDEX} is missing")
    group = count(chain.pod, f"label {GROUP_INDEX}", raw_group)
    worker = count(chain.pod, f"label {WORKER_INDEX}", pod_labels.get(WORKER_INDEX), 0)
    plan = default_plan(chain)
    plan.name = f"pg-{md(lws)['name']}-{md(lws)['uid']}-group-{group}"
    leader_pending = (
        dig(lws, "spec", "startupPolicy") == "LeaderReady"
        and worker == 0
        and not dig(chain.pod, "spec", "nodeName")
    )
    if leader_pending:
        plan.min_member = 1
        return plan
    plan.min_member = size
    policy = template.get("subGroupPolicy") or {}
    worker_annotations = dict(annotations_of(template.get("workerTemplate") or {}))
    raw_size = policy.get("subGroupSize")
    if raw_size is not None:
        worker_annotations[SEGMENT_SIZE] = str(raw_size)
    excluded = policy.get("subGroupPolicyType") == "LeaderExcluded"
    members = size - 1 if excluded else size
    try:
        segments = (
            plan_segments(
                describe(lws),
                worker_annotations,
                members,
                None,
                annotations_of(lws),
                parent="workers" if excluded else "group",
            )
            if members > 1
            else None
        )
    except SegmentError as exc:
        raise GroupingError(str(exc)) from exc
    if segments is None:
        plan.subgroups = [leaf("leader", 1)]
        if size > 1:
            plan.subgroups.append(leaf("workers", size - 1))
        plan.subgroup = "leader" if worker == 0 else "workers"
        return plan
    plan.subgroups = segment_subgroups(segments)
    if excluded:
        plan.subgroups.insert(0, leaf("leader", 1))
        plan.subgroup = "leader" if worker == 0 else segments.segment_name(worker - 1)
    else:
        plan.subgroup = segments.segment_name(worker)
    return plan
