"""``kai simulate --snapshot``: the scheduler's decisions for a snapshot, explained.

Tasks are named by their pods (``namespace/name``) so that the decisions of an offline run
compare directly with what the live scheduler does (BindRequests, evictions, conditions).
"""

from __future__ import annotations

from typing import Any

from kai.reconcilers.snapshot_builder import BuiltSnapshot
from kai.scheduler.reasons import classify_job, cycle_facts
from kai.scheduler.result import SessionResult


def pod_name(built: BuiltSnapshot, task_uid: str) -> str:
    pod = built.pods.get(task_uid)
    if pod is None:
        return task_uid
    md = pod.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


def document(built: BuiltSnapshot, result: SessionResult) -> dict[str, Any]:
    jobs = {j.uid: j for j in built.snapshot.jobs}
    pending = []
    facts = cycle_facts(built.snapshot, result)
    for uid in sorted(result.job_reasons):
        job = jobs.get(uid)
        if job is None:
            continue
        classified = classify_job(job, result, facts)
        if not classified:
            continue
        pending.append(
            {
                "podGroup": f"{job.namespace}/{job.name}",
                "queue": job.queue,
                "reason": classified[0].reason.value,
                "message": classified[0].message,
                "otherReasons": [c.reason.value for c in classified[1:]],
            }
        )
    return {
        "binds": sorted(
            (
                {"pod": pod_name(built, b.task), "node": b.node, "type": b.received_resource_type}
                for b in result.binds
            ),
            key=lambda d: d["pod"],
        ),
        "pipelined": sorted(
            ({"pod": pod_name(built, p.task), "node": p.node} for p in result.pipelined),
            key=lambda d: d["pod"],
        ),
        "evictions": sorted(
            (
                {"pod": pod_name(built, e.task), "action": e.action, "reason": e.reason}
                for e in result.evictions
            ),
            key=lambda d: d["pod"],
        ),
        "pending": pending,
        "skipped": [p.text for p in built.problems],
    }


def text(doc: dict[str, Any]) -> str:
    lines = []
    for b in doc["binds"]:
        lines.append(f"bind      {b['pod']} -> {b['node']} ({b['type']})")
    for p in doc["pipelined"]:
        lines.append(f"pipeline  {p['pod']} -> {p['node']}")
    for e in doc["evictions"]:
        lines.append(f"evict     {e['pod']} ({e['action']}: {e['reason']})")
    for j in doc["pending"]:
        lines.append(
            f"pending   {j['podGroup']} (queue {j['queue']}): {j['reason']}: {j['message']}"
        )
    for s in doc["skipped"]:
        lines.append(f"skipped   {s}")
    lines.append(
        f"{len(doc['binds'])} bind(s), {len(doc['pipelined'])} pipelined, "
        f"{len(doc['evictions'])} eviction(s), {len(doc['pending'])} job(s) pending"
    )
    return "\n".join(lines) + "\n"
