"""``kai plan``: what merging a change to the GitOps documents would do.

Both sides (the change and its base) are validated and compiled by the code of ``kai validate``
/ ``kai render``; the Queues they produce are compared field by field. With a cluster snapshot,
each side's Queues replace the snapshot's Queues of those names and the core is run on the
same workloads:

- the fair share of every queue for the current demand is the core's division at the start of
  a cycle (a session opened, no action run), before and after;
- a running preemptible job becomes *reclaimable* when its queue's allocation is above the
  queue's new fair share and was not above the old one: the queue's jobs are taken in reverse
  job order (the order in which the core picks victims last) until the excess is covered;
- a running job is *over limit* when its queue's allocation is above its new limit;
- a pending job *starts* when the scheduler's next cycle binds or pipelines a task of it with
  the new Queues and none without.

A Queue removed by the change is *prune blocked* when it still has child Queues (after the
change) or PodGroups in the snapshot: the controller keeps it until they are gone.

Against a cluster, the base is what the repository owns there (:func:`cluster_base`): the Queues
kai manages and the live Queues of the names the change produces. Both sides are normalised as
the API server stores them (an explicit ``null`` is dropped, ``1.0`` is ``1``) before the
comparison, so a cluster that matches the repository plans no change. Values are shown as a YAML
user writes them (:func:`show`), never as Python literals.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kai.gitops.compile import MANAGED_BY
from kai.insight.figures import RESOURCES, amount
from kai.insight.values import UNSET, normal, show
from kai.reconcilers.cluster_snapshot import ClusterSnapshot
from kai.scheduler.result import QueueShare
from kai.scheduler.snapshot import ACTIVE_ALLOCATED_STATUSES, UNLIMITED, TaskStatus


@dataclass
class FieldChange:
    path: str
    before: Any
    after: Any


@dataclass
class QueuePlan:
    name: str
    action: str  # added | changed | removed | unchanged
    changes: list[FieldChange] = field(default_factory=list)
    prune_blocked: str | None = None
    fair_before: dict[str, float] = field(default_factory=dict)
    fair_after: dict[str, float] = field(default_factory=dict)
    allocated: dict[str, float] = field(default_factory=dict)


@dataclass
class JobEffect:
    job: str  # namespace/name
    queue: str
    effect: str  # reclaimable | over-limit | starts
    detail: str


@dataclass
class Plan:
    queues: list[QueuePlan]
    effects: list[JobEffect]
    with_cluster: bool

    @property
    def changed(self) -> bool:
        return any(q.action != "unchanged" for q in self.queues)

    def as_dict(self) -> dict[str, Any]:
        def per(values: dict[str, float]) -> dict[str, float]:
            return {r: round(values.get(r, 0.0), 6) for r in RESOURCES}

        return {
            "changed": self.changed,
            "withCluster": self.with_cluster,
            "queues": [
                {
                    "name": q.name,
                    "action": q.action,
                    "changes": [
                        {"field": c.path, "before": c.before, "after": c.after} for c in q.changes
                    ],
                    "pruneBlocked": q.prune_blocked,
                    **(
                        {
                            "fairShareBefore": per(q.fair_before),
                            "fairShareAfter": per(q.fair_after),
                            "allocated": per(q.allocated),
                        }
                        if self.with_cluster
                        else {}
                    ),
                }
                for q in self.queues
            ],
            "workloads": [
                {"podGroup": e.job, "queue": e.queue, "effect": e.effect, "detail": e.detail}
                for e in self.effects
            ],
        }


def queues_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o
        for o in objects
        if o.get("kind") == "Queue" and isinstance(o.get("metadata"), dict)
    }


def cluster_base(
    live: list[dict[str, Any]], new_objects: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The base of a plan against a cluster: the live Queues the repository owns there.

    Those are the Queues kai manages (label ``app.kubernetes.io/managed-by: kai``: a removed one
    is planned as removed) and the live Queues of the names the change produces, whoever wrote
    them (a KAI Queue written directly in the repository is applied as it is, without kai's
    label; a name taken by a Queue made by hand shows what the change would alter). Other
    Queues of the cluster (the install's default queues, another team's) are not the
    repository's and are left out."""
    wanted = set(queues_of(new_objects))
    out = []
    for name, q in queues_of(live).items():
        labels = (q.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY[0]) == MANAGED_BY[1] or name in wanted:
            out.append(q)
    return out


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf fields by dotted path. A ``null`` is no field (the API server drops it), and so is
    an empty mapping."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if value is None:
        return {}
    return {prefix: normal(value)}


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python: a boolean and a number are different values in YAML
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _diff(before: dict[str, Any], after: dict[str, Any]) -> list[FieldChange]:
    # a Queue's meaning is its spec (labels and the source annotation are bookkeeping)
    a, b = _flat(before.get("spec") or {}), _flat(after.get("spec") or {})
    keys = sorted(set(a) | set(b))
    return [
        FieldChange(f"spec.{k}", a.get(k), b.get(k))
        for k in keys
        if k not in a or k not in b or not _same(a[k], b[k])
    ]


