"""``kai explain``: why one pod or PodGroup is pending, with numbers, from the scheduler's core.

One session is run on the snapshot with the scheduler's actions (exactly what the live
scheduler's next cycle would do); the job's reasons are sorted into the pending-reason taxonomy
(:mod:`kai.scheduler.reasons`), the queue path is read from the core's fair-share division, the
job's position from the registry's job order, and a concrete hint says what would unblock it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kai.insight.decisions import pod_name
from kai.insight.figures import RESOURCES, amount, queue_path, with_unit
from kai.reconcilers import missing_podgroup
from kai.reconcilers.cluster_snapshot import ClusterSnapshot
from kai.reconcilers.snapshot_builder import POD_GROUP_ANNOTATION, BuiltSnapshot
from kai.scheduler.predicates import TAINT, tolerates
from kai.scheduler.reasons import (
    Classified,
    PendingReason,
    classify_job,
    cycle_facts,
    node_counts,
)
from kai.scheduler.result import SessionResult
from kai.scheduler.snapshot import (
    ACTIVE_ALLOCATED_STATUSES,
    ALLOCATED_STATUSES,
    JobSpec,
    Taint,
    TaskStatus,
)

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")  # what TaintToleration filters on


class TargetError(LookupError):
    """The pod or PodGroup named is not in the snapshot, or the name is ambiguous."""


@dataclass
class MissingPodGroup:
    """A pod of kai's that names, in its ``pod-group-name`` annotation, a PodGroup that does not
    exist: it is no task of any job, so no cycle considers it."""

    pod: str  # namespace/name
    podgroup: str  # namespace/name of the PodGroup it names
    message: str
    others: list[str] = field(default_factory=list)  # other pods naming the same PodGroup

    def as_dict(self) -> dict[str, Any]:
        return {
            "podGroup": self.podgroup,
            "pod": self.pod,
            "queue": None,
            "state": "Pending",
            "tasks": {"total": 0, "placed": 0},
            "minAvailable": None,
            "firstReason": {"reason": missing_podgroup.REASON, "message": self.message},
            "otherReasons": [],
            "queuePath": [],
            "positionInQueue": None,
            "podsNamingIt": [self.pod, *self.others],
            "unblock": self.unblock,
        }

    @property
    def unblock(self) -> list[str]:
        namespace, _, name = self.podgroup.partition("/")
        return [
            f"create PodGroup {name} in namespace {namespace}, or correct the pod's "
            f"{POD_GROUP_ANNOTATION} annotation"
        ]


def find_missing_podgroup(
    snap: ClusterSnapshot, built: BuiltSnapshot, target: str
) -> MissingPodGroup | None:
    """The waiting pod named ``target`` (or the first of the pods naming the PodGroup
    ``target``) whose PodGroup does not exist in ``snap``; None when there is none."""
    namespace, _, name = target.rpartition("/")
    existing = {
        (str(md.get("namespace") or ""), str(md.get("name") or ""))
        for md in ((pg.get("metadata") or {}) for pg in snap.objects.get("podgroups", []))
    }
    found = missing_podgroup.missing(built.ungrouped, lambda ns, pg: (ns, pg) in existing)
    pods = [
        (f"{md.get('namespace')}/{md.get('name')}", f"{md.get('namespace')}/{pg}", pg)
        for md, pg in (((pod.get("metadata") or {}), pg) for pod, pg in found)
        if not namespace or md.get("namespace") == namespace
    ]
    matches = [p for p in pods if p[0].rpartition("/")[2] == name] or [
        p for p in pods if p[2] == name
    ]
    if not matches:
        return None
    pod, group, pg = sorted(matches)[0]
    others = sorted(p[0] for p in pods if p[1] == group and p[0] != pod)
    return MissingPodGroup(
        pod=pod,
        podgroup=group,
        message=missing_podgroup.message(group.partition("/")[0], pg),
        others=others,
    )


@dataclass
class Explanation:
    job: JobSpec
    pod: str | None
    state: str  # Pending | PartlyRunning | Running
    placed: int
    reasons: list[Classified]
    path: list[dict[str, Any]]
    position: int | None
    waiting: int
    unblock: list[str] = field(default_factory=list)
    # the taints (kubectl's KEY[=VALUE]:EFFECT) that keep its pending pods off nodes, with
    # the number of nodes each one keeps them off; only when a node fails on a taint
    taints: dict[str, int] = field(default_factory=dict)
    # the pods placed whose bind has not completed, each with its BindRequest's state
    binding: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        first = self.reasons[0].as_dict() if self.reasons else None
        if first is not None and self.taints:
            first["untoleratedTaints"] = dict(self.taints)
        return {
            "podGroup": f"{self.job.namespace}/{self.job.name}",
            "pod": self.pod,
            "queue": self.job.queue,
            "state": self.state,
            "tasks": {"total": len(self.job.tasks), "placed": self.placed},
            "minAvailable": self.job.min_available or 1,
            "firstReason": first,
            "otherReasons": [r.as_dict() for r in self.reasons[1:]],
            "queuePath": self.path,
            "positionInQueue": (
                None if self.position is None else {"position": self.position, "of": self.waiting}
            ),
            "unblock": self.unblock,
            "waitingForBind": self.binding,
        }


def find_job(built: BuiltSnapshot, target: str) -> tuple[JobSpec, str | None]:
    """The job of ``[NAMESPACE/]NAME``: a PodGroup of that name, else the PodGroup of a pod of
    that name. Raises :class:`TargetError` when there is none or several."""
    namespace, _, name = target.rpartition("/")
    jobs = built.snapshot.jobs
    groups = [j for j in jobs if j.name == name and (not namespace or j.namespace == namespace)]
    if len(groups) == 1:
        return groups[0], None
    by_uid = {j.uid: j for j in jobs}
    pods: list[tuple[JobSpec, str]] = []
    for job in jobs:
        for task in job.tasks:
            if task.name == name and (not namespace or task.namespace == namespace):
                pods.append((by_uid[job.uid], f"{task.namespace}/{task.name}"))
    if not groups and len(pods) == 1:
        return pods[0]
    found = [f"PodGroup {j.namespace}/{j.name}" for j in groups] + [f"pod {p}" for _, p in pods]
    if found:
        raise TargetError(f"{target!r} is ambiguous: {', '.join(found)}; name it as NAMESPACE/NAME")
    raise TargetError(
        f"no PodGroup or pod {target!r} in the snapshot (pods of other schedulers and pods "
        "without a PodGroup are not kai's to schedule)"
    )


def run(snap: ClusterSnapshot, node_pool: str | None = None) -> tuple[BuiltSnapshot, SessionResult]:
    """The next cycle of the live scheduler of ``node_pool`` (default: the snapshot's) on
    ``snap``: its builder, its inputs (pool, settings, sharing modes), its actions, its core."""
    from kai.scheduler.session import run_session

    built = snap.build(node_pool=node_pool)
    return built, run_session(built.snapshot)


def explain(
    snap: ClusterSnapshot,
    target: str,
    computed: tuple[BuiltSnapshot, SessionResult] | None = None,
) -> Explanation | MissingPodGroup:
    # the target as the scheduler of its own node pool sees it
    built, result = computed or run(snap, snap.pool_of_target(target))
    try:
        job, pod = find_job(built, target)
    except TargetError:
        lonely = find_missing_podgroup(snap, built, target)
        if lonely is None:
            raise
        return lonely
    placed_statuses = {*ACTIVE_ALLOCATED_STATUSES, TaskStatus.PIPELINED}
    placed = sum(
        1
        for t in job.tasks
        if t.uid in result.tasks and result.tasks[t.uid].status in placed_statuses
    )
    running = sum(
        1
        for t in job.tasks
        if t.uid in result.tasks and result.tasks[t.uid].status in ALLOCATED_STATUSES
    )
    reasons = classify_job(job, result, cycle_facts(built.snapshot, result))
    binding = _binding(built, result, job)
    if binding and running == len(job.tasks):
        state = "Binding"  # placed, but a bind has not completed: no node yet
    elif running == len(job.tasks) and job.tasks:
        state = "Running"
    elif running:
        state = "PartlyRunning"
    else:
        state = "Pending"
    position, waiting = _position(built, job)
    counts = node_counts(reasons[0].message) if reasons else {}
    return Explanation(
        job=job,
        pod=pod,
        state=state,
        placed=placed,
        reasons=reasons,
        path=_path(built, result, job.queue),
        position=position,
        waiting=waiting,
        unblock=_unblock(built, result, job, reasons) or _bind_hint(binding),
        binding=binding,
        taints=_untolerated_taints(built, job) if TAINT in counts else {},
    )


def _binding(built: BuiltSnapshot, result: SessionResult, job: JobSpec) -> list[str]:
    """The job's pods that have a BindRequest but no node yet, each with its state."""
    out = []
    for task in job.tasks:
        outcome = result.tasks.get(task.uid)
        status = outcome.status if outcome is not None else task.status
        if status is not TaskStatus.BINDING or task.status is not TaskStatus.BINDING:
            continue
        br = built.bind_requests.get(task.uid) or {}
        md, spec = br.get("metadata") or {}, br.get("spec") or {}
        st = br.get("status") or {}
        groups = ", ".join(str(g) for g in spec.get("selectedGPUGroups") or [])
        where = f"node {spec.get('selectedNode') or '?'}" + (
            f" (GPU group {groups})" if groups else ""
        )
        if not st.get("phase"):
            state = "no status yet: the binder has not completed it"
        else:
            attempts = st.get("failedAttempts")
            state = f"phase {st['phase']}" + (f", {attempts} failed attempt(s)" if attempts else "")
            if st.get("reason"):
                state += f": {st['reason']}"
        out.append(
            f"pod {task.namespace}/{task.name}: BindRequest {md.get('namespace')}/"
            f"{md.get('name')} to {where}, {state}"
        )
    return out


def _bind_hint(binding: list[str]) -> list[str]:
    if not binding:
        return []
    return [
        "runs once the binder binds it: a shared GPU is bound only when its reservation pod "
        "runs on the node and reports its GPU (the node's GPU device plugin); the binder's "
        "log says what it waits for"
    ]


def taint_text(taint: Taint) -> str:
    """A taint as ``kubectl taint`` writes it: ``KEY[=VALUE]:EFFECT``."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def _untolerated_taints(built: BuiltSnapshot, job: JobSpec) -> dict[str, int]:
    """Each NoSchedule/NoExecute taint that one of the job's pending pods does not tolerate,
    with the number of nodes carrying it (most nodes first, then by name)."""
    pending = [t for t in job.tasks if t.status is TaskStatus.PENDING]
    kinds = {t.tolerations for t in pending}
    found: dict[str, set[str]] = {}
    for node in built.snapshot.nodes:
        for taint in node.taints:
            if taint.effect not in _BLOCKING_EFFECTS:
                continue
            if any(not tolerates(tolerations, taint) for tolerations in kinds):
                found.setdefault(taint_text(taint), set()).add(node.name)
    ordered = sorted(found.items(), key=lambda item: (-len(item[1]), item[0]))
    return {text: len(nodes) for text, nodes in ordered}


def _path(built: BuiltSnapshot, result: SessionResult, leaf: str) -> list[dict[str, Any]]:
    queues = built.snapshot.queues
    by_name = {q.name: q for q in queues}
    out = []
    for name in queue_path(queues, leaf):
        spec = by_name[name]
        share = result.queues.get(name)
        per: dict[str, Any] = {}
        for r in RESOURCES:
            res = spec.resources.get(r)
            per[r] = {
                "quota": res.quota if res else 0.0,
                "limit": res.limit if res else -1.0,
                "fairShare": round(share.fair_share.get(r, 0.0), 6) if share else 0.0,
                "allocated": round(share.allocated.get(r, 0.0), 6) if share else 0.0,
                "requested": round(share.requested.get(r, 0.0), 6) if share else 0.0,
            }
        out.append({"queue": name, "resources": per})
    return out


def _position(built: BuiltSnapshot, job: JobSpec) -> tuple[int | None, int]:
    """1-based place of ``job`` among its queue's jobs with pending tasks, in the core's job
    order (the registry's ``job_order``), at the start of the cycle."""
    from kai.scheduler.session import Session

    session = Session(built.snapshot)
    mine = [j for j in session.jobs if j.spec.queue == job.queue and j.pending > 0]
    mine.sort(key=session.registry.job_order)
    for i, other in enumerate(mine):
        if other.uid == job.uid:
            return i + 1, len(mine)
    return None, len(mine)


def _gpus(job: JobSpec, pending_only: bool = True) -> tuple[float, float]:
    """(GPUs of the job's pending tasks, GPUs of its largest pending task)."""
    total = largest = 0.0
    for task in job.tasks:
        if pending_only and task.status is not TaskStatus.PENDING:
            continue
        g = task.gpu
        each = float(g.whole) if g.whole else (g.fraction or 0.0) * g.num_devices
        total += each
        largest = max(largest, each)
    return total, largest


def _number(details: Mapping[str, object], key: str) -> float:
    value = details.get(key, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


def _unblock(
    built: BuiltSnapshot, result: SessionResult, job: JobSpec, reasons: list[Classified]
) -> list[str]:
    """What would unblock the job, for its first reason."""
    if not reasons:
        return []
    first = reasons[0]
    kind = first.reason
    if kind in (PendingReason.QUEUE_DOES_NOT_EXIST, PendingReason.QUEUE_NOT_LEAF):
        return _queue_hint(built, job, kind)
    if kind in (PendingReason.OVER_LIMIT, PendingReason.NON_PREEMPTIBLE_OVER_QUOTA):
        return _capacity_hint(first)
    if kind is PendingReason.PREEMPTION_DELAY_NOT_ELAPSED:
        return _delay_hint(first)
    if kind is PendingReason.WAITING_FOR_FAIR_SHARE:
        return _fair_share_hint(built, result, job)
    if kind in (PendingReason.NO_NODE_FITS, PendingReason.GANG_DOES_NOT_FIT):
        return _fit_hint(built, job, first)
    if kind is PendingReason.TOPOLOGY_DOES_NOT_FIT:
        total, _ = _gpus(job)
        return [
            f"fits once {amount('gpu', total)} GPUs are free inside one domain of its "
            "required topology level (or with a looser topology constraint)"
        ]
    return _release_hint(built, first)


def _release_hint(built: BuiltSnapshot, first: Classified) -> list[str]:
    if first.reason is PendingReason.WAITING_FOR_EVICTION:
        uids = first.details.get("evicted")
        evicted = [pod_name(built, str(uid)) for uid in uids] if isinstance(uids, list) else []
        return [f"binds once the evicted pods are gone: {', '.join(evicted)}"]
    return ["binds once the pods being released on its nodes are gone"]


def _delay_hint(first: Classified) -> list[str]:
    until = first.details.get("until")
    when = (
        datetime.fromtimestamp(float(until), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if isinstance(until, int | float)
        else "its preemption delay ends"
    )
    return [
        f"may evict other jobs from {when} (spec.preemptionDelay), or at once without the delay"
    ]


def _queue_hint(built: BuiltSnapshot, job: JobSpec, kind: PendingReason) -> list[str]:
    queues = built.snapshot.queues
    if kind is PendingReason.QUEUE_NOT_LEAF:
        children = sorted(q.name for q in queues if q.parent == job.queue)
        return [f"submit to one of the leaf queues under {job.queue!r}: {', '.join(children)}"]
    parents = {q.parent for q in queues}
    leaves = sorted(q.name for q in queues if q.name not in parents)
    return [
        f"create leaf queue {job.queue!r}, or set the label kai.scheduler/queue to an "
        f"existing leaf queue ({', '.join(leaves[:8]) or 'none exists'})"
    ]


def _capacity_hint(first: Classified) -> list[str]:
    d = first.details
    r = str(d.get("resource", "gpu"))
    queue = d.get("queue")
    requested = _number(d, "requested")
    if first.reason is PendingReason.OVER_LIMIT:
        limit, have = _number(d, "limit"), _number(d, "allocated")
        free = max(0.0, have + requested - limit)
        return [
            f"queue {queue!r} at limit {with_unit(r, limit)} ({amount(r, have)} allocated): "
            f"it starts once {with_unit(r, free)} of the queue's jobs are released, or "
            f"with a limit of at least {amount(r, have + requested)}"
        ]
    quota, have = _number(d, "quota"), _number(d, "allocated_non_preemptible")
    return [
        f"queue {queue!r} has {amount(r, have)} of its {with_unit(r, quota)} quota held by "
        f"non-preemptible jobs: it starts once {with_unit(r, have + requested - quota)} "
        "of those are released, with a quota of at least "
        f"{amount(r, have + requested)}, or as a preemptible job (priority below 100)"
    ]


def _fair_share_hint(built: BuiltSnapshot, result: SessionResult, job: JobSpec) -> list[str]:
    share = result.queues.get(job.queue)
    spec = next((q for q in built.snapshot.queues if q.name == job.queue), None)
    total, _ = _gpus(job)
    if share is None or spec is None:
        return []
    alloc = share.allocated.get("gpu", 0.0)
    fair = share.fair_share.get("gpu", 0.0)
    res = spec.resources.get("gpu")
    quota = res.quota if res else 0.0
    hints = [
        f"queue {job.queue!r}: {amount('gpu', alloc)} GPUs allocated, fair share "
        f"{amount('gpu', fair)}, quota {amount('gpu', quota)}; the job needs "
        f"{amount('gpu', total)} more"
    ]
    over = []
    for name, other in sorted(result.queues.items()):
        ospec = next((q for q in built.snapshot.queues if q.name == name), None)
        ores = ospec.resources.get("gpu") if ospec else None
        if ospec is None or name == job.queue or ores is None or ores.quota < 0:
            continue
        leaf = all(q.parent != name for q in built.snapshot.queues)
        extra = other.allocated.get("gpu", 0.0) - ores.quota
        if leaf and extra > 1e-9:
            over.append(f"{name} ({amount('gpu', extra)} GPUs over its quota)")
    if alloc + total <= quota + 1e-9 and over:
        hints.append(
            "it is within its quota and may reclaim from queues over theirs once the victims "
            f"pass the reclaim rules: {', '.join(over[:5])}"
        )
    elif over:
        hints.append(
            f"it would reclaim from {', '.join(over[:5])} if queue {job.queue!r} were under its "
            f"quota ({amount('gpu', alloc + total - quota)} GPUs more quota, or that much "
            "released by its own jobs)"
        )
    else:
        hints.append(
            "no other queue is over its quota: it starts when its own queue's jobs release "
            "GPUs, or when the other queues' demand falls and its fair share grows"
        )
    return hints


def _fit_hint(built: BuiltSnapshot, job: JobSpec, first: Classified) -> list[str]:
    from kai.scheduler.resource_layout import GPU
    from kai.scheduler.session import Session

    session = Session(built.snapshot)
    idle = session.nodes.idle[:, GPU]
    best = float(idle.max()) if len(idle) else 0.0
    biggest = float(session.nodes.allocatable[:, GPU].max()) if len(idle) else 0.0
    total, largest = _gpus(job)
    hints = []
    if first.reason is PendingReason.GANG_DOES_NOT_FIT:
        hints.append(
            f"its gang needs {job.min_available or 1} tasks placed together "
            f"({amount('gpu', total)} GPUs pending in all); the cluster has "
            f"{amount('gpu', float(idle.sum()))} GPUs idle"
        )
    if largest > biggest + 1e-9:
        hints.append(
            f"no node has {amount('gpu', largest)} GPUs (the largest has "
            f"{amount('gpu', biggest)}): it never fits as it is; ask for at most "
            f"{amount('gpu', biggest)} GPUs per pod"
        )
    elif largest > best + 1e-9:
        where = ""
        counts = first.as_dict().get("nodes") or {}
        if counts:
            where = " on a node that passes its other filters"
        hints.append(
            f"fits once {amount('gpu', largest)} GPUs are free{where} "
            f"(the most idle on one node now: {amount('gpu', best)})"
        )
    elif not hints:
        hints.append("its filters rule out the nodes with room: see the node counts above")
    return hints


def text(ex: Explanation | MissingPodGroup) -> str:
    """The explanation for people."""
    if isinstance(ex, MissingPodGroup):
        lines = [
            f"pod {ex.pod}  Pending: in no PodGroup",
            f"first reason: {missing_podgroup.REASON}: {ex.message}",
        ]
        if ex.others:
            lines.append(f"also naming it: {', '.join(ex.others)}")
        lines += [f"would unblock: {hint}" for hint in ex.unblock]
        return "\n".join(lines) + "\n"
    job = ex.job
    lines = [
        f"PodGroup {job.namespace}/{job.name}"
        + (f" (pod {ex.pod})" if ex.pod else "")
        + f"  queue {job.queue}  {ex.state}: {ex.placed} of {len(job.tasks)} task(s) placed, "
        f"minimum {job.min_available or 1}"
    ]
    if ex.reasons:
        first = ex.reasons[0]
        lines.append(f"first reason: {first.reason.value}: {first.message}")
        counts = first.as_dict().get("nodes")
        if isinstance(counts, dict):
            for reason, n in counts.items():
                lines.append(f"    {n:>5} node(s): {reason}")
                if reason == TAINT:
                    for taint, on in ex.taints.items():
                        lines.append(f"          {taint} (on {on} node(s))")
        for other in ex.reasons[1:]:
            lines.append(f"also: {other.reason.value}: {other.message}")
    elif ex.binding:
        lines.append("waiting for its bind:")
        lines.extend(f"    {line}" for line in ex.binding)
    else:
        lines.append("nothing blocks it: every task is placed")
    if ex.position is not None:
        lines.append(f"position in queue {job.queue}: {ex.position} of {ex.waiting} waiting job(s)")
    if ex.path:
        lines.append("queue path (gpu: quota / fair share / allocated / requested / limit):")
        for depth, level in enumerate(ex.path):
            g = level["resources"]["gpu"]
            lines.append(
                f"    {'  ' * depth}{level['queue']}: {amount('gpu', g['quota'])} / "
                f"{amount('gpu', g['fairShare'])} / {amount('gpu', g['allocated'])} / "
                f"{amount('gpu', g['requested'])} / {amount('gpu', g['limit'])}"
            )
    for hint in ex.unblock:
        lines.append(f"would unblock: {hint}")
    return "\n".join(lines) + "\n"
