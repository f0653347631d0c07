"""The core's plugin framework: typed extension points, listed once in a :class:`Registry`.

A session holds one registry (``Session.registry``, by default
:data:`kai.scheduler.plugins.registry.DEFAULT_REGISTRY` with the plugins the config turns off
left out). The placement engine builds every equivalence class from it, so allocate, the
victim search, the stability replay, the topology placer and the "why pending" reasons all
filter, score and explain through the same list. ``docs/design/framework.md`` states the
contracts.

Filters come in three kinds, charged in the order of :attr:`Registry.filters`:

- :class:`NodeFilter`: a mask that depends on the nodes and the task's spec only. Computed
  once per equivalence class and cached with it; ``class_key`` names what of the spec it
  reads, so two tasks share a class only when every filter would give them the same mask.
- :class:`TaskFilter`: a mask that depends on where other tasks are (pod affinity); computed
  for every choice of a task, on top of the class.
- :class:`DomainFilter`: the node set the caller allows (a topology domain, "not its own node"
  for a move); its position in the list places it among the others for the reasons.

Resource fit (pods, every resource column, shared GPU memory) is not a plugin: it runs after
every filter, per changed row, in :mod:`kai.scheduler.placement`.

A :class:`NodeScorer` returns a score per node (a float vector, multiplied by its weight, or a
boolean vector, worth its weight where true); the scores are summed in registry order and the
best node is the ``argmax`` (ties to the lowest node name). A :class:`TaskScorer` is to a
node scorer what a task filter is to a node filter: its scores depend on where other tasks are
(preferred pod affinity), so they are added at every choice, on top of the class's.

:attr:`Registry.job_order` is the one job order of every action and of the stability replay;
:attr:`Registry.on_commit` hooks run after every commit; :attr:`Registry.victim_checks` say
which jobs the victim actions may take from at all.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kai.api.scheduler_config import SchedulerConfig
from kai.scheduler.ordering import job_order_key
from kai.scheduler.predicates import INSUFFICIENT_SHARED, TOO_MANY_PODS, LabelIndex
from kai.scheduler.resource_layout import PODS, BoolArray, FloatArray
from kai.scheduler.snapshot import TaskSpec

if TYPE_CHECKING:
    from kai.scheduler.jobs import JobInfo, TaskInfo
    from kai.scheduler.nodes import NodeTable
    from kai.scheduler.session import Session
    from kai.scheduler.statement import Operation

__all__ = [
    "ClassView",
    "CommitHook",
    "DomainFilter",
    "Filter",
    "FilterMasks",
    "JobOrder",
    "NodeFilter",
    "NodeScorer",
    "NodeView",
    "Registry",
    "RowScore",
    "ScoreRows",
    "TaskFilter",
    "TaskScorer",
    "VictimCheck",
]

IndexArray = npt.NDArray[np.intp]

#: (reason, mask) pairs: ``mask[i]`` is True where node ``i`` passes; a node that fails is
#: charged to the first failing reason in registry order. Empty: nothing to filter.
FilterMasks = Sequence[tuple[str, BoolArray]]


def _always(config: SchedulerConfig) -> bool:
    return True


@dataclass(frozen=True)
class NodeView:
    """What a node filter reads when an equivalence class is built."""

    nodes: NodeTable
    labels: LabelIndex  # node label values per key, cached for the session
    config: SchedulerConfig


@dataclass(frozen=True)
class NodeFilter:
    """A filter whose masks depend only on the nodes and the task's spec (cached per class).

    ``masks(view, spec)`` returns (reason, mask) pairs, each reason one of ``reasons``.
    ``class_key(spec)`` is what of the spec the masks read (None: nothing, the masks depend on
    the nodes alone); it becomes part of the equivalence-class key."""

    name: str
    reasons: tuple[str, ...]
    masks: Callable[[NodeView, TaskSpec], FilterMasks]
    class_key: Callable[[TaskSpec], Hashable] | None = None
    enabled: Callable[[SchedulerConfig], bool] = _always


@dataclass(frozen=True)
class TaskFilter:
    """A filter that depends on the session's placements, evaluated at every choice.

    ``active(session)`` says whether it can restrict anything in this session at all (checked
    once, when the placement engine is built); ``masks(session, task)`` returns the (reason,
    mask) pairs for one task, empty when nothing restricts it. A session with an active task
    filter shares no placement answers between jobs alike (see ``PlacementEngine``)."""

    name: str
    reasons: tuple[str, ...]
    active: Callable[[Session], bool]
    masks: Callable[[Session, TaskInfo], FilterMasks]
    enabled: Callable[[SchedulerConfig], bool] = _always


@dataclass(frozen=True)
class DomainFilter:
    """The slot of the caller's node set (``PlacementEngine.choose(task, allowed)``)."""

    name: str
    reason: str

    @property
    def reasons(self) -> tuple[str, ...]:
        return (self.reason,)

    def enabled(self, config: SchedulerConfig) -> bool:
        return True


