"""Queue fairness of the scheduler core: KAI's proportion plugin.

Pure computation over plain data; no I/O, no clock. Design notes and every deviation from KAI:
``docs/design/fairshare.md``.

Resources are ``(gpu, cpu, memory)`` vectors in ``MANAGED_RESOURCES`` order (a mapping keyed
``"gpu"``/``"cpu"``/``"memory"`` is accepted everywhere too). Units: GPUs in devices — a
fractional task counts its fraction, a gpu-memory task counts memory / device memory (the
caller converts), a MIG ``Ng`` instance counts N GPUs; cpu in millicores; memory in bytes
(queue quotas in a ``Snapshot`` are already in these units). -1 in a quota or limit means
unlimited.

Interface used by the session:

``divide(queues, total_capacity, requested, k_value=1.0, usage=None) -> {queue: {res: share}}``
    The hierarchical division alone (pure; ``requested`` rolled up per queue). ``divide_level``
    does one sibling set and one resource.

``Proportion(queues, total_capacity, leaf_requested, leaf_allocated,
leaf_allocated_non_preemptible, k_value=1.0, enabled=True, reclaimer_saturation_multiplier=1.0)``
    Per-session state. ``leaf_*`` map queue names (normally leaves) to the figures of the jobs
    directly in them; they are rolled up to every ancestor. ``leaf_requested`` is KAI's
    ``Request``: resources of tasks in an allocated status (Allocated, Bound, Binding, Running)
    **plus** pending tasks' requests (gpu-memory converted with the smallest node GPU memory).
    ``leaf_allocated`` / ``..._non_preemptible``: allocated-status tasks (of non-preemptible
    jobs for the latter). Fair shares are computed once, in the constructor.

    - ``on_allocate(queue, resources, preemptible)`` / ``on_deallocate(...)``: live accounting,
      O(depth); call for every allocate, pipeline, evict and their undo.
    - ``check_job_capacity(queue, request, preemptible) -> Reason | None``: OverLimit, then
      NonPreemptibleOverQuota, at the queue and every ancestor.
      ``check_non_preemptible_quota(...)``: the second rule only (preempt).
    - ``compare_queues(q1, q2, job_request1, job_request2, victims1=None, victims2=None) -> int``:
      sibling order (-1 = q1 first); negate for the victim order.
      ``order_key(queue, job_request=None, victims=None) -> QueueOrderKey``: the same facts
      precomputed once per (queue, best job); keys compare with ``<`` (heapq) or
      ``.compare()`` in about 0.4 us, building one costs about 4 us. Rebuild a queue's key
      after its allocation changes.
    - ``can_reclaim(queue, job_request, preemptible) -> bool``: the reclaim gate.
    - ``reclaim_is_fair(reclaimer_queue, reclaimer_request, victims, reclaimer_preemptible=True)
      -> bool`` and ``judge_reclaim(...) -> ReclaimVerdict`` (with a message): scenario
      validation. ``victims``: ``VictimChunk``\\ s or ``(queue, resources[, elastic_extra])``
      tuples, one per chunk (``victim_chunks`` builds KAI's chunks of a victim job). Both are
      ``ReclaimJudge(clone, queue, request, preemptible).verdict``: the one judge, whose
      ``grow(fair_set, chunk)`` judges a fair set plus one chunk in O(queues) (the victim
      search). Judge against ``clone()`` taken when the job's search starts.
    - ``clone()``: copy of the live state (cheap: two flat lists); ``save_state()`` /
      ``restore_state(state)``: a checkpoint pair on the same object.
    - The read API (nothing outside this package reads ``Proportion``'s fields):
      ``queue_shares() -> {queue: QueueShare}``; ``fair_share``, ``deserved`` (the quota),
      ``limit``, ``requested``, ``allocated``, ``allocated_non_preemptible``,
      ``allocatable_share``, ``saturation`` (allocated / fair share, reclaim's ratio):
      per-queue vectors; ``figures(queue, resource) -> QueueFigures``: all of them for one
      resource; ``dominant_share``; the same vectors by queue index (``tree.lookup(name)``):
      ``fair_share_at``, ``deserved_at``, ``limit_at``, ``allocatable_share_at``,
      ``allocated_at``, ``allocated_non_preemptible_at``; structure: ``tree`` (a
      ``QueueIndex``), ``names``, ``is_leaf``, ``parent``, ``children``, ``top_level``,
      ``path`` (top-level first), ``ancestors`` (the queue first).

    ``enabled=False`` (scenario ``proportion: false``): capacity checks pass, queues compare
    only by age then name, ``can_reclaim`` and reclaim validation always refuse. Accounting
    still runs (for reporting).

Determinism: wherever KAI iterates a Go map, this package uses ``(creation_rank, name)``
order, so results never depend on input list order.
"""

from kai.scheduler.fairshare.capacity import NON_PREEMPTIBLE_OVER_QUOTA, OVER_LIMIT
from kai.scheduler.fairshare.division import ShareInput, divide, divide_level, divide_tree
from kai.scheduler.fairshare.proportion import Proportion, QueueFigures
from kai.scheduler.fairshare.queue_index import QueueIndex
from kai.scheduler.fairshare.queue_order import QueueOrderKey
from kai.scheduler.fairshare.reclaim import (
    ReclaimJudge,
    ReclaimVerdict,
    VictimChunk,
    judge_reclaim,
    victim_chunks,
)
from kai.scheduler.fairshare.resources import EPS, Vector, to_mapping, to_vector

__all__ = [
    "EPS",
    "NON_PREEMPTIBLE_OVER_QUOTA",
    "OVER_LIMIT",
    "Proportion",
    "QueueFigures",
    "QueueIndex",
    "QueueOrderKey",
    "ReclaimJudge",
    "ReclaimVerdict",
    "ShareInput",
    "Vector",
    "VictimChunk",
    "divide",
    "divide_level",
    "divide_tree",
    "judge_reclaim",
    "to_mapping",
    "to_vector",
    "victim_chunks",
]
