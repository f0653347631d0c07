"""Errors raised by the scheduler core."""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class of the core's errors."""


class UnsupportedActionError(SchedulerError):
    """An action name that this build of the core does not implement (yet).

    Raised by :func:`kai.scheduler.session.run_session` before anything runs, so a caller never
    gets a half-run session. ``kai simulate`` maps it to exit status 2.
    """

    def __init__(self, action: str) -> None:
        self.action = action
        super().__init__(
            f"action {action!r} is not implemented by this scheduler core "
            f"(implemented: {', '.join(IMPLEMENTED_ACTIONS)})"
        )


class SnapshotError(SchedulerError):
    """The snapshot contradicts itself (e.g. a placed task on an unknown node)."""


#: the actions the core runs, in KAI's default order (a full cycle); kept here so the error
#: message needs no import of the actions
IMPLEMENTED_ACTIONS: tuple[str, ...] = (
    "allocate",
    "consolidation",
    "reclaim",
    "preempt",
    "stalegangeviction",
)
