"""What the controller should apply and prune, given the documents and objects in a cluster.

The same code as ``kai validate`` / ``kai render`` (:func:`kai.gitops.validate.validate`,
:func:`kai.gitops.compile.compile_documents`), run over the documents read from the API server
instead of files. Pure: plain dicts in, a :class:`Plan` out; the reconciler does the I/O.

Rules, in order:

1. **Ownership.** An object is the controller's when it carries the label
   ``app.kubernetes.io/managed-by: kai`` and its ``gitops.kai.scheduler/source`` annotation names
   only documents of the kinds the controller reads (``QueueTree/x``, ``TopologyPolicy/x``,
   ``SharingPolicy/x``, ``SchedulerPolicy/x``). Anything else (a Queue written by hand, or a
   ``kai render`` of a raw ``Queue/x``) is never changed or deleted.
2. **Claims.** A queue name wanted by several QueueTrees goes to the tree that owns the Queue
   now (if it still wants it), else to the oldest tree (creationTimestamp, then name). The
   others are *refused*: nothing of theirs changes, so two trees never take a Queue from each
   other in turn. A name held by a hand-made Queue or Topology refuses every claimant, and so
   does a name owned by a document that is itself kept at its last good state.
3. **Validation.** The claiming documents are validated together with every Queue that stays as
   it is (hand-made ones, and those of refused or invalid documents, as raw KAI Queues), so
   parents and quota sums across documents are checked against what the cluster really has.
   A document with an error is *invalid*: it is set aside and everything it produced before is
   kept as it is (last good state); the rest is validated again, until no error is left.
4. **Compile** the remaining documents; the scheduler ConfigMap keeps the data keys of set-aside
   policies, and its ``namespace-queues.yaml`` covers every applied or kept Queue.
5. **Prune** the controller's objects that are no longer wanted, but only those whose source
   documents are all applied or deleted (never one of a set-aside document). Whether a Queue
   is still in use (child Queues, PodGroups, running pods) is decided by the caller, who knows
   the workloads.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from kai.api.namespace_queues import from_queues
from kai.gitops.compile import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    MANAGED_BY,
    SOURCE_ANNOTATION,
    compile_documents,
)
from kai.gitops.loader import Document, LoadResult, load_text
from kai.gitops.problems import Problem
from kai.gitops.validate import validate
from kai.gitops.yaml_out import dump_yaml

__all__ = [
    "DOCUMENT_KINDS",
    "DocumentOutcome",
    "Plan",
    "document_key",
    "object_ref",
    "owner_documents",
    "plan",
]

GROUP_VERSION = "gitops.kai.scheduler/v1alpha1"
DOCUMENT_KINDS = ("QueueTree", "TopologyPolicy", "SharingPolicy", "SchedulerPolicy")
POLICY_DATA_PREFIX = {"SharingPolicy": "sharing-policy.", "SchedulerPolicy": "scheduler-policy."}
NAMESPACE_QUEUES_KEY = "namespace-queues.yaml"
MAX_ROUNDS = 64
KEPT_PREFIX = "cluster:Queue/"

State = Literal["applied", "invalid", "refused"]


@dataclass
class DocumentOutcome:
    """What happened to one document in this plan."""

    key: str  # Kind/name
    state: State = "applied"
    problems: list[Problem] = field(default_factory=list)  # errors and warnings of kai validate
    refusal: str = ""  # why a refused document was refused
    objects: list[dict[str, Any]] = field(default_factory=list)  # produced (applied or kept)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


@dataclass
class Plan:
    apply: list[dict[str, Any]]  # the desired objects (Queues, Topologies, ConfigMap)
    prune: list[dict[str, Any]]  # existing objects of the controller that are no longer wanted
    outcomes: dict[str, DocumentOutcome]


def document_key(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def object_ref(obj: dict[str, Any]) -> dict[str, Any]:
    md = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": md.get("name")}
    if md.get("namespace"):
        ref["namespace"] = md["namespace"]
    return ref


def owner_documents(obj: dict[str, Any]) -> list[str] | None:
    """The documents an object was produced from, or None when it is not the controller's."""
    md = obj.get("metadata") or {}
    if (md.get("labels") or {}).get(MANAGED_BY[0]) != MANAGED_BY[1]:
        return None
    source = (md.get("annotations") or {}).get(SOURCE_ANNOTATION)
    if not isinstance(source, str) or not source.strip():
        return None
    owners = [part.strip() for part in source.split(",") if part.strip()]
    for owner in owners:
        kind, _, name = owner.partition("/")
        if kind not in DOCUMENT_KINDS or not name:
            return None
    return owners


