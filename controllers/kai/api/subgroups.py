"""The rules KAI's PodGroup webhook enforces on ``spec.subGroups``, as one pure function.

Used by the PodGroup model (errors make the object invalid) and by admission (which also reports
the warnings, and is stricter on CREATE than on UPDATE, as KAI is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["SubGroupProblem", "SubGroupRow", "subgroup_problems"]

# name, parent, minMember, minSubGroup
SubGroupRow = tuple[str, str | None, int | None, int | None]


@dataclass(frozen=True)
class SubGroupProblem:
    """One violation: the field path under ``spec``, a message, and its severity."""

    path: str
    message: str
    severity: Literal["error", "warning"]


def _cycle_members(rows: Sequence[SubGroupRow], index: dict[str, int]) -> list[list[int]]:
    """Each cycle of the parent relation once, as row indices, ordered by first row."""
    cycles: list[list[int]] = []
    done: set[int] = set()
    for start in range(len(rows)):
        path: list[int] = []
        on_path: set[int] = set()
        node: int | None = start
        while node is not None and node not in done and node not in on_path:
            path.append(node)
            on_path.add(node)
            parent = rows[node][1]
            node = index.get(parent) if parent is not None else None
        if node is not None and node in on_path:
            cycle = path[path.index(node) :]
            cycles.append(sorted(cycle))
        done.update(path)
    return sorted(cycles)


def subgroup_problems(
    min_member: int | None,
    min_subgroup: int | None,
    rows: Sequence[SubGroupRow],
    operation: Literal["CREATE", "UPDATE"] = "UPDATE",
) -> list[SubGroupProblem]:
    """Check a PodGroup's gang thresholds and subgroup tree; errors first, then warnings."""
    out = _Findings()
    if min_member is not None and min_subgroup is not None:
        out.error("minSubGroup", "set either minMember or minSubGroup, not both")
    children = _tree_problems(rows, out)
    for i, row in enumerate(rows):
        _threshold_problems(i, row, children, operation, out)
    if min_subgroup is not None:
        direct = children.get(None, 0)
        if not rows and min_subgroup > 0:
            out.warn("minSubGroup", "minSubGroup has no effect without subGroups")
        elif rows and min_subgroup > direct:
            out.warn(
                "minSubGroup",
                f"minSubGroup {min_subgroup} is more than the {direct} direct child subgroups",
            )
    return out.errors + out.warnings


class _Findings:
    def __init__(self) -> None:
        self.errors: list[SubGroupProblem] = []
        self.warnings: list[SubGroupProblem] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(SubGroupProblem(path, message, "error"))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(SubGroupProblem(path, message, "warning"))


def _tree_problems(rows: Sequence[SubGroupRow], out: _Findings) -> dict[str | None, int]:
    """Duplicate names, unknown parents and cycles; returns the child count by parent name."""
    index: dict[str, int] = {}
    for i, (name, _, _, _) in enumerate(rows):
        if name in index:
            out.error(
                f"subGroups[{i}].name",
                f"subgroup name {name!r} is already used by subGroups[{index[name]}]",
            )
        else:
            index[name] = i
    children: dict[str | None, int] = {}
    for i, (name, parent, _, _) in enumerate(rows):
        if parent is not None and parent not in index:
            out.error(
                f"subGroups[{i}].parent",
                f"subgroup {name!r} names parent {parent!r}, which is not a subgroup"
                " of this PodGroup",
            )
        children[parent] = children.get(parent, 0) + 1
    for cycle in _cycle_members(rows, index):
        names = " -> ".join(rows[i][0] for i in cycle)
        out.error(
            f"subGroups[{cycle[0]}].parent",
            f"subgroups form a cycle through their parents: {names}",
        )
    return children


def _threshold_problems(
    i: int,
    row: SubGroupRow,
    children: dict[str | None, int],
    operation: Literal["CREATE", "UPDATE"],
    out: _Findings,
) -> None:
    """A leaf needs minMember; a subgroup with children is gated by minSubGroup."""
    name, _, member, subgroup = row
    if member is not None and subgroup is not None:
        out.error(
            f"subGroups[{i}].minSubGroup",
            f"subgroup {name!r}: set either minMember or minSubGroup, not both",
        )
        return
    if children.get(name, 0) == 0:
        if member is None:
            out.error(
                f"subGroups[{i}].minMember",
                f"leaf subgroup {name!r} needs minMember (0 makes it fully elastic)",
            )
        if subgroup is not None:
            out.error(
                f"subGroups[{i}].minSubGroup",
                f"leaf subgroup {name!r} has no child subgroups, so minSubGroup does not apply",
            )
        return
    if member is not None:
        message = (
            f"subgroup {name!r} has child subgroups, so its minMember is ignored; use minSubGroup"
        )
        if operation == "CREATE":
            out.error(f"subGroups[{i}].minMember", message)
        else:
            out.warn(f"subGroups[{i}].minMember", message)
    if subgroup is not None and subgroup > children.get(name, 0):
        out.warn(
            f"subGroups[{i}].minSubGroup",
            f"minSubGroup {subgroup} is more than the {children.get(name, 0)}"
            f" child subgroups of {name!r}",
        )
