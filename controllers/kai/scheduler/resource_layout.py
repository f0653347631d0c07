"""Resource columns of the node table and task request vectors.

Columns: ``cpu`` (millicores), ``memory`` (bytes), ``gpu`` (whole devices), ``pods``, then every
extended resource and MIG profile named by a node or a task, sorted by name. One layout serves a
whole session, so a request is a numpy row that can be compared with all nodes at once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kai.scheduler.snapshot import NodeSpec, TaskSpec

CPU, MEMORY, GPU, PODS = 0, 1, 2, 3
BASE_COLUMNS = ("cpu", "memory", "gpu", "pods")

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: tolerance of resource comparisons (fractions summed many times drift by ulps)
EPS = 1e-9


class ResourceLayout:
    """Column names and indexes of one session's resource vectors."""

    def __init__(self, extended: Iterable[str] = ()) -> None:
        extra = sorted(set(extended) - set(BASE_COLUMNS))
        self.names: tuple[str, ...] = (*BASE_COLUMNS, *extra)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._task_vectors: dict[tuple[object, ...], FloatArray] = {}

    @property
    def size(self) -> int:
        return len(self.names)

    @classmethod
    def for_snapshot(cls, nodes: Iterable[NodeSpec], tasks: Iterable[TaskSpec]) -> ResourceLayout:
        names: set[str] = set()
        for node in nodes:
            names.update(node.extended)
            if node.mig is not None:
                names.update(profile for profile, _ in node.mig.devices)
        for task in tasks:
            names.update(task.extended)
            names.update(profile for profile, _ in task.gpu.mig)
        return cls(names)

    def node_vector(self, node: NodeSpec) -> FloatArray:
        vec = np.zeros(self.size, dtype=np.float64)
        vec[CPU] = node.cpu_millis
        vec[MEMORY] = node.memory_bytes
        vec[GPU] = node.gpus
        vec[PODS] = node.max_pods
        for name, amount in node.extended.items():
            vec[self.index[name]] += amount
        if node.mig is not None:
            for profile, count in node.mig.devices:
                vec[self.index[profile]] += count
        return vec

    def task_vector(self, task: TaskSpec) -> FloatArray:
        """What a task takes from its node's columns. Shared-GPU requests take no whole GPU here:
        their devices are accounted by :mod:`kai.scheduler.gpu_sharing`. Identical requests share
        one read-only array."""
        key = (
            task.cpu_millis,
            task.memory_bytes,
            task.gpu,
            tuple(sorted(task.extended.items())) if task.extended else (),
        )
        cached = self._task_vectors.get(key)
        if cached is not None:
            return cached
        vec = np.zeros(self.size, dtype=np.float64)
        vec[CPU] = task.cpu_millis
        vec[MEMORY] = task.memory_bytes
        vec[GPU] = 0 if task.gpu.is_shared else task.gpu.whole
        vec[PODS] = 1
        for name, amount in task.extended.items():
            vec[self.index[name]] += amount
        for profile, count in task.gpu.mig:
            vec[self.index[profile]] += count
        vec.flags.writeable = False
        self._task_vectors[key] = vec
        return vec