def make_plan(
    base_objects: list[dict[str, Any]],
    new_objects: list[dict[str, Any]],
    snap: ClusterSnapshot | None,
) -> Plan:
    base, new = queues_of(base_objects), queues_of(new_objects)
    plans: list[QueuePlan] = []
    for name in sorted(set(base) | set(new)):
        if name not in base:
            plans.append(QueuePlan(name, "added", _diff({}, new[name])))
        elif name not in new:
            plans.append(QueuePlan(name, "removed"))
        else:
            changes = _diff(base[name], new[name])
            plans.append(QueuePlan(name, "changed" if changes else "unchanged", changes))
    effects: list[JobEffect] = []
    if snap is not None:
        effects = _with_cluster(plans, base, new, snap)
    else:
        children = {(q.get("spec") or {}).get("parentQueue") for q in new.values()}
        for p in plans:
            if p.action == "removed" and p.name in children:
                p.prune_blocked = "queues of the change still name it as their parent"
    return Plan(plans, effects, snap is not None)


def _replaced(snap: ClusterSnapshot, base: dict[str, Any], side: dict[str, Any]) -> ClusterSnapshot:
    """``snap`` with the Queues of the base replaced by those of ``side``."""
    other = copy.copy(snap)
    other.objects = dict(snap.objects)
    kept = [q for q in snap.objects.get("queues", []) if q["metadata"]["name"] not in base]
    kept = [q for q in kept if q["metadata"]["name"] not in side]
    other.objects["queues"] = kept + list(side.values())
    return other


def _with_cluster(
    plans: list[QueuePlan],
    base: dict[str, Any],
    new: dict[str, Any],
    snap: ClusterSnapshot,
) -> list[JobEffect]:
    from kai.scheduler.session import Session, run_session

    before_built = _replaced(snap, base, base).build()
    after_built = _replaced(snap, base, new).build()
    before_session = Session(before_built.snapshot)
    after_session = Session(after_built.snapshot)
    fair_before = before_session.proportion.queue_shares()
    fair_after = after_session.proportion.queue_shares()
    jobs_by_queue: dict[str, list[Any]] = {}
    for job in after_built.snapshot.jobs:
        jobs_by_queue.setdefault(job.queue, []).append(job)
    parents = {q.parent for q in after_built.snapshot.queues if q.parent}
    for p in plans:
        p.fair_before = dict(fair_before[p.name].fair_share) if p.name in fair_before else {}
        p.fair_after = dict(fair_after[p.name].fair_share) if p.name in fair_after else {}
        share = fair_after.get(p.name) or fair_before.get(p.name)
        p.allocated = dict(share.allocated) if share else {}
        if p.action == "removed":
            users = len(jobs_by_queue.get(p.name, []))
            if p.name in parents:
                p.prune_blocked = "child queues still name it as their parent"
            elif users:
                p.prune_blocked = f"{users} PodGroup(s) still use it"
    effects = _reclaimable(after_session, fair_before, fair_after)
    effects += _over_limit(after_built, fair_after)
    before = run_session(before_built.snapshot)
    after = run_session(after_built.snapshot)
    placed = {TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING}
    for job in after_built.snapshot.jobs:
        pending = [t for t in job.tasks if t.status is TaskStatus.PENDING]
        if not pending:
            continue
        now = sum(1 for t in pending if after.tasks[t.uid].status in placed)
        was = sum(1 for t in pending if before.tasks[t.uid].status in placed)
        if now and not was:
            effects.append(
                JobEffect(
                    f"{job.namespace}/{job.name}",
                    job.queue,
                    "starts",
                    f"{now} of {len(pending)} pending task(s) placed in the next cycle",
                )
            )
    return effects


