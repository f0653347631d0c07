"""Node filters, vectorised over the node table.

The mask functions and reason texts of the built-in filters. The filter plugins under
``kai.scheduler.plugins`` wrap them, and ``plugins/registry.py`` lists them in the order in
which a failing node is charged to one of them; resource fit lives in
:mod:`kai.scheduler.placement` because it changes with every placement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kai.scheduler.nodes import NodeTable
from kai.scheduler.resource_layout import BoolArray, FloatArray
from kai.scheduler.selectors import value_matches
from kai.scheduler.sharing_modes import sharing_mode
from kai.scheduler.snapshot import (
    NodeSelectorTerm,
    Requirement,
    Taint,
    TaskSpec,
    Toleration,
    VolumeConstraint,
    WeightedNodeTerm,
)

NOT_READY = "node not ready"
UNSCHEDULABLE = "node unschedulable"
TAINT = "untolerated taint"
NODE_AFFINITY = "node affinity mismatch"
POD_AFFINITY = "pod affinity mismatch"
POD_ANTI_AFFINITY = "pod anti-affinity conflict"
HOST_PORTS = "node(s) didn't have free ports for the requested pod ports"
OUTSIDE_DOMAIN = "outside the allowed topology domain"
# Kubernetes VolumeBinding's own texts where it has one
VOLUME_CLAIM_MISSING = "pod's persistentvolumeclaim not found"
VOLUME_CLAIM_UNBOUND = "pod has unbound immediate PersistentVolumeClaims"
VOLUME_NODE_AFFINITY = "node(s) had volume node affinity conflict"
VOLUME_NOT_AVAILABLE = "node(s) didn't find available persistent volumes to bind"
MIG_ONLY = "MIG instances are only on MIG nodes with the mixed strategy"
NO_SHARING_ON_MIG = "GPU sharing is not possible on a MIG node"
NO_GPU_MEMORY = "node has no GPU memory figure for shared GPUs"
SHARING_MODE_NOT_ALLOWED = "the node pool's SharingPolicy does not allow this GPU sharing mode"
TOO_MANY_PODS = "too many pods"
INSUFFICIENT_SHARED = "insufficient shared GPU memory"

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.effect is not None and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists":
            if tol.key is None or tol.key == taint.key:
                return True
        elif tol.key == taint.key and (tol.value or "") == (taint.value or ""):
            return True
    return False


class LabelIndex:
    """Per label key, the nodes' values as an object array (None where the label is missing)."""

    def __init__(self, nodes: NodeTable) -> None:
        self._nodes = nodes
        self._cache: dict[str, np.ndarray] = {}
        self._domains: dict[str, tuple[np.ndarray, dict[str, int]]] = {}

    def values(self, key: str) -> np.ndarray:
        cached = self._cache.get(key)
        if cached is None:
            cached = np.array([labels.get(key) for labels in self._nodes.labels], dtype=object)
            self._cache[key] = cached
        return cached

    def domains(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """The nodes' values of ``key`` as codes (an int array, -1 where the label is missing)
        and the code of each value: a score per value becomes a score per node in one
        vectorised lookup."""
        cached = self._domains.get(key)
        if cached is None:
            ids: dict[str, int] = {}
            codes = np.fromiter(
                (-1 if v is None else ids.setdefault(v, len(ids)) for v in self.values(key)),
                dtype=np.int64,
                count=len(self._nodes),
            )
            cached = self._domains[key] = (codes, ids)
        return cached

    def has(self, key: str) -> BoolArray:
        values = self.values(key)
        return np.fromiter((v is not None for v in values), dtype=bool, count=len(values))

    def isin(self, key: str, values: Iterable[str]) -> BoolArray:
        wanted = set(values)
        return np.fromiter(
            (v in wanted for v in self.values(key)), dtype=bool, count=len(self._nodes)
        )


def _requirement_mask(index: LabelIndex, req: Requirement) -> BoolArray:
    """The nodes whose labels satisfy ``req`` (:func:`kai.scheduler.selectors.value_matches`,
    evaluated once per distinct value of the label)."""
    if req.operator == "In":  # the common case, without a Python call per node
        return index.isin(req.key, req.values)
    values = index.values(req.key)
    verdict: dict[str | None, bool] = {}
    for value in values:
        if value not in verdict:
            verdict[value] = value_matches(req, value)
    return np.fromiter((verdict[v] for v in values), dtype=bool, count=len(values))


def _term_mask(index: LabelIndex, term: NodeSelectorTerm, size: int) -> BoolArray:
    """Nodes whose labels satisfy every requirement of ``term`` (an empty term: none)."""
    if not term.requirements:
        return np.zeros(size, dtype=bool)
    mask = np.ones(size, dtype=bool)
    for req in term.requirements:
        mask &= _requirement_mask(index, req)
    return mask


def affinity_mask(
    index: LabelIndex, selector: dict[str, str], terms: Sequence[NodeSelectorTerm], size: int
) -> BoolArray:
    """Node selector (every label equal) AND required node affinity (terms ORed, requirements
    ANDed; an empty term matches nothing, as in Kubernetes)."""
    mask = np.ones(size, dtype=bool)
    for key in sorted(selector):
        mask &= index.isin(key, (selector[key],))
    if terms:
        any_term = np.zeros(size, dtype=bool)
        for term in terms:
            if term.requirements:
                any_term |= _term_mask(index, term, size)
        mask &= any_term
    return mask


def preferred_node_score(
    index: LabelIndex, terms: Sequence[WeightedNodeTerm], size: int
) -> FloatArray:
    """Kubernetes' NodeAffinity score: per node, the sum of the weights of the preferred terms
    its labels satisfy (raw, not normalised, like KAI's use of Kubernetes' scores)."""
    score = np.zeros(size, dtype=np.float64)
    for weighted in terms:
        score += np.where(_term_mask(index, weighted.term, size), float(weighted.weight), 0.0)
    return score


def volume_masks(
    index: LabelIndex, volumes: VolumeConstraint, size: int
) -> list[tuple[str, BoolArray]]:
    """A claim that does not exist, or an unbound one of an immediate-binding class, keeps the
    pod off every node; each bound volume's node affinity (terms ORed) must hold."""
    out: list[tuple[str, BoolArray]] = []
    if volumes.missing:
        out.append((VOLUME_CLAIM_MISSING, np.zeros(size, dtype=bool)))
    if volumes.unbound:
        out.append((VOLUME_CLAIM_UNBOUND, np.zeros(size, dtype=bool)))
    if volumes.node_affinity:
        mask = np.ones(size, dtype=bool)
        for terms in volumes.node_affinity:
            mask &= affinity_mask(index, {}, terms, size)
        out.append((VOLUME_NODE_AFFINITY, mask))
    if volumes.available:
        mask = np.ones(size, dtype=bool)
        for terms in volumes.available:
            mask &= affinity_mask(index, {}, terms, size) if terms else False
        out.append((VOLUME_NOT_AVAILABLE, mask))
    return out


def taint_mask(nodes: NodeTable, tolerations: Sequence[Toleration]) -> BoolArray:
    mask = np.ones(len(nodes), dtype=bool)
    for i, taints in enumerate(nodes.taints):
        for taint in taints:
            if taint.effect in _BLOCKING_EFFECTS and not tolerates(tolerations, taint):
                mask[i] = False
                break
    return mask


def gpu_type_masks(nodes: NodeTable, task: TaskSpec) -> list[tuple[str, BoolArray]]:
    """MIG and sharing rules (KAI predicates): MIG requests only on mixed-strategy MIG nodes;
    shared requests never on MIG nodes and only where the GPU memory is known."""
    size = len(nodes)
    out: list[tuple[str, BoolArray]] = []
    if task.gpu.is_mig:
        out.append((MIG_ONLY, nodes.mig_mixed.copy()))
    if task.gpu.is_shared:
        out.append((NO_SHARING_ON_MIG, ~nodes.is_mig))
        out.append((NO_GPU_MEMORY, nodes.gpu_memory > 0))
    mode = sharing_mode(task)
    if mode is not None and any(spec.sharing_modes is not None for spec in nodes.specs):
        allowed = [spec.sharing_modes is None or mode in spec.sharing_modes for spec in nodes.specs]
        out.append((SHARING_MODE_NOT_ALLOWED, np.array(allowed, dtype=bool)))
    if not out:
        out.append((MIG_ONLY, np.ones(size, dtype=bool)))
    return out
