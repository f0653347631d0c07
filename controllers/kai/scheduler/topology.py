"""Topology trees and candidate domains for topology-aware placement.

A :class:`TopologyTree` is built once per session from a :class:`TopologySpec` and the session's
node order. Level ``i`` holds one domain per distinct path of label values from the top level down
to ``i``; a domain's id is that path joined with ``"."`` (``zoneA.block2.rack3``). A node that
lacks the label of *any* level is outside the topology and can never host a constrained task.

:func:`candidate_domains` answers "in which node sets may this (sub)group be placed, best first"
the way KAI's topology plugin does: the levels from the preferred level up to the required one,
lowest level first; inside a level, domains in a tree order where siblings are sorted fullest first
(highest dominant packing ratio), so gangs fill partly used racks before opening empty ones; every
candidate passes a cheap fit estimate first. :func:`preferred_level_scores` is the node score that
keeps the tasks of a domain together at the preferred level.

Everything works on numpy arrays indexed by the session's node order: per-domain sums are a
``bincount`` per resource, never a Python loop over nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kai.scheduler.snapshot import TopologyConstraint, TopologySpec

__all__ = [
    "ROOT_LEVEL",
    "Candidate",
    "ResolvedConstraint",
    "TopologyError",
    "TopologyTree",
    "build_topologies",
    "build_topology",
    "candidate_domains",
    "domains_of",
    "preferred_level_scores",
    "resolve_constraint",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: the level index of the single ``root`` domain that holds every node inside the topology
ROOT_LEVEL = -1
# A resource a domain does not have at all makes its ratio this large (KAI uses 1000 too).
_ABSENT_RATIO = 1000.0
_EPS = 1e-9


class TopologyError(ValueError):
    """A topology constraint cannot be honoured. ``code`` is a stable reason for status/events:
    ``TopologyDoesNotExist``, ``TopologyLevelDoesNotExist`` or ``NoTopologyDomainFits``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class TopologyTree:
    """One topology over the session's nodes.

    ``level_domain[l][n]`` is the index of node ``n``'s domain at level ``l`` (-1 when the node is
    outside the topology); ``domain_ids[l][d]`` its id; ``domain_parent[l][d]`` the index of its
    parent domain at level ``l - 1`` (-1 at level 0, whose parent is ``root``).
    """

    name: str
    levels: list[str]
    aliases: dict[str, str]
    inside: BoolArray
    level_domain: list[IntArray]
    domain_ids: list[list[str]]
    domain_parent: list[IntArray]
    domain_rank: list[IntArray]  # rank of each domain id in sorted id order, per level

    @property
    def num_nodes(self) -> int:
        return int(self.inside.shape[0])

    def level_index(self, level: str) -> int:
        """Index of a level given by node label key or alias; raises TopologyError otherwise."""
        label = self.aliases.get(level, level)
        try:
            return self.levels.index(label)
        except ValueError:
            known = ", ".join(self.levels)
            aliases = f"; aliases: {', '.join(sorted(self.aliases))}" if self.aliases else ""
            raise TopologyError(
                "TopologyLevelDoesNotExist",
                f"topology level {level!r} is not a level of topology {self.name!r} "
                f"(levels: {known}{aliases})",
            ) from None

    def level_name(self, level: int) -> str:
        return "root" if level == ROOT_LEVEL else self.levels[level]