Filter = NodeFilter | TaskFilter | DomainFilter


@dataclass(frozen=True)
class ClassView:
    """What a scorer sees when an equivalence class is built."""

    nodes: NodeTable
    config: SchedulerConfig
    spec: TaskSpec
    request: FloatArray
    uses_gpu: bool  # whole GPUs, a shared GPU or a MIG instance
    shared: bool  # a shared (fractional or gpu-memory) GPU request
    labels: LabelIndex  # node label values per key, cached for the session


@dataclass(frozen=True, slots=True)
class ScoreRows:
    """The rows being rescored, with their resources as the fit check saw them."""

    rows: IndexArray  # node positions
    idle: FloatArray  # idle resources of those rows
    future: FloatArray  # idle + releasing
    fits_now: BoolArray  # the task fits on idle resources (else only after releases)
    shared_room: BoolArray | None  # shared requests: an existing device has room after releases


#: a class's scorer: score of the rows (float vector, or boolean vector worth the weight)
RowScore = Callable[[ScoreRows], FloatArray | BoolArray]


@dataclass(frozen=True)
class NodeScorer:
    """A node-order plugin. ``prepare(view)`` returns the class's row scorer, or None when the
    plugin does not score this kind of task. Scores must depend only on the row's own node (so
    cached scores of untouched nodes stay valid)."""

    name: str
    weight: float
    prepare: Callable[[ClassView], RowScore | None]
    class_key: Callable[[TaskSpec], Hashable] | None = None
    enabled: Callable[[SchedulerConfig], bool] = _always


@dataclass(frozen=True)
class TaskScorer:
    """A node-order plugin whose scores depend on the session's placements, evaluated at every
    choice. ``active(session)`` says whether it can score anything in this session at all
    (checked once, when the placement engine is built; an inactive scorer costs nothing);
    ``scores(session, task)`` returns a score per node (multiplied by ``weight``), or None when
    it has nothing to say about ``task``. Like a task filter, an active task scorer means that no
    placement answers are shared between jobs alike."""

    name: str
    weight: float
    active: Callable[[Session], bool]
    scores: Callable[[Session, TaskInfo], FloatArray | None]
    enabled: Callable[[SchedulerConfig], bool] = _always


#: the job order: one sort key per job, smaller first; keys must be unique (end with the uid)
JobOrder = Callable[["JobInfo"], tuple[object, ...]]


@dataclass(frozen=True)
class CommitHook:
    """Runs after a statement's operations became decisions (``Statement.commit``), with those
    operations, in commit order; not on rollback or discard. It may read the session and keep
    its own state; it must not change placements."""

    name: str
    run: Callable[[Session, Sequence[Operation]], None]


@dataclass(frozen=True)
class VictimCheck:
    """May a job be a victim of reclaim, preempt and consolidation at all (the victim side of
    KAI's preemptable / reclaimable callbacks)? ``allows(session, job)`` is asked after the
    job's own preemptibility, once per action run, so it may read the job's spec and the
    snapshot but not placements. Stale-gang eviction does not ask (a stale gang is evicted
    whatever its kind)."""

    name: str
    allows: Callable[[Session, JobInfo], bool]


def resource_reason(column: str) -> str:
    return f"insufficient {column}"


