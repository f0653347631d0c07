"""Scheduler actions, one module per verb, registered by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kai.scheduler.actions import allocate as allocate_action

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    "allocate": allocate_action.allocate,
}
