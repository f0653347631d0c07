"""Required pod affinity and anti-affinity (Kubernetes InterPodAffinity, required terms only).

:class:`PlacedPods` indexes where tasks are placed by ``(namespace, label key, value)``, kept up
to date by the session on every placement change, so a term finds the tasks it matches by
looking up its rarest label instead of scanning every placed task. Placed tasks that carry
anti-affinity terms are kept apart: anti-affinity is symmetric, so their terms also keep a
matching newcomer out of their domain.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kai.scheduler.resource_layout import BoolArray
from kai.scheduler.selectors import selector_matches
from kai.scheduler.snapshot import PodAffinityTerm, TaskSpec

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
