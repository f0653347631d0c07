"""KAI's Topology (``kai.scheduler/v1alpha1``): the ordered node-label levels of a data centre."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from kai.api.base import KaiModel, TopLevelObject, cel, cel_rules
from kai.api.types import LabelKey

__all__ = [
    "HOSTNAME_LABEL",
    "MAX_LEVELS",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "level_list_schema",
    "topology_problems",
    "topology_update_problems",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_LEVELS = 16

_IMMUTABLE_LABELS = cel(
    "self.map(l, l.nodeLabel) == oldSelf.map(l, l.nodeLabel)",
    "the sequence of nodeLabels is immutable; only aliases may be edited",
)
_LEVEL_CHECKS = (
    cel(
        "self.all(l, self.filter(m, m.nodeLabel == l.nodeLabel).size() == 1)",
        "each nodeLabel may appear only once",
    ),
    cel(
        f"self.all(l, l.nodeLabel != '{HOSTNAME_LABEL}')"
        f" || self[self.size() - 1].nodeLabel == '{HOSTNAME_LABEL}'",
        f"{HOSTNAME_LABEL} may only be the last (lowest) level",
    ),
    cel(
        "self.filter(l, has(l.alias))"
        ".all(l, self.filter(m, has(m.alias) && m.alias == l.alias).size() == 1)",
        "each alias may appear only once",
    ),
    cel(
        "self.filter(l, has(l.alias)).all(l, !self.exists(m, m.nodeLabel == l.alias))",
        "an alias must not be equal to any nodeLabel of the same Topology",
    ),
)


def level_list_schema(*, immutable: bool) -> dict[str, Any]:
    """``json_schema_extra`` for a list of levels: the CEL rules and an atomic list type.

    Shared with the TopologyPolicy document (which may change its levels: ``immutable=False``).
    The rules expect items with ``nodeLabel`` and an optional ``alias``, and a list capped at
    16 items so their cost stays within the API server's budget.
    """
    rules = ((_IMMUTABLE_LABELS,) if immutable else ()) + _LEVEL_CHECKS
    return {**cel_rules(*rules), "x-kubernetes-list-type": "atomic"}


class TopologyLevel(KaiModel):
    """One level of the topology, named by the node label that identifies its domains."""

    nodeLabel: LabelKey
    """The node label whose value names this level's domain, e.g. topology.kubernetes.io/zone."""
    alias: LabelKey | None = None
    """A short name workloads may use instead of nodeLabel, e.g. rack."""


class TopologySpec(KaiModel):
    """The levels of a Topology."""

    levels: Annotated[
        list[TopologyLevel],
        Field(
            min_length=1,
            max_length=MAX_LEVELS,
            json_schema_extra=level_list_schema(immutable=True),
        ),
    ]
    """1 to 16 levels, widest first (e.g. zone, block, rack, host). The nodeLabel sequence cannot
    change once created; kubernetes.io/hostname may only be the last level."""

    @model_validator(mode="after")
    def check_levels(self) -> TopologySpec:
        problems = topology_problems(self)
        if problems:
            raise ValueError("; ".join(f"{path}: {message}" for path, message in problems))
        return self


def topology_problems(spec: TopologySpec) -> list[tuple[str, str]]:
    """Rule violations as ``(field path under spec, message)``, in level order."""
    problems: list[tuple[str, str]] = []
    labels = [level.nodeLabel for level in spec.levels]
    first_label: dict[str, int] = {}
    first_alias: dict[str, int] = {}
    for i, level in enumerate(spec.levels):
        if level.nodeLabel in first_label:
            problems.append(
                (
                    f"levels[{i}].nodeLabel",
                    f"nodeLabel {level.nodeLabel!r} is already used by"
                    f" levels[{first_label[level.nodeLabel]}]",
                )
            )
        else:
            first_label[level.nodeLabel] = i
        if level.nodeLabel == HOSTNAME_LABEL and i != len(spec.levels) - 1:
            problems.append(
                (f"levels[{i}].nodeLabel", f"{HOSTNAME_LABEL} may only be the last (lowest) level")
            )
        if level.alias is None:
            continue
        if level.alias in first_alias:
            problems.append(
                (
                    f"levels[{i}].alias",
                    f"alias {level.alias!r} is already used by levels[{first_alias[level.alias]}]",
                )
            )
        else:
            first_alias[level.alias] = i
        if level.alias in labels:
            problems.append(
                (
                    f"levels[{i}].alias",
                    f"alias {level.alias!r} equals the nodeLabel of"
                    f" levels[{labels.index(level.alias)}]",
                )
            )
    return problems


def topology_update_problems(old: TopologySpec, new: TopologySpec) -> list[tuple[str, str]]:
    """Problems of an update: the nodeLabel sequence may not change (aliases may)."""
    old_labels = [level.nodeLabel for level in old.levels]
    new_labels = [level.nodeLabel for level in new.levels]
    if old_labels == new_labels:
        return []
    return [
        (
            "levels",
            f"the sequence of nodeLabels is immutable (was {old_labels}, now {new_labels});"
            " create a new Topology instead",
        )
    ]


class Topology(TopLevelObject):
    """A named data-centre topology: node-label levels from the widest domain to the narrowest.

    Workloads refer to it by name in their topology constraints to be packed within a domain.
    """

    API_GROUP: ClassVar[str] = "kai.scheduler"
    API_VERSION: ClassVar[str] = "v1alpha1"
    KIND: ClassVar[str] = "Topology"
    PLURAL: ClassVar[str] = "topologies"
    SCOPE: ClassVar[str] = "Cluster"

    spec: TopologySpec
    """The levels of the topology."""
