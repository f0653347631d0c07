"""Label selector semantics, in one place for node affinity (over node labels) and pod
(anti-)affinity (over pod labels): Kubernetes' operators In, NotIn, Exists, DoesNotExist, and
Gt/Lt (node affinity only). A missing label has the value None."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kai.scheduler.snapshot import Requirement

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NODE_SELECTOR_OPERATORS = (*SELECTOR_OPERATORS, "Gt", "Lt")


def value_matches(req: Requirement, value: str | None) -> bool:
    """Whether a label whose value is ``value`` (None: absent) satisfies ``req``."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            bound = int(req.values[0])
            number = int(value) if value is not None else None
        except (IndexError, ValueError):
            return False
        return number is not None and (number > bound if op == "Gt" else number < bound)
    raise ValueError(
        f"label selector operator {op!r} is not one of {', '.join(NODE_SELECTOR_OPERATORS)}"
    )


def selector_matches(
    labels: Mapping[str, str],
    match_labels: Iterable[tuple[str, str]],
    expressions: Iterable[Requirement],
) -> bool:
    """A label selector: every ``matchLabels`` pair and every expression hold (an empty
    selector selects everything)."""
    return all(labels.get(k) == v for k, v in match_labels) and all(
        value_matches(req, labels.get(req.key)) for req in expressions
    )