def _reclaimable(
    session: Any, fair_before: dict[str, QueueShare], fair_after: dict[str, QueueShare]
) -> list[JobEffect]:
    effects = []
    for name, share in sorted(fair_after.items()):
        alloc = share.allocated.get("gpu", 0.0)
        new_fair = share.fair_share.get("gpu", 0.0)
        old = fair_before.get(name)
        old_fair = old.fair_share.get("gpu", 0.0) if old else 0.0
        excess = alloc - new_fair
        if excess <= 1e-9 or alloc - old_fair > 1e-9:
            continue
        leaf_jobs = [
            j
            for j in session.jobs
            if j.spec.queue == name
            and j.spec.preemptible
            and any(t.status in ACTIVE_ALLOCATED_STATUSES for t in j.tasks)
        ]
        leaf_jobs.sort(key=session.registry.job_order, reverse=True)
        for job in leaf_jobs:
            if excess <= 1e-9:
                break
            gpus = sum(
                float(t.spec.gpu.whole) or (t.spec.gpu.fraction or 0.0) * t.spec.gpu.num_devices
                for t in job.tasks
                if t.status in ACTIVE_ALLOCATED_STATUSES
            )
            if gpus <= 0:
                continue
            excess -= gpus
            effects.append(
                JobEffect(
                    f"{job.spec.namespace}/{job.spec.name}",
                    name,
                    "reclaimable",
                    f"queue {name} holds {amount('gpu', alloc)} GPUs, its fair share falls "
                    f"from {amount('gpu', old_fair)} to {amount('gpu', new_fair)}; this job's "
                    f"{amount('gpu', gpus)} GPUs may be reclaimed by other queues",
                )
            )
    return effects


def _over_limit(built: Any, fair_after: dict[str, QueueShare]) -> list[JobEffect]:
    effects = []
    for q in built.snapshot.queues:
        share = fair_after.get(q.name)
        if share is None:
            continue
        for r in RESOURCES:
            res = q.resources.get(r)
            if res is None or res.limit == UNLIMITED:
                continue
            have = share.allocated.get(r, 0.0)
            if have <= res.limit + 1e-9:
                continue
            for job in built.snapshot.jobs:
                if job.queue == q.name and any(
                    t.status in ACTIVE_ALLOCATED_STATUSES for t in job.tasks
                ):
                    effects.append(
                        JobEffect(
                            f"{job.namespace}/{job.name}",
                            q.name,
                            "over-limit",
                            f"queue {q.name} holds {amount(r, have)} {r}, above its new "
                            f"limit {amount(r, res.limit)}: nothing more starts there until "
                            "enough is released",
                        )
                    )
            break
    return effects


def _md(value: Any) -> str:
    """A value in a Markdown table cell: code, with the cell separator escaped."""
    if value is None:
        return f"*{UNSET}*"
    text = show(value).replace("`", "'").replace("|", "\\|")
    return f"`{text}`"


def markdown(plan: Plan) -> str:
    """For a pull-request comment."""
    lines = ["### kai plan", ""]
    if not plan.changed:
        lines.append("No Queue changes.")
    else:
        lines += ["| queue | change | fields |", "|---|---|---|"]
        for q in plan.queues:
            if q.action == "unchanged":
                continue
            fields = "<br>".join(f"`{c.path}`: {_md(c.before)} → {_md(c.after)}" for c in q.changes)
            if q.prune_blocked:
                fields += f"<br>**prune blocked**: {q.prune_blocked}"
            lines.append(f"| `{q.name}` | {q.action} | {fields} |")
    if plan.with_cluster:
        lines += ["", "#### Fair share for the current demand (GPUs)", ""]
        rows = []
        for q in plan.queues:
            b, a = q.fair_before.get("gpu", 0.0), q.fair_after.get("gpu", 0.0)
            if q.action == "unchanged" and abs(a - b) < 1e-9:
                continue
            rows.append(
                f"| `{q.name}` | {amount('gpu', q.allocated.get('gpu', 0.0))} | "
                f"{amount('gpu', b)} | {amount('gpu', a)} |"
            )
        if rows:
            lines += ["| queue | allocated | before | after |", "|---|---|---|---|", *rows]
        else:
            lines.append("No fair share changes.")
        lines += ["", "#### Running and pending workloads", ""]
        if not plan.effects:
            lines.append("No workload is affected.")
        for e in plan.effects:
            lines.append(f"- `{e.job}` ({e.queue}): **{e.effect}** — {e.detail}")
    return "\n".join(lines) + "\n"


def text(plan: Plan) -> str:
    lines = []
    for q in plan.queues:
        if q.action == "unchanged" and not (
            plan.with_cluster
            and abs(q.fair_after.get("gpu", 0) - q.fair_before.get("gpu", 0)) > 1e-9
        ):
            continue
        head = f"{q.action:9} Queue/{q.name}"
        if plan.with_cluster:
            head += (
                f"  gpu fair share {amount('gpu', q.fair_before.get('gpu', 0.0))} -> "
                f"{amount('gpu', q.fair_after.get('gpu', 0.0))} "
                f"(allocated {amount('gpu', q.allocated.get('gpu', 0.0))})"
            )
        lines.append(head)
        for c in q.changes:
            lines.append(f"    {c.path}: {show(c.before)} -> {show(c.after)}")
        if q.prune_blocked:
            lines.append(f"    prune blocked: {q.prune_blocked}")
    for e in plan.effects:
        lines.append(f"{e.effect:11} {e.job} (queue {e.queue}): {e.detail}")
    if not lines:
        lines.append("no changes")
    return "\n".join(lines) + "\n"