def _age(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return (str(md.get("creationTimestamp") or "~"), str(md.get("name")))


def _tree_queue_names(doc: dict[str, Any]) -> list[str]:
    names: list[str] = []

    def visit(items: Any) -> None:
        for item in items or []:
            if isinstance(item, dict):
                if isinstance(item.get("name"), str):
                    names.append(item["name"])
                visit(item.get("children"))

    visit((doc.get("spec") or {}).get("queues"))
    return names


def _settled(doc: dict[str, Any]) -> bool:
    status = doc.get("status") or {}
    generation = (doc.get("metadata") or {}).get("generation")
    applied = any(
        c.get("type") == "Applied" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return applied and generation is not None and status.get("observedGeneration") == generation


def _memory_bytes(megabytes: int) -> int:
    """The amount of a tree that compiled to ``megabytes``: compile rounds bytes up to MB, so
    it lies in ((MB - 1) * 10^6, MB * 10^6]; the value with the most trailing binary zeros
    there (``12Ti`` for 13194140) is what a person writes, unless it is whole gigabytes."""
    low, high = (megabytes - 1) * 10**6 + 1, megabytes * 10**6
    if megabytes % 1000 == 0:
        return high  # whole gigabytes: a decimal amount ("512G")
    for shift in range(50, 9, -1):
        step = 1 << shift
        candidate = -(-low // step) * step
        if candidate <= high:
            return candidate
    return high


def _exact_amounts(queue: dict[str, Any]) -> dict[str, Any]:
    """A Queue compiled from a tree, with its memory amounts as the tree wrote them, so sums
    over kept and new queues compare exact amounts, not amounts rounded up to megabytes."""
    spec = copy.deepcopy(queue.get("spec") or {})
    entry = (spec.get("resources") or {}).get("memory")
    if not isinstance(entry, dict):
        return queue
    for kind in ("quota", "limit"):
        value = entry.get(kind)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            entry[kind] = _memory_bytes(value) / 10**6
    return {**queue, "spec": spec}


def _loaded(obj: dict[str, Any], label: str) -> LoadResult:
    """The object as ``kai validate`` would read it from a file named ``label``."""
    clean = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": (obj.get("metadata") or {}).get("name")},
        "spec": obj.get("spec") or {},
    }
    return _load_cached(dump_yaml(clean), label)


@functools.lru_cache(maxsize=4096)
def _load_cached(text: str, label: str) -> LoadResult:
    # Parsing is most of a plan's cost and documents rarely change: parse each text once.
    # Callers only read the result.
    return load_text(text, label)


class _Planner:
    def __init__(
        self,
        documents: list[dict[str, Any]],
        queues: list[dict[str, Any]],
        topologies: list[dict[str, Any]],
        configmap: dict[str, Any] | None,
        configmap_namespace: str,
    ) -> None:
        self.docs = {document_key(d): d for d in sorted(documents, key=_age)}
        self.queues = {str(q["metadata"]["name"]): q for q in queues}
        self.topologies = {str(t["metadata"]["name"]): t for t in topologies}
        self.configmap = configmap
        self.cm_namespace = configmap_namespace
        self.outcomes = {key: DocumentOutcome(key) for key in self.docs}
        # documents applied as they are now (status says so for this generation)
        self.settled = {key for key, doc in self.docs.items() if _settled(doc)}

    # -- helpers ---------------------------------------------------------------------------
    def _set_aside(self) -> set[str]:
        return {k for k, o in self.outcomes.items() if o.state != "applied"}

    def _refuse(self, key: str, why: str) -> None:
        if self.outcomes[key].state == "applied":
            self.outcomes[key].state = "refused"
            self.outcomes[key].refusal = why

    def _owners(self, obj: dict[str, Any] | None) -> list[str] | None:
        return owner_documents(obj) if obj is not None else None

    # -- 2. claims -------------------------------------------------------------------------
    def _claims(self) -> None:
        set_aside = self._set_aside()
        claimants: dict[str, list[str]] = {}
        for key, doc in self.docs.items():
            if key in set_aside:
                continue
            if doc.get("kind") == "QueueTree":
                for name in dict.fromkeys(_tree_queue_names(doc)):
                    claimants.setdefault(name, []).append(key)
            elif doc.get("kind") == "TopologyPolicy":
                self._claim_topology(key)
            elif doc.get("kind") in POLICY_DATA_PREFIX:
                self._claim_configmap(key)
        for name, keys in sorted(claimants.items()):
            self._claim_queue(name, keys, set_aside)

    def _claim_queue(self, name: str, keys: list[str], set_aside: set[str]) -> None:
        existing = self.queues.get(name)
        owners = self._owners(existing)
        if existing is not None and owners is None:
            for key in keys:
                self._refuse(
                    key,
                    f"queue {name!r} exists and was not made by kai controller (no "
                    f"{MANAGED_BY[0]}={MANAGED_BY[1]} label and QueueTree source); it is never "
                    "changed: rename the queue in the tree or delete that Queue",
                )
            return
        owner = owners[0] if owners else None
        if owner is not None and owner in set_aside:
            for key in keys:
                if key != owner:
                    self._refuse(
                        key,
                        f"queue {name!r} belongs to {owner}, which is kept at its last good "
                        "state; fix or remove it there first",
                    )
            return
        winner = owner if owner in keys else keys[0]  # keys are sorted oldest first
        for key in keys:
            if key != winner:
                self._refuse(
                    key,
                    f"queue {name!r} is already claimed by {winner}; a queue belongs to one "
                    "QueueTree: remove it from one of them",
                )

    def _claim_topology(self, key: str) -> None:
        name = key.partition("/")[2]
        existing = self.topologies.get(name)
        if existing is not None and self._owners(existing) != [key]:
            self._refuse(
                key,
                f"Topology {name!r} exists and was not made from {key}; it is never changed: "
                "rename the TopologyPolicy or delete that Topology",
            )

    def _claim_configmap(self, key: str) -> None:
        if self.configmap is not None and self._owners(self.configmap) is None:
            self._refuse(
                key,
                f"ConfigMap {self.cm_namespace}/{CONFIGMAP_NAME} exists and was not made by "
                "kai controller; it is never changed: delete it so the controller can write it",
            )

    # -- 3. validation ---------------------------------------------------------------------
    def _kept_queue_names(self, set_aside: set[str]) -> set[str]:
        """Queues that stay as they are: hand-made ones and those of set-aside documents."""
        kept = set()
        for name, queue in self.queues.items():
            owners = self._owners(queue)
            if owners is None or (owners[0] in set_aside):
                kept.add(name)
        return kept

    def _report(self, set_aside: set[str]) -> list[Problem]:
        """kai validate over the documents not set aside and the Queues that stay as they are."""
        loaded = LoadResult()
        for key, doc in self.docs.items():
            if key not in set_aside:
                part = _loaded(doc, key)
                loaded.documents += part.documents
                loaded.problems += part.problems
        for name in sorted(self._kept_queue_names(set_aside)):
            queue = self.queues[name]
            if self._owners(queue) is not None:
                queue = _exact_amounts(queue)
            loaded.documents += _loaded(queue, f"{KEPT_PREFIX}{name}").documents
        return validate(loaded).problems

    def _foreign_errors(self, problems: list[Problem], baseline: set[Problem]) -> list[Problem]:
        """Errors reported on documents already applied as they are, or on kept Queues (beyond
        the errors those Queues have on their own): some changed document caused them."""
        return [
            p
            for p in problems
            if p.severity == "error"
            and p not in baseline
            and (p.file.startswith(KEPT_PREFIX) or p.file in self.settled)
        ]

    def _validate_round(self) -> bool:
        """One validation pass; True when no applied document has an error left.

        An error reported on a changed document sets that document aside (if several have
        errors, first those that have them on their own). An error reported
        elsewhere (on a document applied as it is, or a kept Queue: ``children-quota-sum`` is
        reported at the parent) is blamed on the changed document whose removal makes it go
        away, newest first; when none alone does, on every changed document."""
        set_aside = self._set_aside()
        problems = self._report(set_aside)
        for outcome in self.outcomes.values():
            if outcome.key not in set_aside:
                outcome.problems = [p for p in problems if p.file == outcome.key]
        direct = [
            o
            for o in self.outcomes.values()
            if o.state == "applied" and o.errors and o.key not in self.settled
        ]
        if direct:
            # An error may only be the echo of another document's change (a parent's new
            # limit makes the children's quotas too big): hold back the documents that are
            # wrong even without the other erring ones, or all of them when none is.
            keys = {o.key for o in direct}
            own = [
                o
                for o in direct
                if any(
                    p.file == o.key and p.severity == "error"
                    for p in self._report(set_aside | (keys - {o.key}))
                )
            ]
            for outcome in own or direct:
                outcome.state = "invalid"
            return False
        kept_only = self._report(set(self.docs))
        baseline = {p for p in kept_only if p.severity == "error"}
        foreign = self._foreign_errors(problems, baseline)
        if not foreign:
            return True
        changed = [k for k in reversed(self.docs) if k not in set_aside and k not in self.settled]
        alone = next(
            (
                k
                for k in changed
                if not self._foreign_errors(self._report(set_aside | {k}), baseline)
            ),
            None,
        )
        culprits = [alone] if alone is not None else changed
        if not culprits:  # nothing changed: the applied documents are invalid as they stand
            culprits = sorted({p.file for p in foreign if p.file in self.outcomes})
            if not culprits:
                return True  # only hand-made Queues are wrong; nothing of ours to hold back
        for key in culprits:
            self.outcomes[key].state = "invalid"
            self.outcomes[key].problems = self.outcomes[key].problems + foreign
        return False

    # -- 4. compile ------------------------------------------------------------------------
    def _compile(self) -> list[dict[str, Any]]:
        set_aside = self._set_aside()
        documents: list[Document] = []
        for key, doc in self.docs.items():
            if key not in set_aside:
                documents += _loaded(doc, key).documents
        objects = compile_documents(documents)
        desired = [o for o in objects if o["kind"] != "ConfigMap"]
        configmap = self._configmap(
            next((o for o in objects if o["kind"] == "ConfigMap"), None), desired, set_aside
        )
        return desired + ([configmap] if configmap is not None else [])

    def _configmap(
        self,
        compiled: dict[str, Any] | None,
        desired: list[dict[str, Any]],
        set_aside: set[str],
    ) -> dict[str, Any] | None:
        data = dict((compiled or {}).get("data") or {})
        data.pop(NAMESPACE_QUEUES_KEY, None)
        sources = {
            s.strip()
            for s in ((compiled or {}).get("metadata", {}).get("annotations", {}))
            .get(SOURCE_ANNOTATION, "")
            .split(",")
            if s.strip() and not s.strip().startswith("QueueTree/")
        }
        current = (self.configmap or {}).get("data") or {}
        for key in sorted(set_aside):  # last good policy settings stay
            kind, _, name = key.partition("/")
            data_key = f"{POLICY_DATA_PREFIX.get(kind, '?')}{name}.yaml"
            if kind in POLICY_DATA_PREFIX and data_key in current:
                data[data_key] = current[data_key]
                sources.add(key)
        kept = [self.queues[n] for n in self._kept_queue_names(set_aside)]
        kept = [q for q in kept if self._owners(q) is not None]
        bound_queues = [q for q in desired if q["kind"] == "Queue"] + kept
        bindings = from_queues(bound_queues)
        if bindings.bindings:
            data[NAMESPACE_QUEUES_KEY] = dump_yaml(bindings.as_dict())
            for binding in bindings.bindings.values():
                queue = next(q for q in bound_queues if q["metadata"]["name"] == binding.queue)
                sources.add(queue["metadata"]["annotations"][SOURCE_ANNOTATION])
        if not data:
            return None
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": CONFIGMAP_NAME,
                "namespace": self.cm_namespace,
                "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
                "annotations": {SOURCE_ANNOTATION: ", ".join(sorted(sources))},
            },
            "data": dict(sorted(data.items())),
        }

    # -- 5. prune and outcomes -------------------------------------------------------------
    def _prune(self, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
        set_aside = self._set_aside()
        wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
        existing = [*self.queues.values(), *self.topologies.values()]
        if self.configmap is not None:
            existing.append(self.configmap)
        prune = []
        for obj in existing:
            owners = self._owners(obj)
            if owners is None or (obj["kind"], obj["metadata"]["name"]) in wanted:
                continue
            if any(owner in set_aside for owner in owners):
                continue  # a set-aside document's objects stay as they are
            prune.append(obj)
        return prune

    def _record_objects(self, desired: list[dict[str, Any]]) -> None:
        set_aside = self._set_aside()
        existing = [*self.queues.values(), *self.topologies.values()]
        if self.configmap is not None:
            existing.append(self.configmap)
        for key, outcome in self.outcomes.items():
            pool = existing if key in set_aside else desired
            outcome.objects = [
                object_ref(obj) for obj in pool if key in (owner_documents(obj) or ())
            ]

    def run(self) -> Plan:
        for _ in range(MAX_ROUNDS):
            before = self._set_aside()
            self._claims()
            if self._set_aside() == before and self._validate_round():
                break
        desired = self._compile()
        self._record_objects(desired)
        return Plan(desired, self._prune(desired), self.outcomes)


def plan(
    documents: list[dict[str, Any]],
    queues: list[dict[str, Any]],
    topologies: list[dict[str, Any]],
    configmap: dict[str, Any] | None,
    *,
    configmap_namespace: str = CONFIGMAP_NAMESPACE,
) -> Plan:
    """The plan for ``documents`` (QueueTree, TopologyPolicy, SharingPolicy, SchedulerPolicy
    objects as read from the API) over the ``queues``, ``topologies`` and scheduler
    ``configmap`` that exist now (every Queue and Topology, not only the controller's)."""
    docs = [d for d in documents if d.get("apiVersion") == GROUP_VERSION]
    return _Planner(docs, queues, topologies, configmap, configmap_namespace).run()
