"""``kai controller``: the GitOps documents in the cluster, turned into what the scheduler reads.

Level-based: every change of a document, of a produced object or of a workload that holds a
queue back from pruning queues one key; a worker computes the whole plan from the informer
caches (:func:`kai.gitops.cluster_plan.plan`, the code of ``kai validate`` / ``kai render``) and
makes the cluster match it. Failures come back after a rate-limited back-off; every
``resync`` seconds the key is queued anyway. Only the holder of the Lease writes.

- Writes are server-side apply under the field manager ``kai-controller`` (``force``: the
  controller owns its objects' fields), sent only when the object differs.
- Deletes happen only once every informer has finished its first full list, only for objects
  of the controller (label and source annotation), with the UID and resourceVersion read as
  preconditions, so a Queue changed or re-created meanwhile is not deleted.
- A Queue that still has child Queues, PodGroups with a live pod, or live pods labelled for it
  is kept, and its document reports ``PruneBlocked`` naming what holds it. A Queue whose
  documents are all deleted (or Terminating) is deleted at once: its finalizer holds it.
- In-use protection (:mod:`kai.reconcilers.protection`): every Queue and QueueTree carries the
  finalizer ``kai.scheduler/queue-in-use-protection``; a Terminating one is released when
  nothing holds it, and reports ``InUse`` meanwhile. A Terminating document counts as deleted.
- Status on every document (status subresource): ``observedGeneration``, conditions
  ``Ready`` / ``Applied`` / ``Invalid`` / ``PruneBlocked`` and the objects produced; Events for
  every create, update, prune and refusal.

Killing the process at any point is safe: everything it does is recomputed from the cluster.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kai.api.protection import FINALIZER
from kai.gitops.cluster_plan import DocumentOutcome, Plan, document_key, owner_documents, plan
from kai.kube.client import ApiError, Kube, KubeError, Resource
from kai.kube.events import EventRecorder
from kai.kube.informer import Informer, InformerSet
from kai.kube.resources import CONFIGMAPS, PODGROUPS, PODS, QUEUES, TOPOLOGIES
from kai.kube.workqueue import WorkQueue
from kai.kube.writes import with_retries
from kai.metrics import Registry
from kai.reconcilers.group_by_owner import group_of
from kai.reconcilers.protection import Protector, deleting

log = logging.getLogger("kai.controller")

FIELD_MANAGER = "kai-controller"
APPLY_PATCH = "application/apply-patch+yaml"
KEY = "cluster"
GITOPS = "gitops.kai.scheduler"
DOCUMENTS = {
    "QueueTree": Resource(GITOPS, "v1alpha1", "queuetrees", False, "QueueTree"),
    "TopologyPolicy": Resource(GITOPS, "v1alpha1", "topologypolicies", False, "TopologyPolicy"),
    "SharingPolicy": Resource(GITOPS, "v1alpha1", "sharingpolicies", False, "SharingPolicy"),
    "SchedulerPolicy": Resource(GITOPS, "v1alpha1", "schedulerpolicies", False, "SchedulerPolicy"),
}
PRODUCED = {"Queue": QUEUES, "Topology": TOPOLOGIES, "ConfigMap": CONFIGMAPS}
QUEUE_LABEL = "kai.scheduler/queue"
POD_GROUP_ANNOTATION = "pod-group-name"
TERMINAL = ("Succeeded", "Failed")
MAX_HOLDERS = 5


@dataclass
class ControllerOptions:
    namespace: str = "kai-scheduler"  # the scheduler ConfigMap lives here
    resync: float = 30.0
    blocked_recheck: float = 2.0
    workers: int = 1  # one key: the plan is global


def make_informers(kube: Kube, namespace: str) -> InformerSet:
    informers = InformerSet(kube)
    for kind, resource in DOCUMENTS.items():
        informers.add(kind, resource)
    informers.add("Queue", QUEUES)
    informers.add("Topology", TOPOLOGIES)
    informers.add(
        "ConfigMap",
        CONFIGMAPS,
        namespace=namespace,  # a Role in that namespace is enough to read it
        field_selector="metadata.name=kai-scheduler-config",
    )
    informers.add("PodGroup", PODGROUPS)
    return informers


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meaningful_change(etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Status-only updates of produced objects (the scheduler writes Queue status every few
    seconds) change nothing the controller decides."""
    if etype != "MODIFIED" or old is None:
        return True
    md, omd = obj.get("metadata") or {}, old.get("metadata") or {}
    return (
        obj.get("spec") != old.get("spec")
        or obj.get("data") != old.get("data")
        or md.get("labels") != omd.get("labels")
        or md.get("annotations") != omd.get("annotations")
        or md.get("generation") != omd.get("generation")
        or md.get("deletionTimestamp") != omd.get("deletionTimestamp")
        or md.get("finalizers") != omd.get("finalizers")
    )


