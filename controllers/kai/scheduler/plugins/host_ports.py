"""Host ports as a task filter: its mask depends on where tasks with host ports are placed
(see :mod:`kai.scheduler.host_ports`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai.scheduler.framework import FilterMasks, TaskFilter
from kai.scheduler.predicates import HOST_PORTS

if TYPE_CHECKING:
    from kai.scheduler.jobs import TaskInfo
    from kai.scheduler.session import Session


def _active(session: Session) -> bool:
    return session.uses_host_ports


def _masks(session: Session, task: TaskInfo) -> FilterMasks:
    if not task.spec.host_ports:
        return ()
    return ((HOST_PORTS, session.host_ports.free_mask(task.spec, len(session.nodes))),)


HOST_PORTS_FILTER = TaskFilter("host-ports", (HOST_PORTS,), _active, _masks)
