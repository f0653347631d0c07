"""Choosing a node (and shared devices) for a task, through the session's plugin registry.

Tasks with the same request and constraints (what the registry's node filters and scorers read
of them) form an equivalence class. A class keeps, for every
node, whether the task fits now and after releases, and its score; between two uses only the
nodes touched in between (:attr:`NodeTable.touched`) are recomputed. The best node is the
``argmax`` of the class's key array (score, or -inf where the task cannot go); nodes are in name
order, so ties go to the lowest name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kai.scheduler import predicates
from kai.scheduler.framework import (
    ClassView,
    NodeView,
    Registry,
    RowScore,
    ScoreRows,
    resource_reason,
)
from kai.scheduler.gpu_sharing import choose_devices, new_device_id
from kai.scheduler.jobs import TaskInfo
from kai.scheduler.resource_layout import EPS, GPU, PODS, BoolArray, FloatArray
from kai.scheduler.snapshot import TaskSpec

if TYPE_CHECKING:
    from kai.scheduler.session import Session

NEG_INF = -np.inf
# beyond this many touched rows a full recompute is cheaper than row updates
_FULL_RECOMPUTE_FRACTION = 0.25


@dataclass(frozen=True)
class Choice:
    node: int
    fits_now: bool  # False: the task is pipelined onto releasing resources
    gpu_groups: tuple[str, ...] = ()


def shared_memory(spec: TaskSpec, device_memory: float) -> float:
    """MiB a shared-GPU task takes on each of its devices."""
    if spec.gpu.memory_mib is not None:
        return float(spec.gpu.memory_mib)
    fraction = spec.gpu.fraction or 0.0
    return round(fraction * device_memory, 6)


class EqClass:
    """Cached fit and score of one kind of task against every node."""

    def __init__(self, engine: PlacementEngine, task: TaskInfo, class_id: int) -> None:
        session = engine.session
        self.id = class_id
        nodes = session.nodes
        spec = task.spec
        self.engine = engine
        self.spec = spec
        self.request = task.request
        self.columns = np.flatnonzero(task.request > 0)
        self.shared = spec.gpu.is_shared
        self.num_devices = spec.gpu.num_devices
        self.uses_gpu = spec.gpu.whole > 0 or self.shared or spec.gpu.is_mig
        size = len(nodes)
        # The registry's node filters, in order: ``static`` is where all of them pass;
        # ``static_code`` the first one each node fails (a failure code, 0 = none), so that with
        # the resource codes of _recompute an explanation is one bincount.
        codes = engine.codes
        static = np.ones(size, dtype=bool)
        static_code = np.zeros(size, dtype=np.int16)
        for plugin in engine.registry.node_filters:
            for reason, ok in plugin.masks(engine.view, spec):
                code = codes.get(reason)
                if code is None or reason not in plugin.reasons:
                    raise ValueError(
                        f"filter plugin {plugin.name!r} returned the reason {reason!r}, which it "
                        f"does not declare (declared: {', '.join(plugin.reasons)})"
                    )
                static = static & ok
                static_code = np.where((static_code == 0) & ~ok, code, static_code)
        self.static: BoolArray = static
        self.static_code = static_code
        layout = nodes.layout
        self.resource_codes = [
            (int(col), codes[resource_reason(layout.names[col])])
            for col in self.columns
            if col != PODS
        ]
        self.pods_code = codes[predicates.TOO_MANY_PODS]
        self.shared_code = codes[predicates.INSUFFICIENT_SHARED]
        self.reason_code = static_code.copy()
        if self.shared and spec.gpu.memory_mib is not None:
            self.memory: FloatArray = np.full(size, float(spec.gpu.memory_mib))
        elif self.shared:
            fraction = spec.gpu.fraction or 0.0
            self.memory = np.round(fraction * nodes.gpu_memory, 6)
        else:
            self.memory = np.zeros(size)
        view = ClassView(
            nodes, session.config, spec, task.request, self.uses_gpu, self.shared, engine.labels
        )
        self.scorers: list[tuple[float, RowScore]] = []
        for scorer in engine.registry.node_scorers:
            row_score = scorer.prepare(view)
            if row_score is not None:
                self.scorers.append((scorer.weight, row_score))
        self.fits_future: BoolArray = np.zeros(size, dtype=bool)
        self.fits_now: BoolArray = np.zeros(size, dtype=bool)
        self.key: FloatArray = np.full(size, NEG_INF)
        self.synced = 0
        self.full_at = -1  # ``synced`` stamp at which no node could take the task
        self._explained: tuple[int, dict[str, int]] = (-1, {})
        self._recompute(np.arange(size))
        self.synced = len(nodes.touched)

    # ------------------------------------------------------------------ fit and score
    def sync(self) -> None:
        touched = self.engine.session.nodes.touched
        if self.synced == len(touched):
            return
        new = touched[self.synced :]
        size = len(self.static)
        if len(new) > _FULL_RECOMPUTE_FRACTION * size:
            rows = np.arange(size)
        else:
            rows = np.unique(np.fromiter(new, dtype=np.intp, count=len(new)))
        self._recompute(rows)
        self.synced = len(touched)

    def _recompute(self, rows: np.ndarray) -> None:
        nodes = self.engine.session.nodes
        cols = self.columns
        idle = nodes.idle[rows]
        releasing = nodes.releasing[rows]
        future = idle + releasing
        need = self.request[cols] - EPS
        fut_ok = (future[:, cols] >= need).all(axis=1)
        now_ok = fut_ok & (idle[:, cols] >= need).all(axis=1)
        shared_room = None
        if self.shared:
            fut_ok, now_ok, shared_room = self._shared_fit(rows, idle, future, fut_ok, now_ok)
        state = ScoreRows(rows, idle, future, now_ok, shared_room)
        bonus = np.zeros(len(rows))
        for weight, row_score in self.scorers:
            score = row_score(state)
            if score.dtype == np.bool_:
                bonus += np.where(score, weight, 0.0)
            elif weight == 1.0:
                bonus += score
            else:
                bonus += weight * score
        self.fits_future[rows] = fut_ok
        self.fits_now[rows] = now_ok
        self.key[rows] = np.where(fut_ok & self.static[rows], bonus, NEG_INF)
        code = self.static_code[rows]
        code = np.where((code == 0) & (future[:, PODS] < 1 - EPS), self.pods_code, code)
        for col, col_code in self.resource_codes:
            short = future[:, col] < self.request[col] - EPS
            code = np.where((code == 0) & short, col_code, code)
        if self.shared:
            code = np.where((code == 0) & ~fut_ok, self.shared_code, code)
        self.reason_code[rows] = code

    def _shared_fit(
        self,
        rows: np.ndarray,
        idle: FloatArray,
        future: FloatArray,
        fut_ok: BoolArray,
        now_ok: BoolArray,
    ) -> tuple[BoolArray, BoolArray, BoolArray]:
        nodes = self.engine.session.nodes
        memory = self.memory[rows]
        need = memory - EPS
        now_cap = np.minimum(idle, future)
        slot_future = (
            (future[:, GPU] >= 1 - EPS)
            & (future[:, PODS] >= 2 - EPS)
            & (nodes.gpu_memory[rows] >= need)
        )
        slot_now = slot_future & (now_cap[:, GPU] >= 1 - EPS) & (now_cap[:, PODS] >= 2 - EPS)
        dev_future = nodes.dev_free_future[rows] >= need
        dev_now = nodes.dev_free_now[rows] >= need
        if self.num_devices == 1:
            return fut_ok & (dev_future | slot_future), now_ok & (dev_now | slot_now), dev_future
        # several devices per task: count them exactly (rare, a Python loop over the rows)
        multi_future = np.zeros(len(rows), dtype=bool)
        multi_now = np.zeros(len(rows), dtype=bool)
        for k, node in enumerate(rows):
            slots_now, slots_future = nodes.whole_slots(int(node))
            if future[k, PODS] < 2 - EPS:
                slots_future = 0
            if now_cap[k, PODS] < 2 - EPS:
                slots_now = 0
            picked = choose_devices(
                nodes.sorted_devices(int(node)),
                float(memory[k]),
                self.num_devices,
                slots_now,
                slots_future,
                "none",
            )
            multi_future[k] = picked is not None
            multi_now[k] = picked is not None and all(c.fits_now for c in picked)
        return fut_ok & multi_future, now_ok & multi_now, dev_future

    # ------------------------------------------------------------------ explanation
    def explain(self, restrictions: list[tuple[int, BoolArray]]) -> dict[str, int]:
        """Nodes per reason: each node charged to the first filter it fails, in registry order.
        ``restrictions`` are (failure code, mask) pairs of the filters not cached in the class
        (the caller's domain, task filters), in increasing code order."""
        self.sync()
        names = self.engine.reason_names
        if not restrictions:
            if self._explained[0] == self.synced:
                return self._explained[1]
            code = self.reason_code
        else:
            code = self.reason_code.copy()
            for restriction, ok in restrictions:
                # a node failing this filter is charged to it unless it failed an earlier one
                code = np.where(~ok & ((code == 0) | (code > restriction)), restriction, code)
        counts_by_code = np.bincount(code, minlength=len(names))
        summary = {names[c]: int(n) for c, n in enumerate(counts_by_code) if c > 0 and n > 0}
        if not restrictions:
            self._explained = (self.synced, summary)
        return summary


class PlacementEngine:
    """Chooses nodes through the session's plugin registry (:mod:`kai.scheduler.framework`)."""

    def __init__(self, session: Session, registry: Registry) -> None:
        self.session = session
        self.registry = registry
        self.labels = predicates.LabelIndex(session.nodes)
        self.view = NodeView(session.nodes, self.labels, session.config)
        self.reason_names = registry.reason_names(session.nodes.layout.names)
        self.codes = {name: code for code, name in enumerate(self.reason_names)}
        self.domain_code = self.codes[registry.domain.reason]
        self.task_filters = [f for f in registry.task_filters if f.active(session)]
        self.task_scorers = [s for s in registry.task_scorers if s.active(session)]
        #: True when some task filter or task scorer can change a choice: then two tasks of one
        #: class may get different answers, and nothing may be shared between jobs alike for
        #: placement
        self.per_task_filters = bool(self.task_filters or self.task_scorers)
        self._key_parts = [f.class_key for f in registry.node_filters if f.class_key is not None]
        self._key_parts += [s.class_key for s in registry.node_scorers if s.class_key is not None]
        self._classes: dict[tuple[object, ...], EqClass] = {}
        self._by_id: list[EqClass] = []
        # explanation dict (by identity; kept alive by the tuple) -> its message
        self._summaries: dict[int, tuple[dict[str, int], str]] = {}

    def class_key(self, spec: TaskSpec, request: FloatArray) -> tuple[object, ...]:
        """What a class's arrays depend on: the request, the GPU kind (resource fit) and what
        each node filter and scorer reads of the spec. Task filters (pod affinity) are not part
        of it: they are applied per task on top of the class."""
        return (request.tobytes(), spec.gpu, *self.constraint_key(spec))

    def constraint_key(self, spec: TaskSpec) -> tuple[object, ...]:
        """What the node filters and scorers read of ``spec`` (sizes left out)."""
        return tuple([part(spec) for part in self._key_parts])

    def class_of(self, task: TaskInfo) -> EqClass:
        if task.signature >= 0:
            return self._by_id[task.signature]
        key = self.class_key(task.spec, task.request)
        cls = self._classes.get(key)
        if cls is None:
            cls = EqClass(self, task, len(self._by_id))
            self._classes[key] = cls
            self._by_id.append(cls)
        task.signature = cls.id
        return cls

    def _task_masks(self, task: TaskInfo) -> list[tuple[int, BoolArray]]:
        """(failure code, mask) of every active task filter that restricts ``task``."""
        out: list[tuple[int, BoolArray]] = []
        for plugin in self.task_filters:
            for reason, ok in plugin.masks(self.session, task):
                code = self.codes.get(reason)
                if code is None or reason not in plugin.reasons:
                    raise ValueError(
                        f"filter plugin {plugin.name!r} returned the reason {reason!r}, which it "
                        f"does not declare (declared: {', '.join(plugin.reasons)})"
                    )
                out.append((code, ok))
        return out

    def _task_scores(self, task: TaskInfo, key: FloatArray) -> FloatArray:
        """``key`` plus every active task scorer's scores for ``task`` (nodes where the task
        cannot go stay at -inf); ``key`` itself when none has anything to say."""
        for plugin in self.task_scorers:
            scores = plugin.scores(self.session, task)
            if scores is not None:
                key = key + (scores if plugin.weight == 1.0 else plugin.weight * scores)
        return key

    def choose(self, task: TaskInfo, allowed: BoolArray | None = None) -> Choice | None:
        """The best node for ``task`` (within ``allowed`` nodes), or None when none fits."""
        cls = self.class_of(task)
        cls.sync()
        key = cls.key
        if allowed is not None:
            key = np.where(allowed, key, NEG_INF)
        if self.task_filters:
            masks = self._task_masks(task)
            if masks:
                ok = masks[0][1]
                for _, mask in masks[1:]:
                    ok = ok & mask
                key = np.where(ok, key, NEG_INF)
        if self.task_scorers:
            key = self._task_scores(task, key)
        if key is cls.key and cls.full_at == cls.synced:
            return None  # nothing changed for this class since it last found no node
        while True:
            if len(key) == 0:
                return None
            best = int(np.argmax(key))
            if key[best] == NEG_INF:
                if key is cls.key:
                    cls.full_at = cls.synced
                return None
            if not cls.shared:
                return Choice(best, bool(cls.fits_now[best]))
            choice = self._shared_choice(task, cls, best)
            if choice is not None:
                return choice
            if key is cls.key:
                key = key.copy()
            key[best] = NEG_INF

    def _shared_choice(self, task: TaskInfo, cls: EqClass, node: int) -> Choice | None:
        nodes = self.session.nodes
        idle = nodes.idle[node]
        future = idle + nodes.releasing[node]
        slots_now, slots_future = nodes.whole_slots(node)
        if future[PODS] < 2 - EPS:
            slots_future = 0
        if min(idle[PODS], future[PODS]) < 2 - EPS:
            slots_now = 0
        memory = float(cls.memory[node])
        picked = choose_devices(
            nodes.sorted_devices(node),
            memory,
            cls.num_devices,
            slots_now,
            slots_future,
            self.session.config.gpu_sharing_placement,
        )
        if picked is None:
            return None
        taken = set(nodes.devices[node])
        groups: list[str] = []
        for pick in picked:
            if pick.device_id is None:
                device_id = new_device_id(nodes.names[node], taken)
                taken.add(device_id)
                groups.append(device_id)
            else:
                groups.append(pick.device_id)
        cols = cls.columns
        base_now = bool((np.minimum(idle, future)[cols] >= task.request[cols] - EPS).all())
        fits_now = base_now and all(pick.fits_now for pick in picked)
        return Choice(node, fits_now, tuple(groups))

    def explain(self, task: TaskInfo, allowed: BoolArray | None = None) -> str:
        """Why ``task`` fits on no node (within ``allowed``): nodes counted by the first filter
        they fail, in registry order, as a message."""
        cls = self.class_of(task)
        restrictions = self._task_masks(task) if self.task_filters else []
        if allowed is not None:
            restrictions.append((self.domain_code, allowed))
            restrictions.sort(key=lambda pair: pair[0])
        counts = cls.explain(restrictions)
        cached = self._summaries.get(id(counts))
        if cached is not None and cached[0] is counts:
            return cached[1]
        text = self.registry.summarize(counts, len(self.session.nodes))
        if len(self._summaries) > 10_000:
            self._summaries.clear()
        self._summaries[id(counts)] = (counts, text)
        return text