def build_topology(spec: TopologySpec, node_labels: Sequence[Mapping[str, str]]) -> TopologyTree:
    """The tree of ``spec`` over nodes given by their labels, in session node order."""
    num_nodes = len(node_labels)
    inside = np.ones(num_nodes, dtype=bool)
    values: list[list[str | None]] = []
    for label in spec.levels:
        column = [labels.get(label) for labels in node_labels]
        inside &= np.fromiter((v is not None for v in column), dtype=bool, count=num_nodes)
        values.append(column)

    level_domain: list[IntArray] = []
    domain_ids: list[list[str]] = []
    domain_parent: list[IntArray] = []
    paths: list[str] = [""] * num_nodes
    for level, column in enumerate(values):
        index: dict[str, int] = {}
        ids: list[str] = []
        parents: list[int] = []
        assigned = np.full(num_nodes, -1, dtype=np.int64)
        for node in range(num_nodes):
            if not inside[node]:
                continue
            path = f"{paths[node]}.{column[node]}" if level else str(column[node])
            domain = index.get(path)
            if domain is None:
                domain = index[path] = len(ids)
                ids.append(path)
                parents.append(int(level_domain[level - 1][node]) if level else -1)
            assigned[node] = domain
            paths[node] = path
        level_domain.append(assigned)
        domain_ids.append(ids)
        domain_parent.append(np.asarray(parents, dtype=np.int64))
    return TopologyTree(
        name=spec.name,
        levels=list(spec.levels),
        aliases=dict(spec.aliases),
        inside=inside,
        level_domain=level_domain,
        domain_ids=domain_ids,
        domain_parent=domain_parent,
        domain_rank=[_ranks(ids) for ids in domain_ids],
    )


def _ranks(ids: list[str]) -> IntArray:
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return ranks


def build_topologies(
    specs: Sequence[TopologySpec], node_labels: Sequence[Mapping[str, str]]
) -> dict[str, TopologyTree]:
    return {spec.name: build_topology(spec, node_labels) for spec in specs}


@dataclass(frozen=True)
class ResolvedConstraint:
    """A constraint with its topology found and its levels turned into indexes (aliases resolved).

    ``preferred`` is dropped when it is not below ``required`` (a broader preferred level adds
    nothing to a required one)."""

    tree: TopologyTree
    required: int | None
    preferred: int | None

    def describe(self) -> str:
        parts = []
        if self.required is not None:
            parts.append(f"required level {self.tree.levels[self.required]}")
        if self.preferred is not None:
            parts.append(f"preferred level {self.tree.levels[self.preferred]}")
        return f"topology {self.tree.name} ({', '.join(parts)})"


def resolve_constraint(
    trees: Mapping[str, TopologyTree], constraint: TopologyConstraint
) -> ResolvedConstraint | None:
    """Find a constraint's topology and levels; None for a constraint that names no level."""
    tree = trees.get(constraint.topology)
    if tree is None:
        raise TopologyError(
            "TopologyDoesNotExist", f"Requested topology {constraint.topology!r} does not exist"
        )
    required = tree.level_index(constraint.required_level) if constraint.required_level else None
    preferred = tree.level_index(constraint.preferred_level) if constraint.preferred_level else None
    if required is not None and preferred is not None and preferred <= required:
        preferred = None
    if required is None and preferred is None:
        return None
    return ResolvedConstraint(tree=tree, required=required, preferred=preferred)


@dataclass(frozen=True)
class Candidate:
    """One candidate node set: a domain (``level`` index, ROOT_LEVEL for root) and its usable
    nodes (indexes in session node order, ascending)."""

    level: int
    domain: str
    nodes: IntArray
    packing_ratio: float


def _domain_sums(domain_of_node: IntArray, num_domains: int, matrix: FloatArray) -> FloatArray:
    """Per-domain column sums of ``matrix`` (nodes x resources) over nodes with domain >= 0."""
    keep = domain_of_node >= 0
    out = np.zeros((num_domains, matrix.shape[1]), dtype=np.float64)
    if num_domains == 0 or not keep.any():
        return out
    idx = domain_of_node[keep]
    rows = matrix[keep]
    for col in range(matrix.shape[1]):
        out[:, col] = np.bincount(idx, weights=rows[:, col], minlength=num_domains)
    return out


def _ratios(need: FloatArray, free: FloatArray) -> FloatArray:
    """Dominant share per row of ``free`` (domains x resources) that ``need`` would take."""
    wanted = need > _EPS
    if not wanted.any():
        return np.zeros(free.shape[0], dtype=np.float64)
    f = free[:, wanted]
    n = need[wanted]
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(f > _EPS, n / np.where(f > _EPS, f, 1.0), _ABSENT_RATIO)
    return np.asarray(shares.max(axis=1), dtype=np.float64)


