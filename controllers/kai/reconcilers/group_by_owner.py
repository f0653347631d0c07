"""A pod's PodGroup found from its owner, without the ``pod-group-name`` annotation.

KAI's pod-grouper annotates every pod with ``pod-group-name``: one PATCH per pod, sent while the
pod waits to be scheduled, and re-sent by the API server to every pod watcher. Where the group
follows from the pod itself that write is not needed:

- a pod grouped alone (a bare pod, a Deployment's replica): its PodGroup is
  ``pg-<pod name>-<pod uid>``, owned by the pod;
- a pod whose controller is its top owner and whose kind always makes one PodGroup for all its
  pods (a batch/v1 Job, a ReplicaSet or StatefulSet without a Deployment above it): the
  PodGroup is ``pg-<controller name>-<controller uid>``, owned by the controller.

The pod-grouper marks such PodGroups with ``kai.scheduler/pods-by-owner: "true"`` and then
leaves their pods unannotated; the scheduler resolves an unannotated pod to the marked PodGroup
of the pod itself or of its controller (:func:`derived_group`), and writes the annotation in
the Binding, which the API server copies onto the pod: a bound pod carries it as before. Only a
marked PodGroup is ever derived, so workloads whose owner holds several PodGroups (Argo fan-out
steps, LeaderWorkerSet groups, Spark applications) and PodGroups made by hand keep the
annotation. The cost: a pending pod shows ``pod-group-name`` only once it is bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: on a PodGroup: every pod owned by the PodGroup's owner (or that is its owner) belongs to it
BY_OWNER_ANNOTATION = "kai.scheduler/pods-by-owner"

#: (API group, kind) of controllers whose pods always share one PodGroup (the default plan)
ONE_GROUP_KINDS = frozenset({("batch", "Job"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")})


def owner_podgroup_name(name: str, uid: str) -> str:
    """The pod-grouper's default PodGroup name for an owner (``pg-<name>-<uid>``)."""
    return f"pg-{name}-{uid}"[:253]


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller")), None)


def candidates(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(PodGroup name, owner uid) the pod may belong to without an annotation: its own group
    first, then its controller's."""
    md = pod.get("metadata") or {}
    out = []
    if md.get("name") and md.get("uid"):
        out.append((owner_podgroup_name(str(md["name"]), str(md["uid"])), str(md["uid"])))
    ref = controller_of(pod)
    if ref is not None and ref.get("name") and ref.get("uid"):
        out.append((owner_podgroup_name(str(ref["name"]), str(ref["uid"])), str(ref["uid"])))
    return out


def marked_for(pg: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether ``pg`` carries the pods-by-owner mark and is owned by ``owner_uid``."""
    md = pg.get("metadata") or {}
    if (md.get("annotations") or {}).get(BY_OWNER_ANNOTATION) != "true":
        return False
    refs = md.get("ownerReferences") or ()
    return any(isinstance(r, Mapping) and str(r.get("uid")) == owner_uid for r in refs)


def derived_group(
    pod: Mapping[str, Any], podgroup: Callable[[str], Mapping[str, Any] | None]
) -> str | None:
    """The name of the marked PodGroup of an unannotated pod (``podgroup(name)`` finds a
    PodGroup of the pod's namespace), or None: the pod waits for the pod-grouper."""
    for name, uid in candidates(pod):
        pg = podgroup(name)
        if pg is not None and marked_for(pg, uid):
            return name
    return None


def group_of(
    pod: Mapping[str, Any], podgroup: Callable[[str], Mapping[str, Any] | None]
) -> str | None:
    """The pod's PodGroup name: its ``pod-group-name`` annotation, else derived."""
    annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get("pod-group-name")
    if annotated:
        return str(annotated)
    return derived_group(pod, podgroup)


def podgroup_lookup(
    namespace: str, parsed: Mapping[tuple[str, str], Any]
) -> Callable[[str], Mapping[str, Any] | None]:
    """``podgroup(name)`` over the snapshot builder's parsed PodGroups ((namespace, name) ->
    (JobSpec, PodGroup))."""

    def podgroup(name: str) -> Mapping[str, Any] | None:
        hit = parsed.get((namespace, name))
        return hit[1] if hit is not None else None

    return podgroup
