"""Pod affinity and anti-affinity (Kubernetes InterPodAffinity): required terms as a filter
(:func:`affinity_masks`), preferred terms as a score (:func:`preferred_scores`).

:class:`PlacedPods` indexes where tasks are placed by ``(namespace, label key, value)``, kept up
to date by the session on every placement change, so a term finds the tasks it matches by
looking up its rarest label instead of scanning every placed task. Placed tasks that carry
anti-affinity terms are kept apart: anti-affinity is symmetric, so their terms also keep a
matching newcomer out of their domain. Placed tasks with preferred terms are kept apart too:
their terms score a newcomer they select, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kai.scheduler.resource_layout import BoolArray, FloatArray
from kai.scheduler.selectors import selector_matches
from kai.scheduler.snapshot import PodAffinityTerm, TaskSpec, WeightedPodAffinityTerm

Placed = dict[str, tuple[TaskSpec, int]]  # task uid -> (spec, node)


def matches(labels: dict[str, str], term: PodAffinityTerm) -> bool:
    """Whether the term's label selector selects a pod with ``labels`` (an empty selector
    selects every pod, a missing one none)."""
    if term.selects_nothing:
        return False
    return selector_matches(labels, term.match_labels, term.match_expressions)


class PlacedPods:
    def __init__(self) -> None:
        self._by_label: dict[tuple[str, str, str], Placed] = {}
        self._by_namespace: dict[str, Placed] = {}
        self._anti: Placed = {}
        self._preferred: Placed = {}

    def move(self, spec: TaskSpec, old_node: int, new_node: int) -> None:
        """Record that the task ``spec`` went from ``old_node`` to ``new_node`` (-1 = not
        placed)."""
        if old_node == new_node:
            return
        uid = spec.uid
        keys = [(spec.namespace, key, value) for key, value in spec.labels.items()]
        tables = [self._by_label.setdefault(key, {}) for key in keys]
        tables.append(self._by_namespace.setdefault(spec.namespace, {}))
        if spec.pod_anti_affinity:
            tables.append(self._anti)
        if spec.preferred_pod_affinity or spec.preferred_pod_anti_affinity:
            tables.append(self._preferred)
        for table in tables:
            if new_node >= 0:
                table[uid] = (spec, new_node)
            else:
                table.pop(uid, None)

    def matching(self, namespace: str, term: PodAffinityTerm) -> Iterator[tuple[TaskSpec, int]]:
        """Placed tasks of ``namespace`` that ``term`` selects, in task-uid order."""
        if term.selects_nothing:
            return
        if term.match_labels:
            candidates = min(
                (
                    self._by_label.get((namespace, key, value), {})
                    for key, value in term.match_labels
                ),
                key=len,
            )
        else:
            candidates = self._by_namespace.get(namespace, {})
        for uid in sorted(candidates):
            spec, node = candidates[uid]
            if matches(spec.labels, term):
                yield spec, node

    def with_anti_affinity(self) -> list[tuple[TaskSpec, int]]:
        return [self._anti[uid] for uid in sorted(self._anti)]

    def any_anti_affinity(self) -> bool:
        return bool(self._anti)

    def with_preferred_terms(self) -> list[tuple[TaskSpec, int]]:
        return [self._preferred[uid] for uid in sorted(self._preferred)]

    def any_preferred_terms(self) -> bool:
        return bool(self._preferred)


def affinity_masks(
    task: TaskSpec,
    placed: PlacedPods,
    node_labels: list[dict[str, str]],
) -> tuple[BoolArray, BoolArray]:
    """(affinity mask, anti-affinity mask) of ``task`` over the nodes whose labels are
    ``node_labels``."""
    size = len(node_labels)
    affinity = np.ones(size, dtype=bool)
    anti = np.ones(size, dtype=bool)

    def in_domains(key: str, domains: set[str]) -> BoolArray:
        return np.fromiter(
            (labels.get(key) in domains for labels in node_labels), dtype=bool, count=size
        )

    for term in task.pod_affinity:
        domains = _domains(placed.matching(task.namespace, term), term, node_labels)
        if not domains and matches(task.labels, term):
            # Kubernetes lets the first pod of a self-affine group in anywhere the key exists
            affinity &= np.fromiter(
                (term.topology_key in labels for labels in node_labels), dtype=bool, count=size
            )
        else:
            affinity &= in_domains(term.topology_key, domains)
    for term in task.pod_anti_affinity:
        domains = _domains(placed.matching(task.namespace, term), term, node_labels)
        if domains:
            anti &= ~in_domains(term.topology_key, domains)
    for spec, node in placed.with_anti_affinity():
        if spec.namespace != task.namespace:
            continue
        for term in spec.pod_anti_affinity:
            if not matches(task.labels, term):
                continue
            domain = node_labels[node].get(term.topology_key)
            if domain is not None:
                anti &= ~in_domains(term.topology_key, {domain})
    return affinity, anti


def _domains(
    found: Iterator[tuple[TaskSpec, int]], term: PodAffinityTerm, node_labels: list[dict[str, str]]
) -> set[str]:
    out: set[str] = set()
    for _, node in found:
        value = node_labels[node].get(term.topology_key)
        if value is not None:
            out.add(value)
    return out


def preferred_scores(
    task: TaskSpec, placed: PlacedPods, node_labels: list[dict[str, str]]
) -> FloatArray | None:
    """Kubernetes' InterPodAffinity score of ``task`` on every node, as KAI uses it (the raw
    score, not normalised; the existing pods' required terms count 0, KAI's
    ``hardPodAffinityWeight``): per placed pod of the task's namespace and per term,

    - each preferred affinity term of the task that selects the placed pod adds its weight to
      every node of the placed pod's ``topology_key`` domain (anti-affinity: subtracts it);
    - each preferred affinity term of the placed pod that selects the task adds its weight to
      the placed pod's domain (anti-affinity: subtracts it).

    None when nothing scores (every node would score 0)."""
    totals: dict[str, dict[str, float]] = {}

    def add(term: WeightedPodAffinityTerm, node: int, sign: float) -> None:
        key = term.term.topology_key
        value = node_labels[node].get(key)
        if value is not None:
            domain = totals.setdefault(key, {})
            domain[value] = domain.get(value, 0.0) + sign * term.weight

    own = ((1.0, task.preferred_pod_affinity), (-1.0, task.preferred_pod_anti_affinity))
    for sign, terms in own:
        for weighted in terms:
            for other, node in placed.matching(task.namespace, weighted.term):
                if other.uid != task.uid:
                    add(weighted, node, sign)
    for spec, node in placed.with_preferred_terms():
        if spec.namespace != task.namespace or spec.uid == task.uid:
            continue
        for sign, terms in (
            (1.0, spec.preferred_pod_affinity),
            (-1.0, spec.preferred_pod_anti_affinity),
        ):
            for weighted in terms:
                if matches(task.labels, weighted.term):
                    add(weighted, node, sign)
    if not any(totals.values()):
        return None
    size = len(node_labels)
    out = np.zeros(size, dtype=np.float64)
    for key, by_value in totals.items():
        values = (labels.get(key) for labels in node_labels)
        out += np.fromiter(
            (0.0 if v is None else by_value.get(v, 0.0) for v in values),
            dtype=np.float64,
            count=size,
        )
    return out