def _homogeneous(requests: FloatArray) -> bool:
    """KAI's test: every task uses the same set of resources (all or none ask for GPUs, and the
    same extended resources)."""
    if requests.shape[0] <= 1:
        return True
    used = requests > _EPS
    return bool((used == used[0]).all())


def _fit_counts(free: FloatArray, representative: FloatArray) -> FloatArray:
    """How many copies of ``representative`` each node (row of ``free``) can hold."""
    wanted = representative > _EPS
    if not wanted.any():
        return np.full(free.shape[0], np.inf)
    per = np.floor((free[:, wanted] + _EPS) / representative[wanted])
    return np.asarray(np.clip(per.min(axis=1), 0, None), dtype=np.float64)


def _eligible_nodes(
    resolved: ResolvedConstraint, usable: BoolArray, running_nodes: Sequence[int], subject: str
) -> BoolArray:
    """The nodes a placement may use: allowed by the caller, inside the topology, and with a
    required level, inside the domains of the (sub)group's running tasks. Raises
    :class:`TopologyError` (``NoTopologyDomainFits``) when there is none."""
    tree = resolved.tree
    mask = usable & tree.inside
    required = resolved.required
    if required is not None and len(running_nodes):
        current = tree.level_domain[required][np.asarray(running_nodes, dtype=np.int64)]
        current = current[current >= 0]
        if current.size:
            mask = mask & np.isin(tree.level_domain[required], current)
    if not mask.any():
        raise TopologyError(
            "NoTopologyDomainFits",
            f"no usable node of {resolved.describe()} for {subject}: every node is outside the "
            "topology (missing a level label), filtered out, or outside its current domain",
        )
    return mask


def candidate_domains(
    resolved: ResolvedConstraint,
    usable: BoolArray,
    free: FloatArray,
    requests: FloatArray,
    running_nodes: Sequence[int] = (),
    subject: str = "the job",
) -> list[Candidate]:
    """Candidate node sets for tasks with ``requests`` (tasks x resources), best first.

    ``usable``: nodes the caller still allows (the parent's node set, predicates); ``free``:
    nodes x resources of idle + releasing capacity; ``running_nodes``: nodes of the (sub)group's
    active tasks — with a required level only their domains are eligible, so a running gang
    only grows where it already is. Raises :class:`TopologyError` (``NoTopologyDomainFits``) with
    a message naming ``subject`` when nothing fits.
    """
    tree = resolved.tree
    mask = _eligible_nodes(resolved, usable, running_nodes, subject)
    required, preferred = resolved.required, resolved.preferred
    count = requests.shape[0]
    need = requests.sum(axis=0)
    homogeneous = _homogeneous(requests)
    representative = requests.max(axis=0) if count else need
    node_counts = _fit_counts(free, representative) if homogeneous and count else None

    deepest = preferred if preferred is not None else required
    assert deepest is not None
    top = required if required is not None else ROOT_LEVEL

    # Tree order down to the deepest relevant level: a domain sorts by its parent's position,
    # then fullest first (highest packing ratio), then id — siblings fullest first, tree kept.
    position: list[IntArray] = []
    fits: list[npt.NDArray[np.bool_]] = []
    ratios: list[FloatArray] = []
    members: list[IntArray] = []
    for level in range(deepest + 1):
        domain_of = np.where(mask, tree.level_domain[level], -1)
        num = len(tree.domain_ids[level])
        inside = domain_of >= 0
        idx = domain_of[inside]
        sums = _domain_sums(domain_of, num, free)
        node_count = np.bincount(idx, minlength=num)
        ratio = _ratios(need, sums)
        if node_counts is not None:
            cap = np.bincount(idx, weights=np.minimum(node_counts[inside], count), minlength=num)
            fit = cap + _EPS >= count
        else:
            fit = ratio <= 1.0 + _EPS
        parent_pos = position[level - 1][tree.domain_parent[level]] if level else np.zeros(num)
        order = np.lexsort((tree.domain_rank[level], -ratio, parent_pos))
        pos = np.empty(num, dtype=np.int64)
        pos[order] = np.arange(num)
        position.append(pos)
        fits.append(fit & (node_count > 0))
        ratios.append(ratio)
        members.append(np.argsort(domain_of, kind="stable"))

    candidates: list[Candidate] = []
    for level in range(deepest, top - 1, -1):
        if level == ROOT_LEVEL:
            root_sums = free[mask].sum(axis=0, keepdims=True)
            root_ratio = float(_ratios(need, root_sums)[0])
            if node_counts is not None:
                ok = float(np.minimum(node_counts[mask], count).sum()) + _EPS >= count
            else:
                ok = root_ratio <= 1.0 + _EPS
            if ok:
                candidates.append(Candidate(ROOT_LEVEL, "root", np.flatnonzero(mask), root_ratio))
            continue
        chosen = np.flatnonzero(fits[level])
        chosen = chosen[np.argsort(position[level][chosen])]
        domain_of = np.where(mask, tree.level_domain[level], -1)
        # nodes grouped by domain, ascending node index inside each group
        sorted_nodes = members[level]
        bounds = np.searchsorted(domain_of[sorted_nodes], np.arange(-1, len(position[level]) + 1))
        for d in chosen.tolist():
            nodes = sorted_nodes[bounds[d + 1] : bounds[d + 2]]
            candidates.append(
                Candidate(level, tree.domain_ids[level][d], nodes, float(ratios[level][d]))
            )
    if not candidates:
        levels = ", ".join(tree.level_name(lv) for lv in range(deepest, top - 1, -1))
        raise TopologyError(
            "NoTopologyDomainFits",
            f"no domain of {resolved.describe()} has room for {subject} "
            f"({count} task(s)); levels tried: {levels}",
        )
    return candidates


