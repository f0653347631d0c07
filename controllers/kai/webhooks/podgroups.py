"""The PodGroup webhook: KAI's subgroup rules plus topology constraints that can be met.

- ``spec.subGroups``: names unique, every ``parent`` a subgroup of the PodGroup, no cycles,
  ``minMember`` / ``minSubGroup`` where they apply (:func:`kai.api.subgroups.subgroup_problems`,
  the rules of KAI's webhook; stricter on CREATE than on UPDATE, as KAI is);
- every ``topologyConstraint`` (the PodGroup's and each subgroup's) names a Topology (or a
  TopologyPolicy, which compiles into one) that exists, and its required / preferred level is
  one of that topology's node labels or aliases.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from kai.api.subgroups import SubGroupRow, subgroup_problems
from kai.webhooks.cluster import ClusterView
from kai.webhooks.review import Request, Verdict

__all__ = ["PodGroupValidator"]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class PodGroupValidator:
    #: what the API server sends to this webhook (its registration's rules)
    kinds = frozenset({("scheduling.run.ai", "PodGroup")})

    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster

    def __call__(self, req: Request) -> Verdict:
        pg = req.object
        if pg is None or req.operation not in ("CREATE", "UPDATE"):
            return Verdict()
        spec = pg.get("spec") or {}
        rows: list[SubGroupRow] = []
        constraints: list[tuple[str, Any]] = [
            ("topologyConstraint", spec.get("topologyConstraint"))
        ]
        for i, sub in enumerate(spec.get("subGroups") or []):
            if not isinstance(sub, dict):
                continue
            parent = sub.get("parent")
            rows.append(
                (
                    str(sub.get("name") or ""),
                    str(parent) if parent else None,
                    _int(sub.get("minMember")),
                    _int(sub.get("minSubGroup")),
                )
            )
            constraints.append(
                (f"subGroups[{i}].topologyConstraint", sub.get("topologyConstraint"))
            )
        operation = cast(Literal["CREATE", "UPDATE"], req.operation)
        found = subgroup_problems(
            _int(spec.get("minMember")), _int(spec.get("minSubGroup")), rows, operation
        )
        errors = [f"spec.{p.path}: {p.message}" for p in found if p.severity == "error"]
        warnings = [
            f"{req.label} spec.{p.path}: {p.message}" for p in found if p.severity == "warning"
        ]
        for path, constraint in constraints:
            problem = self._topology_problem(constraint)
            if problem:
                errors.append(f"spec.{path}: {problem}")
        if errors:
            return Verdict.deny(f"{req.label}: " + "; ".join(errors), warnings=warnings)
        return Verdict(warnings=warnings)

    def _topology_problem(self, constraint: Any) -> str | None:
        if not isinstance(constraint, dict):
            return None
        name = constraint.get("topology")
        levels = [
            (key, constraint.get(key))
            for key in ("requiredTopologyLevel", "preferredTopologyLevel")
            if constraint.get(key)
        ]
        if not name:
            if levels:
                return f"{levels[0][0]} is set but no topology is named (set topology)"
            return None
        known = self.cluster.topology_levels(str(name))
        if known is None:
            known = self.cluster.topology_levels(str(name), fresh=True)
        if known is None:
            return f"topology {name!r} does not exist (no Topology or TopologyPolicy of that name)"
        names = {label for label, _ in known} | {alias for _, alias in known if alias}
        for key, level in levels:
            if level not in names:
                listed = ", ".join(
                    label + (f" ({alias})" if alias else "") for label, alias in known
                )
                return f"{key} {level!r} is not a level of topology {name!r}; its levels: {listed}"
        return None