def _differs(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    if current is None:
        return True
    md, dmd = current.get("metadata") or {}, desired["metadata"]
    for part in ("labels", "annotations"):
        have, want = md.get(part) or {}, dmd.get(part) or {}
        if any(have.get(k) != v for k, v in want.items()):
            return True
        ours = [k for k in have if k.startswith("gitops.kai.scheduler/")]
        if any(k not in want for k in ours):
            return True
    return any(current.get(part) != desired.get(part) for part in ("spec", "data"))


class GitOpsController:
    def __init__(
        self,
        kube: Kube,
        informers: InformerSet,
        recorder: EventRecorder,
        options: ControllerOptions | None = None,
        *,
        is_leader: Callable[[], bool] | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.kube = kube
        self.informers = informers
        self.recorder = recorder
        self.options = options or ControllerOptions()
        self.is_leader = is_leader or (lambda: True)
        self.queue = WorkQueue("controller", self._process, workers=1, base=0.2, cap=30.0)
        self.blocked: dict[str, list[str]] = {}  # queue name -> what holds it
        self.held: dict[str, list[str]] = {}  # Terminating queue -> what holds it
        self.protector = Protector(kube, recorder, self._queue_holders, DOCUMENTS["QueueTree"])
        self.last_plan: Plan | None = None
        self.registry = registry or Registry()
        self.m_reconciles = self.registry.counter(
            "kai_controller_reconciles_total", "Reconciles by result", ("result",)
        )
        self.m_writes = self.registry.counter(
            "kai_controller_writes_total", "Objects created, updated or pruned", ("verb", "kind")
        )
        self.m_documents = self.registry.gauge(
            "kai_controller_documents", "GitOps documents by state", ("state",)
        )
        self.m_blocked = self.registry.gauge(
            "kai_controller_prune_blocked_queues", "Queues kept because something holds them"
        )
        self.m_held = self.registry.gauge(
            "kai_controller_deletions_held",
            "Terminating objects kept by the in-use finalizer because something holds them",
            ("kind",),
        )
        self._stop = threading.Event()
        self._resync: threading.Thread | None = None
        for kind in (*DOCUMENTS, "Queue", "Topology", "ConfigMap"):
            informers[kind].add_handler(self._on_change)
        informers["PodGroup"].add_handler(self._on_podgroup)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> GitOpsController:
        self.queue.start()
        self.queue.add(KEY)
        self._resync = threading.Thread(target=self._resync_loop, name="controller-resync")
        self._resync.daemon = True
        self._resync.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.queue.stop()
        if self._resync is not None:
            self._resync.join(timeout=5)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.options.resync):
            self.queue.add(KEY)

    def _on_change(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if _meaningful_change(etype, obj, old):
            self.queue.add(KEY)

    def _on_podgroup(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        queue = (obj.get("spec") or {}).get("queue")
        if queue in self.blocked or queue in self.held:
            self.queue.add(KEY)

    def synced(self) -> bool:
        """Every informer finished its first full list: only then may anything be deleted."""
        return all(inf.synced.is_set() for inf in self.informers.informers.values())

    # -- one reconcile ---------------------------------------------------------------------
    def _process(self, key: object) -> bool:
        if not self.is_leader() or not self.synced():
            self.queue.add_after(KEY, 1.0)
            return True
        inf = self.informers
        # a Terminating document counts as deleted: what it produced is pruned
        documents = [d for kind in DOCUMENTS for d in inf[kind].items() if not deleting(d)]
        configmap = inf["ConfigMap"].get("kai-scheduler-config", self.options.namespace)
        result = plan(
            documents,
            inf["Queue"].items(),
            inf["Topology"].items(),
            configmap,
            configmap_namespace=self.options.namespace,
        )
        self.last_plan = result
        log.debug(
            "plan: %d to apply, %d to prune; set aside: %s",
            len(result.apply),
            len(result.prune),
            {k: o.state for k, o in result.outcomes.items() if o.state != "applied"} or "none",
        )
        failures: dict[str, str] = {}
        for obj in result.apply:
            try:
                self._apply(obj, result.outcomes)
            except KubeError as exc:
                log.warning("apply %s %s: %s", obj["kind"], obj["metadata"]["name"], exc)
                for owner in owner_documents(obj) or []:
                    failures[owner] = f"{obj['kind']} {obj['metadata']['name']}: {exc}"
        blocked = self._prune(result.prune, result.outcomes)
        self.blocked = blocked
        self._write_status(documents, result, failures)
        protection = self.protector.reconcile(inf["Queue"].items(), inf["QueueTree"].items())
        self.held = protection.queues
        self.m_held.replace(
            {
                ("Queue",): float(len(protection.queues)),
                ("QueueTree",): float(len(protection.trees)),
            }
        )
        self.m_reconciles.inc(labels={"result": "error" if failures else "ok"})
        states = [o.state for o in result.outcomes.values()]
        self.m_documents.replace(
            {(s,): float(states.count(s)) for s in ("applied", "invalid", "refused")}
        )
        self.m_blocked.set(len(blocked))
        if blocked or protection.waiting:
            self.queue.add_after(KEY, self.options.blocked_recheck)
        return not failures

    def _document(self, key: str) -> dict[str, Any] | None:
        kind, _, name = key.partition("/")
        return self.informers[kind].get(name) if kind in DOCUMENTS else None

    def _event(self, owners: list[str], etype: str, reason: str, message: str) -> None:
        for owner in owners:
            doc = self._document(owner)
            if doc is not None:
                self.recorder.event(doc, etype, reason, message)

    def _apply(self, obj: dict[str, Any], outcomes: dict[str, DocumentOutcome]) -> None:
        res = PRODUCED[obj["kind"]]
        md = obj["metadata"]
        current = self.informers[obj["kind"]].get(md["name"], md.get("namespace") or "")
        if current is not None and deleting(current):
            return  # it goes once nothing holds it; the next round creates it again
        if not _differs(current, obj):
            return
        if obj["kind"] == "Queue":  # protected from its first moment
            obj = {**obj, "metadata": {**md, "finalizers": [FINALIZER]}}
        with_retries(
            lambda: self.kube.request(
                "PATCH",
                res.path(md.get("namespace"), md["name"]),
                params={"fieldManager": FIELD_MANAGER, "force": True},
                body=obj,
                content_type=APPLY_PATCH,
            ),
            what=f"apply {obj['kind']} {md['name']}",
        )
        verb = "Created" if current is None else "Updated"
        self.m_writes.inc(labels={"verb": verb.lower(), "kind": obj["kind"]})
        where = f"{md['namespace']}/{md['name']}" if md.get("namespace") else md["name"]
        log.info("%s %s %s", verb.lower(), obj["kind"], where)
        self._event(owner_documents(obj) or [], "Normal", verb, f"{verb} {obj['kind']} {where}")

    # -- pruning ---------------------------------------------------------------------------
    def _prune(
        self, objects: list[dict[str, Any]], outcomes: dict[str, DocumentOutcome]
    ) -> dict[str, list[str]]:
        blocked: dict[str, list[str]] = {}
        for obj in objects:
            md = obj["metadata"]
            if deleting(obj):
                continue  # deleted already: its finalizer decides when it goes
            if obj["kind"] == "Queue" and self._has_live_owner(obj):
                holders = self._queue_holders(md["name"])
                if holders:
                    blocked[md["name"]] = holders
                    continue
            try:
                self._delete(obj)
            except ApiError as exc:
                if exc.status in (404, 409):  # gone already, or changed since read: next round
                    continue
                log.warning("prune %s %s: %s", obj["kind"], md["name"], exc)
                continue
            except KubeError as exc:
                log.warning("prune %s %s: %s", obj["kind"], md["name"], exc)
                continue
            log.info("pruned %s %s", obj["kind"], md["name"])
            self.m_writes.inc(labels={"verb": "pruned", "kind": obj["kind"]})
            self._event(
                owner_documents(obj) or [], "Normal", "Pruned", f"Pruned {obj['kind']} {md['name']}"
            )
        return blocked

    def _has_live_owner(self, obj: dict[str, Any]) -> bool:
        """A document of the object still exists and is not Terminating: the object is kept
        (not deleted) while it is in use, so the document can take it back at once. Without
        such a document it is deleted and waits on its finalizer."""
        for key in owner_documents(obj) or []:
            doc = self._document(key)
            if doc is not None and not deleting(doc):
                return True
        return False

    def _delete(self, obj: dict[str, Any]) -> None:
        res = PRODUCED[obj["kind"]]
        md = obj["metadata"]
        pre = {"uid": md["uid"], "resourceVersion": md["resourceVersion"]}
        with_retries(
            lambda: self.kube.delete(res, md["name"], md.get("namespace"), preconditions=pre),
            what=f"prune {obj['kind']} {md['name']}",
        )

    def _queue_holders(self, name: str) -> list[str]:
        holders = [
            f"child queue {q['metadata']['name']}"
            for q in self.informers["Queue"].items()
            if (q.get("spec") or {}).get("parentQueue") == name
        ]
        groups = [
            pg
            for pg in self.informers["PodGroup"].items()
            if (pg.get("spec") or {}).get("queue") == name
        ]
        live: dict[str, list[dict[str, Any]]] = {}
        try:
            for namespace in sorted({pg["metadata"]["namespace"] for pg in groups}):
                pods = self.kube.list(PODS, namespace).get("items") or []
                live[namespace] = [
                    p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL
                ]
            labelled = self.kube.list(PODS, label_selector=f"{QUEUE_LABEL}={name}").get("items")
        except KubeError as exc:
            return [f"workloads could not be listed ({exc})"]
        for pg in sorted(groups, key=lambda g: (g["metadata"]["namespace"], g["metadata"]["name"])):
            md = pg["metadata"]
            members = [
                p for p in live.get(md["namespace"], []) if group_of(p, _only(pg)) == md["name"]
            ]
            if members:
                holders.append(
                    f"PodGroup {md['namespace']}/{md['name']} ({len(members)} live pods)"
                )
        for pod in labelled or []:
            if (pod.get("status") or {}).get("phase") not in TERMINAL:
                holders.append(f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']}")
        return holders

    # -- status ----------------------------------------------------------------------------
    def _write_status(
        self, documents: list[dict[str, Any]], result: Plan, failures: dict[str, str]
    ) -> None:
        owned_blocked: dict[str, list[str]] = {}
        for obj in result.prune:
            if obj["kind"] == "Queue" and obj["metadata"]["name"] in self.blocked:
                for owner in owner_documents(obj) or []:
                    name = obj["metadata"]["name"]
                    owned_blocked.setdefault(owner, []).append(
                        f"queue {name} is kept: held by "
                        + ", ".join(self.blocked[name][:MAX_HOLDERS])
                    )
        for doc in documents:
            key = document_key(doc)
            outcome = result.outcomes.get(key)
            if outcome is None:
                continue
            status = self._status(doc, outcome, failures.get(key), owned_blocked.get(key, []))
            self._patch_status(doc, status)

    def _status(
        self,
        doc: dict[str, Any],
        outcome: DocumentOutcome,
        failure: str | None,
        blocked: list[str],
    ) -> dict[str, Any]:
        errors = outcome.errors
        conditions: list[tuple[str, bool, str, str]] = []
        if errors:
            first = errors[0]
            # a condition reason is CamelCase: children-quota-sum -> ChildrenQuotaSum; the
            # message keeps kai validate's rule ids
            reason = "".join(part.capitalize() for part in first.rule.split("-"))
            conditions.append(
                ("Invalid", True, reason, "; ".join(_problem_text(p) for p in errors))
            )
        else:
            conditions.append(("Invalid", False, "Valid", "kai validate finds no error"))
        kept = f"the last good state is kept ({len(outcome.objects)} objects unchanged)"
        if outcome.state == "refused":
            conditions.append(("Applied", False, "Refused", f"{outcome.refusal}; {kept}"))
        elif outcome.state == "invalid":
            conditions.append(("Applied", False, "Invalid", f"not applied: {kept}"))
        elif failure:
            conditions.append(("Applied", False, "ApplyFailed", failure))
        else:
            conditions.append(
                ("Applied", True, "Applied", f"{len(outcome.objects)} objects up to date")
            )
        if blocked:
            conditions.append(("PruneBlocked", True, "PruneBlocked", "; ".join(blocked)))
        else:
            conditions.append(
                ("PruneBlocked", False, "NothingBlocked", "nothing waits to be pruned")
            )
        ready = conditions[1][1] and not errors and not blocked
        if ready:
            reason, message = "Ready", "every object is applied and nothing waits to be pruned"
        else:
            failing = [c for c in conditions if c[1] != (c[0] == "Applied")]
            reason, message = failing[0][2], failing[0][3]
        conditions.insert(0, ("Ready", ready, reason, message))
        previous = {c.get("type"): c for c in ((doc.get("status") or {}).get("conditions") or [])}
        generation = (doc.get("metadata") or {}).get("generation")
        out = []
        for ctype, ok, why, message in conditions:
            value = "True" if ok else "False"
            old = previous.get(ctype) or {}
            since = old.get("lastTransitionTime") if old.get("status") == value else None
            out.append(
                {
                    "type": ctype,
                    "status": value,
                    "reason": why,
                    "message": message[:32768],
                    "lastTransitionTime": since or _now(),
                    **({"observedGeneration": generation} if generation is not None else {}),
                }
            )
        self._emit_transitions(doc, outcome, previous, out)
        return {
            "observedGeneration": generation,
            "conditions": out,
            "objects": outcome.objects,
        }

    def _emit_transitions(
        self,
        doc: dict[str, Any],
        outcome: DocumentOutcome,
        previous: dict[str, dict[str, Any]],
        conditions: list[dict[str, Any]],
    ) -> None:
        for cond in conditions:
            old = previous.get(cond["type"]) or {}
            changed = old.get("status") != cond["status"] or old.get("message") != cond["message"]
            if not changed:
                continue
            if cond["type"] == "Invalid" and cond["status"] == "True":
                self.recorder.event(doc, "Warning", "Invalid", cond["message"])
            elif cond["type"] == "Applied" and cond["reason"] == "Refused":
                self.recorder.event(doc, "Warning", "Refused", cond["message"])
            elif cond["type"] == "Applied" and cond["reason"] == "ApplyFailed":
                self.recorder.event(doc, "Warning", "ApplyFailed", cond["message"])
            elif cond["type"] == "PruneBlocked" and cond["status"] == "True":
                self.recorder.event(doc, "Warning", "PruneBlocked", cond["message"])

    def _patch_status(self, doc: dict[str, Any], status: dict[str, Any]) -> None:
        current = doc.get("status") or {}
        if _same_status(current, status):
            return
        kind = str(doc.get("kind"))
        name = doc["metadata"]["name"]
        try:
            with_retries(
                lambda: self.kube.patch(DOCUMENTS[kind], name, {"status": status}, sub="status"),
                what=f"status of {kind} {name}",
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("status of %s/%s: %s", kind, name, exc)
        except KubeError as exc:
            log.warning("status of %s/%s: %s", kind, name, exc)


def _problem_text(problem: Any) -> str:
    subject = " ".join(part for part in (problem.object, problem.path) if part)
    return f"[{problem.rule}] {subject + ': ' if subject else ''}{problem.message}"


def _same_status(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    def strip(status: dict[str, Any]) -> Any:
        return (
            status.get("observedGeneration"),
            [
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in status.get("conditions") or []
            ],
            status.get("objects") or [],
        )

    return bool(strip(current) == strip(desired))


def start_controller(
    kube: Kube,
    recorder: EventRecorder,
    options: ControllerOptions,
    *,
    is_leader: Callable[[], bool] | None = None,
    sync_timeout: float = 60.0,
    registry: Registry | None = None,
) -> tuple[GitOpsController, InformerSet]:
    informers = make_informers(kube, options.namespace)
    controller = GitOpsController(
        kube, informers, recorder, options, is_leader=is_leader, registry=registry
    )
    informers.start()
    informers.wait_synced(sync_timeout)
    controller.start()
    return controller, informers


__all__ = [
    "DOCUMENTS",
    "FIELD_MANAGER",
    "ControllerOptions",
    "GitOpsController",
    "Informer",
    "make_informers",
    "start_controller",
]


def _only(pg: dict[str, Any]) -> Callable[[str], dict[str, Any] | None]:
    """A PodGroup lookup that knows only ``pg``."""
    name = pg["metadata"]["name"]
    return lambda wanted: pg if wanted == name else None
