"""Why a job is pending: one small, stable taxonomy over the core's reasons.

The core records :class:`~kai.scheduler.result.Reason` objects with KAI's codes
(``OverLimit``, ``PodSchedulingErrors``, ``NotReady``, ...). This module sorts them into the
:class:`PendingReason` taxonomy, in a fixed precedence, so that everything that tells a user why
a job waits -- the PodGroup ``schedulingConditions`` and Events written by the live scheduler,
``kai explain``, metrics of pending reasons -- says the same thing from one source.

Precedence (the first one is the job's *first reason*; the rest are listed after it)::

    QueueDoesNotExist > QueueNotLeaf > OverLimit > NonPreemptibleOverQuota >
    PreemptionDelayNotElapsed > WaitingForFairShare > GangDoesNotFit > TopologyDoesNotFit >
    NoNodeFits > WaitingForEviction > Pipelined

The classification reads only a Reason's code, message and details and the job's task outcomes:
it never changes a decision. The enum values are stable strings (they appear in conditions,
Events, JSON output and metric labels); new members are added, never renamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kai.scheduler.result import Reason, SessionResult
from kai.scheduler.snapshot import ALLOCATED_STATUSES, JobSpec, Snapshot, TaskSpec, TaskStatus

__all__ = [
    "PRECEDENCE",
    "Classified",
    "CycleFacts",
    "PendingReason",
    "classify",
    "classify_job",
    "condition_text",
    "cycle_facts",
    "node_counts",
]


class PendingReason(StrEnum):
    """The pending reasons, in precedence order (see the module docstring)."""

    QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
    QUEUE_NOT_LEAF = "QueueNotLeaf"
    OVER_LIMIT = "OverLimit"
    NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
    # KAI's own unschedulable reason: the job waits out its preemption delay
    PREEMPTION_DELAY_NOT_ELAPSED = "PreemptionDelayNotElapsed"
    WAITING_FOR_FAIR_SHARE = "WaitingForFairShare"
    GANG_DOES_NOT_FIT = "GangDoesNotFit"
    TOPOLOGY_DOES_NOT_FIT = "TopologyDoesNotFit"
    NO_NODE_FITS = "NoNodeFits"
    WAITING_FOR_EVICTION = "WaitingForEviction"
    PIPELINED = "Pipelined"


#: member -> rank (0 first)
PRECEDENCE: dict[PendingReason, int] = {r: i for i, r in enumerate(PendingReason)}

# codes of the core (kai.scheduler.*) and what they mean here
_BY_CODE: dict[str, PendingReason] = {
    "QueueDoesNotExist": PendingReason.QUEUE_DOES_NOT_EXIST,
    "OverLimit": PendingReason.OVER_LIMIT,
    "NonPreemptibleOverQuota": PendingReason.NON_PREEMPTIBLE_OVER_QUOTA,
    "ReclaimFailed": PendingReason.WAITING_FOR_FAIR_SHARE,
    "PreemptionDelayNotElapsed": PendingReason.PREEMPTION_DELAY_NOT_ELAPSED,
    "NotReady": PendingReason.GANG_DOES_NOT_FIT,
    "TopologyDoesNotExist": PendingReason.TOPOLOGY_DOES_NOT_FIT,
    "TopologyLevelDoesNotExist": PendingReason.TOPOLOGY_DOES_NOT_FIT,
    "NoTopologyDomainFits": PendingReason.TOPOLOGY_DOES_NOT_FIT,
}
# kai.scheduler.framework.Registry.summarize: "0/5 nodes are available: 3 nodes: insufficient
# gpu; 2 nodes: node affinity mismatch"
_SUMMARY = re.compile(r"0/(\d+) nodes are available: (.*)$")
_PART = re.compile(r"(\d+) nodes?: ([^;]+)")


@dataclass(slots=True)
class Classified:
    """One core reason (or a task-outcome fact) placed in the taxonomy."""

    reason: PendingReason
    message: str
    code: str  # the core's code, or the taxonomy's own for facts without a core reason
    details: Mapping[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"reason": self.reason.value, "message": self.message}
        if self.code != self.reason.value:
            out["coreCode"] = self.code
        counts = node_counts(self.message)
        if counts:
            out["nodes"] = counts
        return out


def node_counts(message: str) -> dict[str, int]:
    """Nodes failing each predicate, from the core's "0/N nodes are available: ..." summary
    (each node charged to the first filter it fails, in the plugin registry's order)."""
    match = _SUMMARY.search(message)
    if match is None:
        return {}
    return {part.group(2).strip(): int(part.group(1)) for part in _PART.finditer(match.group(2))}


def _one(reason: Reason) -> PendingReason:
    code = reason.code
    if code == "QueueDoesNotExist" and "is not a leaf queue" in reason.message:
        return PendingReason.QUEUE_NOT_LEAF
    known = _BY_CODE.get(code)
    if known is not None:
        return known
    # PodSchedulingErrors and anything else that says a task does not fit somewhere
    # the topology placer's failures carry the subgroup or the candidate domains tried
    if "candidates_tried" in reason.details or "subgroup" in reason.details:
        return PendingReason.TOPOLOGY_DOES_NOT_FIT
    placed = reason.details.get("placed_before_failure")
    if isinstance(placed, int) and placed > 0:
        return PendingReason.GANG_DOES_NOT_FIT
    message = reason.message
    gang = "gang minimum" in message or "must be placed together" in message
    if gang and "nodes are available" not in message:
        return PendingReason.GANG_DOES_NOT_FIT
    return PendingReason.NO_NODE_FITS


def classify(reasons: Iterable[Reason]) -> list[Classified]:
    """The core's reasons in the taxonomy, first reason first (stable within one rank)."""
    out = [Classified(_one(r), r.message, r.code, r.details) for r in reasons]
    if len(out) > 1:
        out.sort(key=lambda c: PRECEDENCE[c.reason])
    return out


_FIT = frozenset(
    {
        PendingReason.GANG_DOES_NOT_FIT,
        PendingReason.TOPOLOGY_DOES_NOT_FIT,
        PendingReason.NO_NODE_FITS,
    }
)
_EPS = 1e-9


def _task_gpus(task: TaskSpec) -> float:
    g = task.gpu
    return float(g.whole) if g.whole else (g.fraction or 0.0) * g.num_devices


@dataclass
class CycleFacts:
    """What :func:`classify_job` needs of the whole session, computed once per result: the GPUs
    each leaf queue holds (and their total), and the pods evicted for each job."""

    held: dict[str, float]
    total: float
    evicted_for: dict[str, list[str]]  # the core's eviction message -> evicted task uids


def cycle_facts(snapshot: Snapshot, result: SessionResult) -> CycleFacts:
    held: dict[str, float] = {}
    for job in snapshot.jobs:
        total = 0.0
        for task in job.tasks:
            outcome = result.tasks.get(task.uid)
            if outcome is not None and outcome.status in ALLOCATED_STATUSES:
                total += _task_gpus(task)
        if total:
            held[job.queue] = held.get(job.queue, 0.0) + total
    evicted_for: dict[str, list[str]] = {}
    for eviction in result.evictions:
        evicted_for.setdefault(eviction.reason, []).append(eviction.task)
    return CycleFacts(held, sum(held.values()), evicted_for)


def classify_job(
    job: JobSpec, result: SessionResult, facts: CycleFacts | None = None
) -> list[Classified]:
    """Every reason why ``job`` is (partly) not running after the session ``result``, first
    reason first; empty when nothing of it waits.

    Beyond the core's own reasons:

    - a job that does not fit while its queue already holds its fair share of GPUs (or would
      go above it with the job), and that would fit in what the other queues hold, waits for its
      fair share: reclaim takes only for queues below theirs (WaitingForFairShare; needs
      ``facts`` from :func:`cycle_facts`);
    - tasks Pipelined onto resources being released wait for the pods this session evicted for
      the job (WaitingForEviction) or for pods already on their way out (Pipelined); a job whose
      every task got a place keeps no "does not fit" reason of an earlier action.
    """
    found = classify(result.job_reasons.get(job.uid, ()))
    outcomes = result.tasks
    waiting = need = 0.0
    pipelined = 0
    nodes: set[str] = set()
    for task in job.tasks:
        outcome = outcomes.get(task.uid)
        if outcome is None:
            continue
        if outcome.status is TaskStatus.PENDING:
            waiting += 1
            need += _task_gpus(task)
        elif outcome.status is TaskStatus.PIPELINED:
            pipelined += 1
            if outcome.node:
                nodes.add(outcome.node)
    if not waiting:
        found = [c for c in found if c.reason not in _FIT]
    share = result.queues.get(job.queue)
    if waiting and facts is not None and share is not None and any(c.reason in _FIT for c in found):
        have = share.allocated.get("gpu", 0.0)
        fair = share.fair_share.get("gpu", 0.0)
        others = facts.total - facts.held.get(job.queue, 0.0)
        if need > _EPS and have + need > fair + _EPS and others + _EPS >= need:
            found.append(
                Classified(
                    PendingReason.WAITING_FOR_FAIR_SHARE,
                    f"queue '{job.queue}' holds {have:g} GPUs of its fair share {fair:g}; the "
                    f"job's {need:g} more would take it above, and resources are reclaimed only "
                    "for queues below their fair share",
                    PendingReason.WAITING_FOR_FAIR_SHARE.value,
                    {"queue": job.queue, "allocated": have, "fairShare": fair, "requested": need},
                )
            )
    if pipelined:
        where = ", ".join(sorted(nodes))
        # the core's eviction message names the job: "reclaimed for job 'x'"
        victims = _evicted_for(job, result, facts)
        if victims:
            found.append(
                Classified(
                    PendingReason.WAITING_FOR_EVICTION,
                    f"{pipelined} task(s) placed on {where} once the {len(victims)} pod(s) "
                    "evicted for it are gone",
                    PendingReason.WAITING_FOR_EVICTION.value,
                    {"evicted": victims, "nodes": sorted(nodes)},
                )
            )
        else:
            found.append(
                Classified(
                    PendingReason.PIPELINED,
                    f"{pipelined} task(s) placed on {where}, where resources are still held by "
                    "pods being released; they bind when those are gone",
                    PendingReason.PIPELINED.value,
                    {"nodes": sorted(nodes)},
                )
            )
    if len(found) > 1:
        found.sort(key=lambda c: PRECEDENCE[c.reason])
    return found


def _evicted_for(job: JobSpec, result: SessionResult, facts: CycleFacts | None) -> list[str]:
    named = f"job {job.name!r}"
    if facts is not None:
        return [
            t
            for reason, tasks in facts.evicted_for.items()
            if reason.endswith(named)
            for t in tasks
        ]
    return [e.task for e in result.evictions if e.reason.endswith(named)]


def condition_text(classified: Iterable[Classified]) -> str:
    """The one-line text of a PodGroup condition and its Events: ``Reason: message; ...``."""
    return "; ".join(f"{c.reason.value}: {c.message}" for c in classified)
