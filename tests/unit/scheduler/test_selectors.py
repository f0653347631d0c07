"""Label selector semantics shared by node affinity and pod (anti-)affinity."""

from __future__ import annotations

import pytest

from kai.scheduler.pod_affinity import matches
from kai.scheduler.selectors import selector_matches, value_matches
from kai.scheduler.snapshot import PodAffinityTerm, Requirement


@pytest.mark.parametrize(
    ("op", "values", "value", "expected"),
    [
        ("In", ("a", "b"), "a", True),
        ("In", ("a",), None, False),
        ("NotIn", ("a",), "b", True),
        ("NotIn", ("a",), None, True),
        ("NotIn", ("a",), "a", False),
        ("Exists", (), "", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("DoesNotExist", (), "x", False),
        ("Gt", ("3",), "4", True),
        ("Gt", ("3",), "3", False),
        ("Lt", ("3",), "x", False),
    ],
)
def test_operators(op: str, values: tuple[str, ...], value: str | None, expected: bool) -> None:
    assert value_matches(Requirement("k", op, values), value) is expected


def test_unknown_operator_is_named() -> None:
    with pytest.raises(ValueError, match="'Like'"):
        value_matches(Requirement("k", "Like"), "x")


def test_selector_ands_labels_and_expressions() -> None:
    labels = {"app": "web", "tier": "front"}
    assert selector_matches(labels, [("app", "web")], [Requirement("tier", "In", ("front",))])
    assert not selector_matches(
        labels, [("app", "web")], [Requirement("tier", "NotIn", ("front",))]
    )
    assert selector_matches(labels, [], [])  # an empty selector selects everything


def test_affinity_term_with_only_expressions_does_not_match_everything() -> None:
    term = PodAffinityTerm("zone", (), (Requirement("app", "In", ("db",)),))
    assert matches({"app": "db"}, term)
    assert not matches({"app": "web"}, term)
    assert not matches({"app": "db"}, PodAffinityTerm("zone", (), (), selects_nothing=True))
    assert matches({"app": "web"}, PodAffinityTerm("zone", ()))
