"""Shared GPU devices of one node (KAI "GPU groups"), accounted in MiB.

A fractional or gpu-memory task sits on one or more devices of its node. A device exists while at
least one placed task uses it; it then holds one whole GPU of the node, which is accounted in the
node table like a task whose status is the device's :meth:`SharedDevice.whole_status`. Device
memory follows the same rules as node resources (see docs/design/core.md): ``used`` holds the
memory of non-pipelined tasks, ``releasing`` the memory of Releasing tasks minus that of Pipelined
ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai.scheduler.resource_layout import EPS
from kai.scheduler.snapshot import TaskStatus

_HOLDING = frozenset(
    {TaskStatus.RUNNING, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.ALLOCATED}
)


@dataclass
class SharedDevice:
    id: str
    memory: float  # MiB of the physical device
    used: float = 0.0
    releasing: float = 0.0
    tasks: int = 0
    releasing_tasks: int = 0
    pipelined_tasks: int = 0

    def free_now(self) -> float:
        return min(self.memory - self.used, self.free_future())

    def free_future(self) -> float:
        return self.memory - self.used + self.releasing

    def occupied_portion(self) -> float:
        """Share of the device taken once releasing tasks have left (gpupack / gpuspread)."""
        return (self.memory - self.free_future()) / self.memory if self.memory > 0 else 1.0

    def whole_status(self) -> TaskStatus | None:
        """How the device's whole GPU is accounted on its node (None: the device is gone)."""
        if self.tasks == 0:
            return None
        if self.releasing_tasks == self.tasks:
            return TaskStatus.RELEASING
        if self.pipelined_tasks == self.tasks:
            return TaskStatus.PIPELINED
        return TaskStatus.RUNNING

    def offerable(self) -> bool:
        """KAI never offers a device all of whose tasks are leaving: its GPU counts as a
        releasing whole GPU instead."""
        return self.whole_status() is not TaskStatus.RELEASING

    def charge(self, memory: float, status: TaskStatus, sign: int) -> None:
        self.tasks += sign
        if status in _HOLDING:
            self.used += sign * memory
        elif status is TaskStatus.RELEASING:
            self.used += sign * memory
            self.releasing += sign * memory
            self.releasing_tasks += sign
        elif status is TaskStatus.PIPELINED:
            self.releasing -= sign * memory
            self.pipelined_tasks += sign


@dataclass(frozen=True)
class DeviceChoice:
    """One device chosen for a shared task: an existing id, or None for a device to open."""

    device_id: str | None
    fits_now: bool


def new_device_id(node: str, taken: set[str]) -> str:
    """``<node>/<n>`` with the smallest n >= 0 not used by a device of the node."""
    n = 0
    while f"{node}/{n}" in taken:
        n += 1
    return f"{node}/{n}"


def choose_devices(
    devices: list[SharedDevice],
    memory: float,
    count: int,
    whole_slots_now: int,
    whole_slots_future: int,
    policy: str,
) -> list[DeviceChoice] | None:
    """Pick ``count`` devices for a request of ``memory`` MiB each, or None when they do not exist.

    Candidates are the offerable existing devices with enough memory after releases plus one new
    device per whole GPU that is idle (fits now) or releasing (pipelined). ``policy`` orders
    them: ``pack`` most-occupied first (a new device scores 0), ``spread`` least-occupied first (a
    new device scores 1), ``none`` existing devices before new ones. Ties keep device id order,
    existing devices before new ones.
    """
    scored: list[tuple[float, int, DeviceChoice]] = []
    for position, device in enumerate(devices):
        if not device.offerable() or device.free_future() + EPS < memory:
            continue
        portion = device.occupied_portion()
        score = portion if policy == "pack" else (1.0 - portion if policy == "spread" else 0.0)
        scored.append(
            (-score, position, DeviceChoice(device.id, device.free_now() + EPS >= memory))
        )
    new_score = 0.0 if policy == "pack" else (1.0 if policy == "spread" else -1.0)
    base = len(devices)
    for slot in range(min(max(whole_slots_future, 0), count)):
        scored.append((-new_score, base + slot, DeviceChoice(None, slot < whole_slots_now)))
    if len(scored) < count:
        return None
    scored.sort(key=lambda item: (item[0], item[1]))
    return [choice for _, _, choice in scored[:count]]
