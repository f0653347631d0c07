"""Validating the GitOps documents and KAI's Queues and Topologies: ``kai validate``'s rules.

The incoming object is checked together with every document and Queue already in the cluster,
by the very engine ``kai validate`` runs (:func:`kai.gitops.validate.validate`): JSON Schema,
the hierarchy rules, the topology and policy rules. The verdict rests on what the request
*changes*: the problems of the cluster with the object as it would be stored, minus those the
cluster already had (with the old version, or without it). A request that introduces an error
is refused; one that leaves an old problem alone is not blamed for it. Queues and Topologies
that the controller compiled from documents (``app.kubernetes.io/managed-by: kai`` with a
``gitops.kai.scheduler/source`` annotation) are left out of the set: their document speaks for
them.

Deviations from ``kai validate`` (see docs/webhooks.md):

- ``parent-exists`` is a warning at admission: the API server admits objects one by one, in an
  order nobody controls (``kubectl apply -f dir/`` goes by file name, Argo CD by kind), so a
  child applied just before its parent must not fail. KAI itself accepts orphan queues.
- The quota rules KAI's own admission does not check (``KAI_QUEUE_RULES``: limit below quota,
  children's quotas above the parent's, a child's quota above the parent's limit) are refused
  for raw ``scheduling.run.ai/v2`` Queues as for documents, unless the webhook runs with
  ``--kai-queue-rules=warn`` (for clusters migrating from KAI whose Queues already break
  them): then a Queue request that breaks one is admitted with a warning.
- Deleting is never refused, in any order (``kubectl delete -f dir/``, an Argo CD prune): a
  Queue or QueueTree that still has child queues or workloads gets a warning naming them, and
  ``kai controller``'s finalizer (:data:`kai.api.protection.FINALIZER`) keeps it Terminating
  until they are gone.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from kai.api.protection import FINALIZER
from kai.gitops.loader import Document, LoadResult
from kai.gitops.problems import Problem
from kai.gitops.validate import validate
from kai.webhooks.cluster import ClusterView, compiled
from kai.webhooks.review import Request, Verdict

__all__ = ["KAI_QUEUE_RULE_MODES", "PolicyValidator"]

IN_CLUSTER = "in the cluster"
THIS_OBJECT = "this object"
WARN_ONLY = {"parent-exists"}
# Rules KAI's own Queue admission does not enforce. They are refused for raw Queues too
# ("enforce", the default); "warn" admits a Queue request that breaks one, with a warning, for
# clusters migrating from KAI whose existing Queues break them.
KAI_QUEUE_RULES = frozenset(
    {"limit-below-quota", "children-quota-sum", "child-quota-over-parent-limit"}
)
KAI_QUEUE_RULE_MODES = ("enforce", "warn")
_PLACE = re.compile(r"\((in the cluster|this object):\d+\)")

Key = tuple[str, str, str]  # group, kind, name


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def _key(obj: dict[str, Any]) -> Key:
    return (
        _group(str(obj.get("apiVersion") or "")),
        str(obj.get("kind") or ""),
        str((obj.get("metadata") or {}).get("name") or ""),
    )


def _document(obj: dict[str, Any], label: str) -> Document:
    """The object as ``kai validate`` would read it from a file (no server-set fields)."""
    md = obj.get("metadata") or {}
    meta = {k: md[k] for k in ("name", "labels", "annotations") if md.get(k) is not None}
    data: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    data["metadata"] = meta
    if "spec" in obj:
        data["spec"] = obj["spec"]
    return Document(label, 0, data)


def _identity(p: Problem) -> tuple[str, str, str | None, str | None, str]:
    return (p.severity, p.rule, p.object, p.path, p.message)


def describe(p: Problem) -> str:
    subject = " ".join(part for part in (p.object, p.path) if part)
    message = _PLACE.sub(lambda m: f"({m[1]})", p.message)
    return f"[{p.rule}] {subject}: {message}" if subject else f"[{p.rule}] {message}"


class PolicyValidator:
    """The handler of QueueTree, TopologyPolicy, SharingPolicy, SchedulerPolicy, Queue and
    Topology requests."""

    def __init__(self, cluster: ClusterView, kai_queue_rules: str = "enforce") -> None:
        if kai_queue_rules not in KAI_QUEUE_RULE_MODES:
            raise ValueError(
                f"kai_queue_rules must be one of {', '.join(KAI_QUEUE_RULE_MODES)}, "
                f"got {kai_queue_rules!r}"
            )
        self.cluster = cluster
        self.warn_kai_queue_rules = kai_queue_rules == "warn"

    def __call__(self, req: Request) -> Verdict:
        subject = req.subject
        if req.kind in ("Queue", "Topology") and compiled(subject) and req.operation != "DELETE":
            return Verdict()  # compiled from a document that was checked itself
        everything = self.cluster.policy_objects()
        cluster = [o for o in everything if not compiled(o)]
        verdict = Verdict()
        if req.operation == "DELETE":
            return Verdict(warnings=self._delete(req, everything))
        key = _key(subject)
        others = [o for o in cluster if _key(o) != key]
        stored = next((o for o in cluster if _key(o) == key), None)
        kai_queue = req.kind == "Queue"
        before = self._problems(others, stored, kai_queue)
        after = self._problems(others, req.object if req.operation != "DELETE" else None, kai_queue)
        seen = {_identity(p) for p in before}
        subject_name = f"{req.kind}/{key[2]}"
        errors = [p for p in after if p.severity == "error" and _identity(p) not in seen]
        warnings = [
            p
            for p in after
            if p.severity == "warning" and (_identity(p) not in seen or p.object == subject_name)
        ]
        if errors:
            lines = [describe(p) for p in errors]
            head = (
                f"{subject_name}: {len(errors)} problem{'s' if len(errors) != 1 else ''} "
                "(the rules of `kai validate`, checked with the documents and Queues in the "
                "cluster):"
            )
            return Verdict.deny("\n".join([head, *lines]), warnings=[describe(p) for p in warnings])
        verdict.warnings = [describe(p) for p in warnings]
        return verdict

    def _problems(
        self, others: list[dict[str, Any]], subject: dict[str, Any] | None, kai_queue: bool
    ) -> list[Problem]:
        docs = [_document(o, IN_CLUSTER) for o in others]
        if subject is not None:
            docs.append(_document(subject, THIS_OBJECT))
        report = validate(LoadResult(documents=docs))
        return [
            _admission_severity(p, kai_queue, self.warn_kai_queue_rules) for p in report.problems
        ]

    # -- deletion ------------------------------------------------------------------------
    def _delete(self, req: Request, everything: list[dict[str, Any]]) -> list[str]:
        """Warnings naming what still uses the queues being deleted (the delete itself is
        accepted: the finalizer holds the object while they exist)."""
        old = req.old_object or {}
        if req.kind == "Queue":
            names = [str((old.get("metadata") or {}).get("name") or req.name)]
        elif req.kind == "QueueTree":
            names = _tree_queues(old)
        else:
            return []
        own = set(names)
        children: dict[str, list[str]] = {}
        for obj in everything:
            if _key(obj) == _key(old) and req.kind == "QueueTree":
                continue
            for name, parent in _parents(obj):
                if parent in own and name not in own:
                    children.setdefault(parent, []).append(name)
        problems = []
        for name in names:
            if children.get(name):
                kids = ", ".join(sorted(set(children[name])))
                problems.append(f"queue {name!r} still has child queues: {kids}")
            workloads = self.cluster.queue_workloads(name)
            if workloads:
                shown = ", ".join(workloads[:5]) + (" ..." if len(workloads) > 5 else "")
                problems.append(f"queue {name!r} still has {len(workloads)} workloads: {shown}")
        if not problems:
            return []
        protected = FINALIZER in ((old.get("metadata") or {}).get("finalizers") or [])
        then = (
            f"it stays Terminating (finalizer {FINALIZER}) until they are gone"
            if protected
            else "they are left without their queue"
        )
        return [f"{req.kind}/{req.name}: {problem}; {then}" for problem in problems]


def _admission_severity(p: Problem, kai_queue: bool, warn_kai_queue_rules: bool) -> Problem:
    """``kai_queue``: the request is about a raw KAI Queue; ``warn_kai_queue_rules``: the
    webhook runs with ``--kai-queue-rules=warn``, so the rules KAI itself does not check are
    warnings for what a raw Queue causes (its own request, or a problem of a raw Queue)."""
    kai_object = kai_queue or (p.object or "").startswith("Queue/")
    relaxed = warn_kai_queue_rules and kai_object and p.rule in KAI_QUEUE_RULES
    if p.severity == "error" and (p.rule in WARN_ONLY or relaxed):
        message = p.message
        if p.rule == "parent-exists":
            message = message.replace(
                "does not exist in the documents validated together",
                "does not exist in the cluster (yet); until it does, these queues are orphans "
                "and take no workloads",
            )
        elif relaxed:
            message += " (admitted: the webhook runs with --kai-queue-rules=warn)"
        return replace(p, severity="warning", message=message)
    return p


def _tree_queues(tree: dict[str, Any]) -> list[str]:
    names: list[str] = []

    def walk(items: Any) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                names.append(item["name"])
                walk(item.get("children"))

    walk((tree.get("spec") or {}).get("queues"))
    return names


def _parents(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(queue, parent) pairs an object declares."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Queue":
        parent = spec.get("parentQueue")
        name = (obj.get("metadata") or {}).get("name")
        return [(str(name), str(parent))] if parent and name else []
    if obj.get("kind") != "QueueTree":
        return []
    pairs: list[tuple[str, str]] = []

    def walk(items: Any, parent: str | None) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                if parent:
                    pairs.append((item["name"], parent))
                walk(item.get("children"), item["name"])

    top = spec.get("parent")
    walk(spec.get("queues"), top if isinstance(top, str) and top else None)
    return pairs
