"""Choosing a node (and shared devices) for a task.

Tasks with the same request and constraints form an equivalence class. A class keeps, for every
node, whether the task fits now and after releases, and its score; between two uses only the
nodes touched in between (:attr:`NodeTable.touched`) are recomputed. The best node is the
``argmax`` of the class's key array (score, or -inf where the task cannot go); nodes are in name
order, so ties go to the lowest name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kai.scheduler import predicates, scoring
from kai.scheduler.gpu_sharing import choose_devices, new_device_id
from kai.scheduler.jobs import TaskInfo
from kai.scheduler.pod_affinity import affinity_masks
from kai.scheduler.resource_layout import CPU, EPS, GPU, PODS, BoolArray, FloatArray
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


def class_key(spec: TaskSpec, request: FloatArray) -> tuple[object, ...]:
    """What a class's arrays depend on. Labels and pod (anti-)affinity terms are not part of it:
    their masks depend on where other tasks are and are applied per task on top of the class."""
    return (
        request.tobytes(),
        spec.gpu,
        tuple(sorted(spec.node_selector.items())),
        spec.node_affinity,
        spec.tolerations,
    )


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
        self.taint = predicates.taint_mask(nodes, spec.tolerations)
        self.affinity = predicates.affinity_mask(
            engine.labels, spec.node_selector, spec.node_affinity, size
        )
        self.gpu_type = predicates.gpu_type_masks(nodes, spec)
        static = nodes.schedulable & self.taint & self.affinity
        for _, mask in self.gpu_type:
            static = static & mask
        self.static: BoolArray = static
        # Why a node cannot take the task: an index into ``reason_names`` (0 = it can), the
        # first failing filter in predicate order. Static filters are coded once here, resource
        # filters per row in _recompute, so an explanation is one bincount.
        self.reason_names: list[str] = [""]
        static_code = np.zeros(size, dtype=np.int16)
        static_checks = [
            (predicates.NOT_READY, nodes.ready),
            (predicates.UNSCHEDULABLE, nodes.schedulable),
            (predicates.TAINT, self.taint),
            (predicates.NODE_AFFINITY, self.affinity),
            *self.gpu_type,
        ]
        for name, ok in static_checks:
            static_code = np.where((static_code == 0) & ~ok, self._code(name), static_code)
        self.static_code = static_code
        layout = nodes.layout
        self.resource_codes = [
            (int(col), self._code(f"insufficient {layout.names[col]}"))
            for col in self.columns
            if col != PODS
        ]
        self.pods_code = self._code(predicates.TOO_MANY_PODS)
        self.shared_code = self._code(predicates.INSUFFICIENT_SHARED)
        self.reason_code = static_code.copy()
        if self.shared and spec.gpu.memory_mib is not None:
            self.memory: FloatArray = np.full(size, float(spec.gpu.memory_mib))
        elif self.shared:
            fraction = spec.gpu.fraction or 0.0
            self.memory = np.round(fraction * nodes.gpu_memory, 6)
        else:
            self.memory = np.zeros(size)
        config = session.config
        if self.uses_gpu:
            self.strategy = config.placement_gpu
            self.score_column = GPU
        else:
            self.strategy = config.placement_cpu
            self.score_column = CPU
        self.sharing_bonus = self.shared and config.placement_gpu == "binpack"
        self.type_bonus = (
            np.where(nodes.cpu_only, scoring.RESOURCE_TYPE, 0.0) if not self.uses_gpu else None
        )
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
        bonus = np.zeros(len(rows))
        if self.shared:
            fut_ok, now_ok, dev_future = self._shared_fit(rows, idle, future, fut_ok, now_ok)
            if self.sharing_bonus:
                bonus += np.where(dev_future, scoring.GPU_SHARING, 0.0)
        col = self.score_column
        bonus += scoring.placement(
            self.strategy,
            future[:, col],
            nodes.allocatable[rows, col],
            float(nodes.max_capacity[col]) if len(nodes) else 0.0,
        )
        bonus += np.where(now_ok, scoring.AVAILABILITY, 0.0)
        if self.type_bonus is not None:
            bonus += self.type_bonus[rows]
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

    def _code(self, name: str) -> int:
        if name not in self.reason_names:
            self.reason_names.append(name)
        return self.reason_names.index(name)

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
    def explain(
        self, allowed: BoolArray | None, affinity: tuple[BoolArray, BoolArray] | None
    ) -> dict[str, int]:
        nodes = self.engine.session.nodes
        self.sync()
        if allowed is None and affinity is None:
            if self._explained[0] == self.synced:
                return self._explained[1]
            counts_by_code = np.bincount(self.reason_code, minlength=len(self.reason_names))
            summary = {
                self.reason_names[code]: int(n)
                for code, n in enumerate(counts_by_code)
                if code > 0 and n > 0
            }
            self._explained = (self.synced, summary)
            return summary
        remaining = np.ones(len(nodes), dtype=bool)
        counts: dict[str, int] = {}

        def charge(name: str, ok: BoolArray) -> None:
            nonlocal remaining
            failing = int(np.count_nonzero(remaining & ~ok))
            if failing:
                counts[name] = counts.get(name, 0) + failing
                remaining = remaining & ok

        charge(predicates.NOT_READY, nodes.ready)
        charge(predicates.UNSCHEDULABLE, nodes.schedulable)
        if allowed is not None:
            charge(predicates.OUTSIDE_DOMAIN, allowed)
        charge(predicates.TAINT, self.taint)
        charge(predicates.NODE_AFFINITY, self.affinity)
        if affinity is not None:
            charge(predicates.POD_AFFINITY, affinity[0])
            charge(predicates.POD_ANTI_AFFINITY, affinity[1])
        for name, mask in self.gpu_type:
            charge(name, mask)
        future = nodes.idle + nodes.releasing
        charge(predicates.TOO_MANY_PODS, future[:, PODS] >= 1 - EPS)
        layout = nodes.layout
        for col in self.columns:
            if col == PODS:
                continue
            charge(f"insufficient {layout.names[col]}", future[:, col] >= self.request[col] - EPS)
        if self.shared:
            charge(predicates.INSUFFICIENT_SHARED, self.fits_future)
        return counts


class PlacementEngine:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.labels = predicates.LabelIndex(session.nodes)
        self._classes: dict[tuple[object, ...], EqClass] = {}
        self._by_id: list[EqClass] = []
        # explanation dict (by identity; kept alive by the tuple) -> its message
        self._summaries: dict[int, tuple[dict[str, int], str]] = {}

    def class_of(self, task: TaskInfo) -> EqClass:
        if task.signature >= 0:
            return self._by_id[task.signature]
        key = class_key(task.spec, task.request)
        cls = self._classes.get(key)
        if cls is None:
            cls = EqClass(self, task, len(self._by_id))
            self._classes[key] = cls
            self._by_id.append(cls)
        task.signature = cls.id
        return cls

    def _affinity(self, task: TaskInfo, cls: EqClass) -> tuple[BoolArray, BoolArray] | None:
        """Pod (anti-)affinity masks for ``task``, or None when nothing can restrict it: it has
        no terms of its own and no placed task has an anti-affinity term."""
        session = self.session
        if not session.uses_pod_affinity:
            return None
        spec = task.spec
        placed = session.placed_pods
        if not (spec.pod_affinity or spec.pod_anti_affinity or placed.any_anti_affinity()):
            return None
        return affinity_masks(spec, placed, session.nodes.labels)

    def choose(self, task: TaskInfo, allowed: BoolArray | None = None) -> Choice | None:
        """The best node for ``task`` (within ``allowed`` nodes), or None when none fits."""
        cls = self.class_of(task)
        cls.sync()
        key = cls.key
        affinity = self._affinity(task, cls)
        if allowed is not None:
            key = np.where(allowed, key, NEG_INF)
        if affinity is not None:
            key = np.where(affinity[0] & affinity[1], key, NEG_INF)
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
        cls = self.class_of(task)
        counts = cls.explain(allowed, self._affinity(task, cls))
        cached = self._summaries.get(id(counts))
        if cached is not None and cached[0] is counts:
            return cached[1]
        text = predicates.summarize(counts, len(self.session.nodes))
        if len(self._summaries) > 10_000:
            self._summaries.clear()
        self._summaries[id(counts)] = (counts, text)
        return text