def preferred_level_scores(
    resolved: ResolvedConstraint,
    candidate: Candidate,
    free: FloatArray,
    requests: FloatArray,
) -> FloatArray:
    """Node scores inside ``candidate`` that keep tasks within one preferred-level domain.

    The candidate's sub-domains at the preferred level, in fullest-first order ``i = 1..n``, give
    their nodes ``floor(10 * i / n) * 10_000``: the sub-domain with the most room scores highest,
    so the tasks gather there (KAI's topology node order). Nodes outside the candidate score 0.
    """
    tree = resolved.tree
    scores = np.zeros(tree.num_nodes, dtype=np.float64)
    preferred = resolved.preferred
    if preferred is None or candidate.level > preferred or candidate.nodes.size == 0:
        return scores
    domain_of = np.full(tree.num_nodes, -1, dtype=np.int64)
    domain_of[candidate.nodes] = tree.level_domain[preferred][candidate.nodes]
    num = len(tree.domain_ids[preferred])
    sums = _domain_sums(domain_of, num, free)
    ratio = _ratios(requests.sum(axis=0), sums)
    subs = np.unique(domain_of[domain_of >= 0])
    ordered = sorted(subs.tolist(), key=lambda d: (-float(ratio[d]), tree.domain_ids[preferred][d]))
    n = len(ordered)
    for i, d in enumerate(ordered, start=1):
        scores[domain_of == d] = float(np.floor(10 * i / n) * 10_000)
    return scores


def domains_of(tree: TopologyTree, level: int, nodes: Sequence[int]) -> set[str]:
    """Ids of the level-``level`` domains the given nodes belong to ("<outside>" for a node
    outside the topology) — e.g. to check that a required-level job spans one domain."""
    out: set[str] = set()
    for node in nodes:
        d = int(tree.level_domain[level][node])
        out.add(tree.domain_ids[level][d] if d >= 0 else "<outside>")
    return out
