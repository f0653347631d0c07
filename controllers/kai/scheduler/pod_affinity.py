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

from collections.abc import Callable, Iterator

import numpy as np

from kai.scheduler.resource_layout import BoolArray, FloatArray
from kai.scheduler.selectors import selector_matches
from kai.scheduler.snapshot import PodAffinityTerm, TaskSpec, WeightedPodAffinityTerm

Placed = dict[str, tuple[TaskSpec, int]]  # task uid -> (spec, node)
PreferredKey = tuple[str, float, WeightedPodAffinityTerm]  # (namespace, sign, term)


def _index_key(key: PreferredKey) -> tuple[str, ...]:
    namespace, _, weighted = key
    term = weighted.term
    if term.match_labels and not term.selects_nothing:
        return (namespace, *term.match_labels[0])
    return (namespace,)


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
        # the placed pods' preferred terms, counted per node: (namespace, sign, term) -> node
        # -> how many placed pods carry it there (pods of one workload share their terms, so
        # a newcomer checks each distinct term once, not each placed pod)
        self._preferred: dict[tuple[str, float, WeightedPodAffinityTerm], dict[int, int]] = {}
        # those terms by one of their matchLabels pairs (namespace, key, value), or by
        # namespace when they have none: a newcomer only looks at the terms its labels can meet
        self._preferred_index: dict[tuple[str, ...], set[PreferredKey]] = {}

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
        if spec.preferred_pod_affinity or spec.preferred_pod_anti_affinity:
            self._count_preferred(spec, old_node, -1)
            self._count_preferred(spec, new_node, +1)

    def _count_preferred(self, spec: TaskSpec, node: int, delta: int) -> None:
        if node < 0:
            return
        for sign, terms in (
            (1.0, spec.preferred_pod_affinity),
            (-1.0, spec.preferred_pod_anti_affinity),
        ):
            for term in terms:
                key = (spec.namespace, sign, term)
                counts = self._preferred.get(key)
                if counts is None:
                    counts = self._preferred[key] = {}
                    self._preferred_index.setdefault(_index_key(key), set()).add(key)
                count = counts.get(node, 0) + delta
                if count > 0:
                    counts[node] = count
                else:
                    counts.pop(node, None)
                    if not counts:
                        del self._preferred[key]
                        self._preferred_index[_index_key(key)].discard(key)

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

    def preferred_terms(
        self, namespace: str, labels: dict[str, str]
    ) -> Iterator[tuple[float, WeightedPodAffinityTerm, dict[int, int]]]:
        """(sign, term, placed pods carrying it per node) of the placed pods' preferred terms
        in ``namespace`` that a pod with ``labels`` may meet (+1 affinity, -1 anti-affinity);
        the caller still checks the whole selector."""
        index = self._preferred_index
        keys = set(index.get((namespace,), ()))
        for pair in labels.items():
            found = index.get((namespace, *pair))
            if found:
                keys |= found
        for key in keys:
            _, sign, term = key
            yield sign, term, self._preferred[key]

    def node_of(self, spec: TaskSpec) -> int:
        """Where the task is placed (-1: not placed)."""
        found = self._by_namespace.get(spec.namespace, {}).get(spec.uid)
        return -1 if found is None else found[1]

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
    task: TaskSpec, placed: PlacedPods, domains: Callable[[str], tuple[np.ndarray, dict[str, int]]]
) -> FloatArray | None:
    """Kubernetes' InterPodAffinity score of ``task`` on every node, as KAI uses it (the raw
    score, not normalised; the existing pods' required terms count 0, KAI's
    ``hardPodAffinityWeight``): per placed pod of the task's namespace and per term,

    - each preferred affinity term of the task that selects the placed pod adds its weight to
      every node of the placed pod's ``topology_key`` domain (anti-affinity: subtracts it);
    - each preferred affinity term of the placed pod that selects the task adds its weight to
      the placed pod's domain (anti-affinity: subtracts it).

    ``domains(key)``: the nodes' domain codes for a topology key and the code of each value
    (:meth:`kai.scheduler.predicates.LabelIndex.domains`). None when nothing scores."""
    totals: dict[str, dict[int, float]] = {}  # topology key -> domain code -> score

    def add(term: WeightedPodAffinityTerm, node: int, sign: float, count: int = 1) -> None:
        key = term.term.topology_key
        code = int(domains(key)[0][node])
        if code >= 0:
            domain = totals.setdefault(key, {})
            domain[code] = domain.get(code, 0.0) + sign * term.weight * count

    own = ((1.0, task.preferred_pod_affinity), (-1.0, task.preferred_pod_anti_affinity))
    for sign, terms in own:
        for weighted in terms:
            for other, node in placed.matching(task.namespace, weighted.term):
                if other.uid != task.uid:
                    add(weighted, node, sign)
    own_node = placed.node_of(task)  # a placed task being moved does not score itself
    mine = {(sign, term) for sign, terms in own for term in terms} if own_node >= 0 else set()
    for sign, weighted, counts in placed.preferred_terms(task.namespace, task.labels):
        if matches(task.labels, weighted.term):
            for node, count in counts.items():
                if node == own_node and (sign, weighted) in mine:
                    count -= 1
                if count:
                    add(weighted, node, sign, count)
    out: FloatArray | None = None
    for key, by_code in totals.items():
        codes, ids = domains(key)
        table = np.zeros(len(ids) + 1, dtype=np.float64)  # the last slot: no such label
        for code, score in by_code.items():
            table[code] = score
        scores = table[codes]  # code -1 reads the last slot, 0
        out = scores if out is None else out + scores
    return out