@dataclass(frozen=True)
class Registry:
    """The plugins of a session, in order. Build variants with :meth:`with_filter`,
    :meth:`with_scorer` and :meth:`without`; the constructor checks the list."""

    filters: tuple[Filter, ...]
    scorers: tuple[NodeScorer | TaskScorer, ...]
    job_order: JobOrder = job_order_key
    on_commit: tuple[CommitHook, ...] = ()
    victim_checks: tuple[VictimCheck, ...] = ()

    def __post_init__(self) -> None:
        names = [p.name for p in self._named()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"plugin registry: plugin name(s) listed twice: {', '.join(twice)}")
        if sum(isinstance(f, DomainFilter) for f in self.filters) != 1:
            raise ValueError("plugin registry: exactly one DomainFilter slot is required")
        reasons = [r for f in self.filters for r in f.reasons]
        clash = sorted(
            {r for r in reasons if reasons.count(r) > 1}
            | {r for r in reasons if r in (TOO_MANY_PODS, INSUFFICIENT_SHARED)}
            | {r for r in reasons if r.startswith("insufficient ")}
        )
        if clash:
            raise ValueError(
                "plugin registry: filter reasons must be unique and not a resource-fit reason: "
                + ", ".join(repr(r) for r in clash)
            )

    # ------------------------------------------------------------------ building variants
    def with_filter(self, plugin: Filter, before: str | None = None) -> Registry:
        """A registry with ``plugin`` inserted before the filter named ``before`` (default:
        last, just before resource fit)."""
        filters = list(self.filters)
        filters.insert(self._position(filters, before), plugin)
        return replace(self, filters=tuple(filters))

    def with_scorer(self, plugin: NodeScorer | TaskScorer, before: str | None = None) -> Registry:
        scorers = list(self.scorers)
        scorers.insert(self._position(scorers, before), plugin)
        return replace(self, scorers=tuple(scorers))

    def with_commit_hook(self, hook: CommitHook) -> Registry:
        return replace(self, on_commit=(*self.on_commit, hook))

    def with_victim_check(self, check: VictimCheck) -> Registry:
        return replace(self, victim_checks=(*self.victim_checks, check))

    def _named(self) -> tuple[Filter | NodeScorer | TaskScorer | CommitHook | VictimCheck, ...]:
        return (*self.filters, *self.scorers, *self.on_commit, *self.victim_checks)

    def without(self, *names: str) -> Registry:
        known = {p.name for p in self._named()}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"plugin registry: no plugin named {', '.join(unknown)}")
        return replace(
            self,
            filters=tuple(f for f in self.filters if f.name not in names),
            scorers=tuple(s for s in self.scorers if s.name not in names),
            on_commit=tuple(h for h in self.on_commit if h.name not in names),
            victim_checks=tuple(c for c in self.victim_checks if c.name not in names),
        )

    def for_config(self, config: SchedulerConfig) -> Registry:
        """The plugins ``config`` leaves on."""
        return replace(
            self,
            filters=tuple(f for f in self.filters if f.enabled(config)),
            scorers=tuple(s for s in self.scorers if s.enabled(config)),
        )

    @staticmethod
    def _position(plugins: Sequence[Filter | NodeScorer | TaskScorer], before: str | None) -> int:
        if before is None:
            return len(plugins)
        for i, plugin in enumerate(plugins):
            if plugin.name == before:
                return i
        raise ValueError(f"plugin registry: no plugin named {before!r} to insert before")

    # ------------------------------------------------------------------ reading
    @property
    def node_filters(self) -> tuple[NodeFilter, ...]:
        return tuple(f for f in self.filters if isinstance(f, NodeFilter))

    @property
    def task_filters(self) -> tuple[TaskFilter, ...]:
        return tuple(f for f in self.filters if isinstance(f, TaskFilter))

    @property
    def node_scorers(self) -> tuple[NodeScorer, ...]:
        return tuple(s for s in self.scorers if isinstance(s, NodeScorer))

    @property
    def task_scorers(self) -> tuple[TaskScorer, ...]:
        return tuple(s for s in self.scorers if isinstance(s, TaskScorer))

    @property
    def domain(self) -> DomainFilter:
        return next(f for f in self.filters if isinstance(f, DomainFilter))

    def may_be_victim(self, session: Session, job: JobInfo) -> bool:
        """Every victim check allows ``job`` as a victim."""
        return all(check.allows(session, job) for check in self.victim_checks)

    def reason_names(self, columns: Sequence[str]) -> list[str]:
        """Every reason a node can be charged to, indexed by failure code (0: none): the
        filters' reasons in registry order, then resource fit (pods, each resource column but
        pods, shared GPU memory). Lower codes come first in the order of charging."""
        names = [""]
        names.extend(r for f in self.filters for r in f.reasons)
        names.append(TOO_MANY_PODS)
        names.extend(resource_reason(col) for i, col in enumerate(columns) if i != PODS)
        names.append(INSUFFICIENT_SHARED)
        return names

    def summarize(self, counts: dict[str, int], total: int) -> str:
        """``0/5 nodes are available: 3 nodes: insufficient gpu; 2 nodes: node affinity
        mismatch``: largest counts first, then registry order (the "insufficient" reasons of
        resource fit last, by name)."""
        rank = {r: i for i, r in enumerate((*(r for f in self.filters for r in f.reasons),))}
        rank[TOO_MANY_PODS] = len(rank)
        last = len(rank) + 1
        parts = sorted(
            counts.items(), key=lambda item: (-item[1], rank.get(item[0], last), item[0])
        )
        body = "; ".join(f"{n} node{'s' if n != 1 else ''}: {reason}" for reason, n in parts)
        if total == 0:
            return "no nodes in the cluster"
        return f"0/{total} nodes are available: {body}"
