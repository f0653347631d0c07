"""Preemption delay: a job waits ``preemptionDelay`` before it may
evict anyone.

Aggressor side only: while ``now < anchor + delay`` the job is not an input job of preempt,
reclaim or consolidation (allocate is unaffected, and the job can still be a victim). The anchor
is ``max(creation time, last eviction of one of its pods)``, so an evicted job waits again
before it may evict others. A delay that is absent or <= 0 means no delay.
"""

from __future__ import annotations

from datetime import UTC, datetime

from kai.scheduler.result import Reason
from kai.scheduler.snapshot import JobSpec

PREEMPTION_DELAY_NOT_ELAPSED = "PreemptionDelayNotElapsed"


def delay_ends(job: JobSpec) -> float | None:
    """When the job's preemption delay ends (session clock), or None when it has none."""
    delay = job.preemption_delay
    if delay is None or delay <= 0:
        return None
    anchor = job.created_at
    if job.last_eviction_time is not None:
        anchor = max(anchor, job.last_eviction_time)
    return anchor + delay


def delay_reason(job: JobSpec, now: float) -> Reason | None:
    """The fit error of a job still inside its delay window, or None when it may evict."""
    ends = delay_ends(job)
    if ends is None or now >= ends:
        return None
    assert job.preemption_delay is not None
    when = datetime.fromtimestamp(ends, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Reason(
        PREEMPTION_DELAY_NOT_ELAPSED,
        f"job {job.name!r} is within its preemption delay window ({job.preemption_delay:g}s): "
        f"it may not evict other jobs before {when}",
        {"delay_seconds": job.preemption_delay, "until": ends},
    )
