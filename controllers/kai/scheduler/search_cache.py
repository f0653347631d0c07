"""The session's search cache: every memo of the victim actions and the stability replay.

A full cycle asks the same questions many times between two changes of the cluster (which
victims may a search take, in which order, is this set fair, does this job fit as it is, what
does this job ask next). The answers are kept here, in one object the :class:`Session` owns,
under one rule:

    An entry is valid while the versions it was computed at are current. Entries that read
    the cluster (node table, queue allocations, who holds what) belong to the cluster as the
    last commit left it: a statement commit clears them (``committed``). Entries that read only
    one job carry that job's ``JobInfo.version`` (bumped by every move of the job) and are
    recomputed when it changed.

Keys name their inputs by stable ids — job uids, queue names, placement-class ids, the
serial and likeness numbers of victim units, the queue state (``Proportion.state_key``) —
never by ``id()`` of a list or a job (which Python reuses once the object is freed). Searches
between commits roll back everything they try, so a cluster entry read in the middle of the
searches of one commit period is exact.

Two structures here are indexes kept in step with the session rather than answers: the replay's
allocate order (:class:`kai.scheduler.replay.ReplayOrder`) and the preemptible jobs holding
something; both follow ``Session.job_changes`` and the job versions, so a commit needs no
clearing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kai.scheduler.fairshare.queue_order import QueueOrderKey
    from kai.scheduler.fairshare.reclaim import FairSet
    from kai.scheduler.fairshare.resources import Vector
    from kai.scheduler.jobs import JobInfo
    from kai.scheduler.replay import ReplayOrder
    from kai.scheduler.resource_layout import FloatArray
    from kai.scheduler.session import Session
    from kai.scheduler.victims import UnitStream, VictimUnit

#: a cache key: a tuple of stable ids, versions and plain values
Key = tuple[object, ...]


class SearchCache:
    """The memo tables of one session (see the module docstring for the rule)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        #: the number of commits so far (a reader that kept something computed from the
        #: cluster knows from it whether the cluster changed since)
        self.generation = 0
        # ---- the cluster as the last commit left it (cleared by ``committed``)
        #: candidate victim units per search description (e.g. reclaim and the queue)
        self.candidates: dict[Key, list[VictimUnit]] = {}
        #: their part reachable from a set of placement classes: (description, classes)
        self.reachable: dict[Key, list[VictimUnit]] = {}
        #: victim order per (queue state, serial numbers of the candidate units)
        self.victim_orders: dict[Key, UnitStream] = {}
        #: reclaim verdicts per judge (queue state, reclaimer queue, request, preemptibility),
        #: then per the likeness numbers of the units judged, in order
        self.verdicts: dict[Key, dict[tuple[int, ...], bool]] = {}
        #: the sets behind those verdicts that were fair, to grow them by one unit
        self.fair_sets: dict[Key, dict[tuple[int, ...], FairSet]] = {}
        #: victim-search probes per (placement likeness, serial numbers of the units evicted):
        #: the nodes the job's tasks land on (``VictimSolver.fits``), or None; and, under
        #: ("apply", ...), the applications that failed before their validation (the job does
        #: not fit, or a victim that must move cannot)
        self.probes: dict[Key, list[int] | None] = {}
        #: GPU room with the candidates of a reachable-candidates key evicted
        self.room_with: dict[Key, float] = {}
        #: node resources with the candidates of a reachable-candidates key evicted
        self.freeable: dict[Key, FloatArray] = {}
        #: queue order keys of the victim actions' job loops, per (queue, request)
        self.queue_keys: dict[tuple[str, Vector], QueueOrderKey] = {}
        #: idle plus releasing GPUs of the cluster
        self.gpu_room: float | None = None
        # ---- one job's state (valid for the job version stored with the value)
        #: victim units per (job uid, extras only)
        self.units: dict[tuple[str, bool], tuple[int, list[VictimUnit]]] = {}
        #: the queue request of a job's next tasks, per job uid
        self.next_requests: dict[str, tuple[int, Vector]] = {}
        #: a job's victim-search kind, per job uid
        self.search_kinds: dict[str, tuple[int, object]] = {}
        # ---- fixed for the session (they read only specs, the queue tree, the config and now)
        #: reclaim min runtime per (reclaimer queue, victim queue)
        self.reclaim_min_runtimes: dict[tuple[str, str], float] = {}
        # ---- names, never stale
        #: likeness number per (queue, resources, elastic extra) of a victim unit
        self.likeness: dict[tuple[str, Vector, bool], int] = {}
        #: the next victim unit's serial number (each cut unit gets its own)
        self.unit_serials = 0
        # ---- indexes kept in step with the session (see the module docstring)
        self._replay_order: ReplayOrder | None = None
        self.holders = PreemptibleHolders(session)

    @property
    def replay_order(self) -> ReplayOrder:
        """The next cycle's allocate order, kept across the replays of the session."""
        if self._replay_order is None:
            from kai.scheduler.replay import ReplayOrder

            self._replay_order = ReplayOrder(self._session)
        return self._replay_order

    def committed(self) -> None:
        """The cluster changed for good (a statement committed): drop what read it."""
        self.generation += 1
        self.candidates.clear()
        self.reachable.clear()
        self.victim_orders.clear()
        self.verdicts.clear()
        self.fair_sets.clear()
        self.probes.clear()
        self.room_with.clear()
        self.freeable.clear()
        self.queue_keys.clear()
        self.gpu_room = None


class PreemptibleHolders:
    """The preemptible jobs of known queues (that the registry's victim checks allow) holding
    something, overall and per queue (in session order), followed incrementally: after the
    first look only the jobs changed since (``Session.job_changes``) are looked at again, and
    only the lists of a queue where a job started or stopped holding something are rebuilt."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._all: list[JobInfo] | None = None
        self._by_queue: dict[str, list[JobInfo]] = {}
        self._base: list[JobInfo] = []  # preemptible jobs of known queues (fixed)
        self._base_by_queue: dict[str, list[JobInfo]] = {}
        self._holding: dict[str, bool] | None = None  # job uid -> active > 0, for _base
        self._position = 0  # how far session.job_changes was read

    def all(self) -> list[JobInfo]:
        holding = self._follow()
        if self._all is None:
            self._all = [j for j in self._base if holding[j.uid]]
        return self._all

    def in_queue(self, queue: str) -> list[JobInfo]:
        holding = self._follow()
        found = self._by_queue.get(queue)
        if found is None:
            found = [j for j in self._base_by_queue.get(queue, ()) if holding[j.uid]]
            self._by_queue[queue] = found
        return found

    def _follow(self) -> dict[str, bool]:
        session = self._session
        changes = session.job_changes
        if self._holding is None:
            may_be_victim = session.registry.may_be_victim  # the registry's victim checks
            self._base = [
                j
                for j in session.jobs
                if j.preemptible and j.queue_ok and may_be_victim(session, j)
            ]
            self._base_by_queue = {}
            for job in self._base:
                self._base_by_queue.setdefault(job.queue, []).append(job)
            self._holding = {j.uid: j.active > 0 for j in self._base}
            self._position = len(changes)
            return self._holding
        if self._position == len(changes):
            return self._holding
        fresh = changes[self._position :]
        self._position = len(changes)
        for job in fresh:
            holding = self._holding.get(job.uid)
            if holding is not None and holding != (job.active > 0):
                self._holding[job.uid] = not holding
                self._all = None
                self._by_queue.pop(job.queue, None)
        return self._holding
