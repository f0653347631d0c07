"""Host ports (Kubernetes NodePorts): a task may not go to a node where a placed task already
uses one of its ``(protocol, hostPort)`` pairs on an overlapping address (an empty or
``0.0.0.0`` hostIP overlaps every address)."""

from __future__ import annotations

import numpy as np

from kai.scheduler.resource_layout import BoolArray
from kai.scheduler.snapshot import TaskSpec

Port = tuple[str, str, int]  # (protocol, hostIP, hostPort)
_ANY = ("", "0.0.0.0", "::")


def conflicts(a: Port, b: Port) -> bool:
    return a[0] == b[0] and a[2] == b[2] and (a[1] in _ANY or b[1] in _ANY or a[1] == b[1])


class HostPorts:
    """The host ports in use per node, kept up to date by the session on placement changes."""

    def __init__(self) -> None:
        self._by_node: dict[int, dict[str, tuple[Port, ...]]] = {}

    def move(self, spec: TaskSpec, old_node: int, new_node: int) -> None:
        if old_node >= 0:
            self._by_node.get(old_node, {}).pop(spec.uid, None)
        if new_node >= 0:
            self._by_node.setdefault(new_node, {})[spec.uid] = spec.host_ports

    def free_mask(self, spec: TaskSpec, size: int) -> BoolArray:
        """The nodes where none of ``spec``'s host ports is taken."""
        mask = np.ones(size, dtype=bool)
        for node, used in self._by_node.items():
            if any(
                conflicts(mine, theirs)
                for ports in used.values()
                for theirs in ports
                for mine in spec.host_ports
            ):
                mask[node] = False
        return mask
