"""Scheduler actions, one module per verb, registered by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kai.scheduler.actions import allocate as allocate_action
from kai.scheduler.actions import consolidation as consolidation_action
from kai.scheduler.actions import preempt as preempt_action
from kai.scheduler.actions import reclaim as reclaim_action
from kai.scheduler.actions import stale_gang as stale_gang_action

if TYPE_CHECKING:
    from kai.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    "allocate": allocate_action.allocate,
    "consolidation": consolidation_action.consolidation,
    "reclaim": reclaim_action.reclaim,
    "preempt": preempt_action.preempt,
    "stalegangeviction": stale_gang_action.stale_gang_eviction,
}
