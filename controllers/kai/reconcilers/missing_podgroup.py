"""Pods whose ``pod-group-name`` annotation names a PodGroup that does not exist.

Such a pod is not a task of any job, so no scheduling cycle reasons about it: without this
module it waits with no condition and no Event. The pod-grouper writes a PodGroup before it
annotates a pod, so a missing PodGroup is normally only the scheduler's informers catching up;
a pod whose PodGroup is still missing after :data:`GRACE_SECONDS` (a user-managed PodGroup
never created, or deleted, or a typo in the annotation) gets, once per PodGroup name:

- a ``Warning`` Event with reason :data:`REASON` naming the missing PodGroup;
- the condition ``PodScheduled=False`` with the same reason and message (what
  ``kubectl describe pod`` and ``kai explain`` show).

It is scheduled as usual as soon as the PodGroup exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kai.reconcilers.snapshot_builder import POD_GROUP_ANNOTATION

REASON = "PodGroupNotFound"
GRACE_SECONDS = 3.0


def named_podgroup(pod: dict[str, Any]) -> str | None:
    """The PodGroup the pod's annotation names (None: no annotation)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(POD_GROUP_ANNOTATION)
    return str(name) if name else None


def message(namespace: str, podgroup: str) -> str:
    return (
        f'PodGroup "{podgroup}" named by the pod\'s {POD_GROUP_ANNOTATION} annotation does not '
        f'exist in namespace "{namespace}": the pod is not scheduled until it does'
    )


def missing(
    pods: Iterable[dict[str, Any]], exists: Callable[[str, str], bool]
) -> list[tuple[dict[str, Any], str]]:
    """The pods (of those waiting without a PodGroup) whose named PodGroup does not exist, with
    that name."""
    out = []
    for pod in pods:
        name = named_podgroup(pod)
        ns = str((pod.get("metadata") or {}).get("namespace") or "")
        if name is not None and not exists(ns, name):
            out.append((pod, name))
    return out


class MissingPodGroups:
    """Which pods to report, once each, after the grace period."""

    def __init__(self, grace: float = GRACE_SECONDS) -> None:
        self.grace = grace
        self._since: dict[str, tuple[str, float]] = {}  # pod uid -> (PodGroup, first seen)
        self._reported: dict[str, str] = {}  # pod uid -> PodGroup reported

    def due(
        self, found: list[tuple[dict[str, Any], str]], now: float
    ) -> tuple[list[tuple[dict[str, Any], str]], float | None]:
        """Of ``found`` (this cycle's pods with a missing PodGroup), those to report now, and
        when the next one becomes due (None: none is waiting)."""
        current: dict[str, tuple[str, float]] = {}
        ready: list[tuple[dict[str, Any], str]] = []
        wake: float | None = None
        for pod, name in found:
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            seen = self._since.get(uid)
            since = seen[1] if seen is not None and seen[0] == name else now
            current[uid] = (name, since)
            if self._reported.get(uid) == name:
                continue
            if now - since >= self.grace:
                ready.append((pod, name))
                self._reported[uid] = name
            else:
                at = since + self.grace
                wake = at if wake is None else min(wake, at)
        self._since = current
        # a pod whose PodGroup appeared (or that is gone) may be reported again later
        self._reported = {u: n for u, n in self._reported.items() if u in current}
        return ready, wake
