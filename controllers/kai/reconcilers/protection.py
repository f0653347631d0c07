"""In-use protection of Queues and QueueTrees by finalizer, the part of ``kai controller`` that
lets a delete be accepted in any order.

Every Queue (written by hand or compiled) and every QueueTree carries
:data:`kai.api.protection.FINALIZER`, added by the controller on every reconcile (idempotent:
only when missing, with the object's resourceVersion as precondition). A delete is accepted by
the API server and the webhook alike; the object then stays Terminating until the controller
removes the finalizer:

- a **Queue**, once no Queue names it as ``parentQueue`` and no workload uses it (a PodGroup
  with ``spec.queue`` naming it and a pod that has not ended, or a pod labelled for it that has
  not ended): the holders the pruning of a queue already waits on;
- a **QueueTree**, once none of the Queues compiled from it exists any more (the controller
  deletes them as soon as the tree is Terminating: they then wait on their own finalizers).

While something holds it, the object carries the condition ``InUse=True`` (reason
``ChildQueues``, ``Workloads``, ``ChildQueuesAndWorkloads``, ``Queues`` for a tree, or
``WorkloadsUnknown`` when the workloads could not be listed; the message names up to
:data:`MAX_HOLDERS` holders) and a Normal Event ``InUse`` with the same message is recorded
each time the list of holders changes.

Only the controller adds the finalizer, never the mutating webhook: the component that removes
it is the one that adds it, so a cluster without the controller never gets objects that wait
for it. The state is all in the objects (finalizer, deletionTimestamp, the holders themselves):
a controller restarted at any point carries on where the last one stopped.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kai.api.protection import FINALIZER, IN_USE
from kai.gitops.cluster_plan import owner_documents
from kai.kube.client import ApiError, Kube, KubeError, Resource
from kai.kube.events import EventRecorder
from kai.kube.resources import QUEUES

log = logging.getLogger("kai.controller")

__all__ = ["MAX_HOLDERS", "Protector", "deleting", "protected"]

MAX_HOLDERS = 5
CHILD_QUEUE = "child queue "
UNLISTED = "workloads could not be listed"


def deleting(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def protected(obj: dict[str, Any]) -> bool:
    return FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or [])


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def listing(holders: list[str]) -> str:
    """Up to MAX_HOLDERS holders, then how many more."""
    shown = ", ".join(holders[:MAX_HOLDERS])
    more = len(holders) - MAX_HOLDERS
    return shown + (f" and {more} more" if more > 0 else "")


def queue_reason(holders: list[str]) -> str:
    if any(h.startswith(UNLISTED) for h in holders):
        return "WorkloadsUnknown"
    children = any(h.startswith(CHILD_QUEUE) for h in holders)
    workloads = any(not h.startswith(CHILD_QUEUE) for h in holders)
    if children and workloads:
        return "ChildQueuesAndWorkloads"
    return "ChildQueues" if children else "Workloads"


@dataclass
class Round:
    """What one pass found: queue name -> holders of a Terminating Queue, tree -> its queues."""

    queues: dict[str, list[str]] = field(default_factory=dict)
    trees: dict[str, list[str]] = field(default_factory=dict)
    conflicts: int = 0  # writes refused for a stale resourceVersion: try again soon

    @property
    def waiting(self) -> bool:
        return bool(self.queues or self.trees or self.conflicts)


class Protector:
    """Adds and removes the finalizer, and reports what holds a Terminating object.

    ``holders(name)``: what holds the queue ``name`` (child queues and workloads), the same
    answer the pruning of a queue waits on.
    """

    def __init__(
        self,
        kube: Kube,
        recorder: EventRecorder,
        holders: Callable[[str], list[str]],
        tree_resource: Resource,
    ) -> None:
        self.kube = kube
        self.recorder = recorder
        self.holders = holders
        self.tree_resource = tree_resource

    def reconcile(self, queues: Iterable[dict[str, Any]], trees: Iterable[dict[str, Any]]) -> Round:
        queues, trees = list(queues), list(trees)
        found = Round()
        for queue in queues:
            name = queue["metadata"]["name"]
            if not deleting(queue):
                if not protected(queue):
                    found.conflicts += not self._finalizer(QUEUES, queue, add=True)
                continue
            if not protected(queue):
                continue  # someone else's finalizer keeps it: nothing of ours to release
            holders = self.holders(name)
            if holders:
                found.queues[name] = holders
                self._report_queue(queue, holders)
            elif self._finalizer(QUEUES, queue, add=False):
                log.info("queue %s: nothing holds it any more, released", name)
            else:
                found.conflicts += 1
        for tree in trees:
            name = tree["metadata"]["name"]
            if not deleting(tree):
                if not protected(tree):
                    found.conflicts += not self._finalizer(self.tree_resource, tree, add=True)
                continue
            if not protected(tree):
                continue
            key = f"QueueTree/{name}"
            remaining = sorted(
                q["metadata"]["name"] for q in queues if key in (owner_documents(q) or [])
            )
            if remaining:
                found.trees[name] = remaining
                self._report_tree(tree, remaining, found.queues)
            elif self._finalizer(self.tree_resource, tree, add=False):
                log.info("QueueTree %s: its queues are gone, released", name)
            else:
                found.conflicts += 1
        return found

    # -- writes ----------------------------------------------------------------------------
    def _finalizer(self, res: Resource, obj: dict[str, Any], *, add: bool) -> bool:
        """Add or remove ours, keeping the others; the resourceVersion read is a precondition
        (a merge patch replaces the whole list). False: refused for a stale read, retry."""
        md = obj["metadata"]
        current = [f for f in md.get("finalizers") or [] if f != FINALIZER]
        wanted = [*current, FINALIZER] if add else current
        patch = {
            "metadata": {"finalizers": wanted or None, "resourceVersion": md["resourceVersion"]}
        }
        try:
            self.kube.patch(res, md["name"], patch)
        except ApiError as exc:
            if exc.status == 404:
                return True  # gone: nothing to protect or release
            if exc.status == 409:
                return False
            log.warning("finalizer of %s %s: %s", obj.get("kind"), md["name"], exc)
            return False
        except KubeError as exc:
            log.warning("finalizer of %s %s: %s", obj.get("kind"), md["name"], exc)
            return False
        log.debug(
            "%s finalizer of %s %s", "added" if add else "removed", obj.get("kind"), md["name"]
        )
        return True

    def _report_queue(self, queue: dict[str, Any], holders: list[str]) -> None:
        message = f"being deleted; waits until nothing uses it: held by {listing(holders)}"
        self._report(QUEUES, queue, queue_reason(holders), message, kai_condition=True)

    def _report_tree(
        self, tree: dict[str, Any], remaining: list[str], held: dict[str, list[str]]
    ) -> None:
        parts = [
            f"queue {name}" + (f" (held by {listing(held[name])})" if name in held else "")
            for name in remaining
        ]
        message = f"being deleted; waits until its queues are gone: {listing(parts)}"
        self._report(self.tree_resource, tree, "Queues", message, kai_condition=False)

    def _report(
        self,
        res: Resource,
        obj: dict[str, Any],
        reason: str,
        message: str,
        *,
        kai_condition: bool,
    ) -> None:
        md = obj["metadata"]
        status = obj.get("status") or {}
        conditions = [dict(c) for c in status.get("conditions") or []]
        old = next((c for c in conditions if c.get("type") == IN_USE), None)
        if old is not None and (old.get("reason"), old.get("message")) == (reason, message):
            return
        since = old.get("lastTransitionTime") if old and old.get("status") == "True" else None
        condition: dict[str, Any] = {
            "type": IN_USE,
            "status": "True",
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": since or _now(),
        }
        generation = md.get("generation")
        if not kai_condition and generation is not None:
            condition["observedGeneration"] = generation
        out = [c for c in conditions if c.get("type") != IN_USE]
        if not kai_condition:  # a document's Ready condition says why it is not ready
            for c in out:
                if c.get("type") == "Ready":
                    if c.get("status") != "False" or not c.get("lastTransitionTime"):
                        c["lastTransitionTime"] = _now()
                    c.update(status="False", reason=IN_USE, message=condition["message"])
                    if generation is not None:
                        c["observedGeneration"] = generation
        out.append(condition)
        patch: dict[str, Any] = {"status": {"conditions": out}}
        if not kai_condition and generation is not None:
            patch["status"]["observedGeneration"] = generation
        try:
            self.kube.patch(res, md["name"], patch, sub="status")
        except ApiError as exc:
            if exc.status != 404:
                log.warning("status of %s %s: %s", obj.get("kind"), md["name"], exc)
            return
        except KubeError as exc:
            log.warning("status of %s %s: %s", obj.get("kind"), md["name"], exc)
            return
        self.recorder.event(obj, "Normal", IN_USE, f"{obj.get('kind')} {md['name']} {message}")
