"""The node table: the state of every node as numpy arrays, indexed by node position.

Nodes are sorted by name, so the position order is the name order and ``argmax`` over a score
array breaks ties by node name, as KAI does. Accounting rules (docs/design/core.md): a task's
request ``r`` charges its node according to its status only, which makes every change exactly
reversible:

- Running, Binding, Bound, Allocated: ``idle -= r``;
- Releasing: ``idle -= r`` and ``releasing += r``;
- Pipelined: ``releasing -= r``.

Every change appends the node's position to :attr:`NodeTable.touched`, a log that equivalence
classes read to recompute only the rows that changed since they last looked.
"""

from __future__ import annotations

import numpy as np

from kai.scheduler.gpu_sharing import SharedDevice
from kai.scheduler.resource_layout import GPU, BoolArray, FloatArray, ResourceLayout
from kai.scheduler.snapshot import NodeSpec, Taint, TaskStatus

_HOLDING = frozenset(
    {TaskStatus.RUNNING, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.ALLOCATED}
)


class NodeTable:
    def __init__(self, specs: list[NodeSpec], layout: ResourceLayout) -> None:
        ordered = sorted(specs, key=lambda spec: spec.name)
        self.layout = layout
        self.specs = ordered
        self.names: list[str] = [spec.name for spec in ordered]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        n = len(ordered)
        self.allocatable: FloatArray = np.zeros((n, layout.size), dtype=np.float64)
        for i, spec in enumerate(ordered):
            self.allocatable[i] = layout.node_vector(spec)
        self.idle: FloatArray = self.allocatable.copy()
        self.releasing: FloatArray = np.zeros_like(self.allocatable)
        self.gpu_memory: FloatArray = np.array([s.gpu_memory_mib for s in ordered], dtype=float)
        self.schedulable: BoolArray = np.array(
            [s.ready and not s.unschedulable for s in ordered], dtype=bool
        )
        self.ready: BoolArray = np.array([s.ready for s in ordered], dtype=bool)
        self.is_mig: BoolArray = np.array([s.mig is not None for s in ordered], dtype=bool)
        self.mig_mixed: BoolArray = np.array(
            [s.mig is not None and s.mig.strategy == "mixed" for s in ordered], dtype=bool
        )
        self.labels: list[dict[str, str]] = [dict(s.labels) for s in ordered]
        self.taints: list[tuple[Taint, ...]] = [tuple(s.taints) for s in ordered]
        # a node without GPUs (and without MIG instances) is a "CPU-only" node (resourcetype)
        mig_columns = [
            i for i, name in enumerate(layout.names) if name.startswith("nvidia.com/mig-")
        ]
        gpu_total = self.allocatable[:, GPU].copy()
        if mig_columns:
            gpu_total += self.allocatable[:, mig_columns].sum(axis=1)
        self.cpu_only: BoolArray = gpu_total <= 0
        self.max_capacity: FloatArray = (
            self.allocatable.max(axis=0) if n else np.zeros(layout.size, dtype=np.float64)
        )
        self.devices: list[dict[str, SharedDevice]] = [{} for _ in range(n)]
        # best free memory of an offerable device (0 when none): now / after releases
        self.dev_free_now: FloatArray = np.zeros(n, dtype=np.float64)
        self.dev_free_future: FloatArray = np.zeros(n, dtype=np.float64)
        self.touched: list[int] = []
        self._unit_gpu: FloatArray = np.zeros(layout.size, dtype=np.float64)
        self._unit_gpu[GPU] = 1.0

    def __len__(self) -> int:
        return len(self.names)

    def charge(self, node: int, request: FloatArray, status: TaskStatus, sign: int) -> None:
        """Add (sign +1) or remove (sign -1) a request held with ``status`` on ``node``."""
        # in place, without a temporary ``sign * request`` (x - (-y) is exactly x + y)
        if status is TaskStatus.RUNNING or status is TaskStatus.ALLOCATED or status in _HOLDING:
            idle = self.idle[node]
            if sign > 0:
                idle -= request
            else:
                idle += request
        elif status is TaskStatus.RELEASING:
            idle, releasing = self.idle[node], self.releasing[node]
            if sign > 0:
                idle -= request
                releasing += request
            else:
                idle += request
                releasing -= request
        elif status is TaskStatus.PIPELINED:
            releasing = self.releasing[node]
            if sign > 0:
                releasing -= request
            else:
                releasing += request
        else:
            return
        self.touched.append(node)

    def charge_shared(
        self, node: int, device_id: str, memory: float, status: TaskStatus, sign: int
    ) -> None:
        """Add or remove a shared task's ``memory`` on one device, opening or closing the device
        (and its whole GPU) as its task count goes from or to zero."""
        devices = self.devices[node]
        device = devices.get(device_id)
        if device is None:
            device = SharedDevice(device_id, float(self.gpu_memory[node]))
            devices[device_id] = device
        before = device.whole_status()
        device.charge(memory, status, sign)
        after = device.whole_status()
        if before is not after:
            if before is not None:
                self.charge(node, self._unit_gpu, before, -1)
            if after is not None:
                self.charge(node, self._unit_gpu, after, +1)
        if device.tasks == 0:
            del devices[device_id]
        self.refresh_devices(node)

    def refresh_devices(self, node: int) -> None:
        best_now = 0.0
        best_future = 0.0
        for device in self.devices[node].values():
            if device.offerable():
                best_now = max(best_now, device.free_now())
                best_future = max(best_future, device.free_future())
        self.dev_free_now[node] = best_now
        self.dev_free_future[node] = best_future
        self.touched.append(node)

    def sorted_devices(self, node: int) -> list[SharedDevice]:
        devices = self.devices[node]
        return [devices[key] for key in sorted(devices)]

    def whole_slots(self, node: int) -> tuple[int, int]:
        """Whole GPUs a new shared device may take: (now, after releases)."""
        idle = float(self.idle[node, GPU])
        future = idle + float(self.releasing[node, GPU])
        now = min(idle, future)
        return int(np.floor(now + 1e-9)), int(np.floor(future + 1e-9))
