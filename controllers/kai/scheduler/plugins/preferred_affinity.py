"""Preferred (soft) node affinity and pod (anti-)affinity as node scores.

KAI scores preferred pod affinity with Kubernetes' InterPodAffinity score (the raw sum of the
matching terms' weights, times ``K8S_PLUGINS``) and leaves preferred node affinity out; kai
scores preferred node affinity the same way (the raw sum of the weights of the preferred terms
a node satisfies, times ``K8S_PLUGINS``), so a weight means the same in both kinds of term and
a fitting preferred node wins over KAI's own node order (binpack, spread, availability).

A task without preferred terms pays nothing: the node scorer does not score its class, and the
task scorer is not active in a session where no task has preferred pod terms.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from kai.scheduler import scoring
from kai.scheduler.framework import ClassView, NodeScorer, RowScore, ScoreRows, TaskScorer
from kai.scheduler.pod_affinity import preferred_scores
from kai.scheduler.predicates import preferred_node_score
from kai.scheduler.resource_layout import FloatArray
from kai.scheduler.snapshot import TaskSpec

if TYPE_CHECKING:
    from kai.scheduler.jobs import TaskInfo
    from kai.scheduler.session import Session


def _node_affinity(view: ClassView) -> RowScore | None:
    terms = view.spec.preferred_node_affinity
    if not terms:
        return None
    static = preferred_node_score(view.labels, terms, len(view.nodes))  # labels only: per class

    def score(rows: ScoreRows) -> FloatArray:
        return static[rows.rows]

    return score


def _node_affinity_key(spec: TaskSpec) -> Hashable:
    return spec.preferred_node_affinity


def _pod_affinity_active(session: Session) -> bool:
    return session.uses_preferred_pod_affinity


def _pod_affinity_scores(session: Session, task: TaskInfo) -> FloatArray | None:
    spec = task.spec
    placed = session.placed_pods
    if not (
        spec.preferred_pod_affinity
        or spec.preferred_pod_anti_affinity
        or placed.any_preferred_terms()
    ):
        return None
    return preferred_scores(spec, placed, session.engine.labels.domains)


PREFERRED_NODE_AFFINITY = NodeScorer(
    "nodeaffinity", scoring.K8S_PLUGINS, _node_affinity, class_key=_node_affinity_key
)
PREFERRED_POD_AFFINITY = TaskScorer(
    "podaffinity", scoring.K8S_PLUGINS, _pod_affinity_active, _pod_affinity_scores
)
