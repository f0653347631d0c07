"""Property tests: random queue trees, checked against a simple re-computation of the sums.

Each tree is written out as a QueueTree YAML document and goes through the whole path (loader,
schema, records, rules); the verdicts of ``limit-below-quota``, ``children-quota-sum`` and
``child-quota-over-parent-limit`` (and the ``child-limit-over-parent-limit`` warning) must
equal the ones computed here directly from the generated numbers with exact fractions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.gitops.loader import load_text
from kai.gitops.validate import validate

RESOURCES = ("gpu", "cpu", "memory")
CHECKED = {
    "limit-below-quota",
    "children-quota-sum",
    "child-quota-over-parent-limit",
    "child-limit-over-parent-limit",
}


@dataclass
class Node:
    name: str
    quota: dict[str, tuple[Fraction, str]] = field(default_factory=dict)  # exact value, YAML text
    limit: dict[str, tuple[Fraction, str]] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)


def amount(resource: str) -> st.SearchStrategy[tuple[Fraction, str]]:
    """-1 or a non-negative amount in a unit the resource is often written in."""
    unlimited = st.just((Fraction(-1), "-1"))
    if resource == "gpu":
        tenths = st.integers(0, 40).map(
            lambda n: (Fraction(n, 10), str(Fraction(n, 10).__float__()))
        )
        return st.one_of(unlimited, tenths)
    if resource == "cpu":
        millis = st.integers(0, 8000).map(lambda n: (Fraction(n, 1000), f'"{n}m"'))
        cores = st.integers(0, 8).map(lambda n: (Fraction(n), f'"{n}"'))
        return st.one_of(unlimited, millis, cores)
    mebi = st.integers(0, 4096).map(lambda n: (Fraction(n * 2**20), f"{n}Mi"))
    gibi = st.integers(0, 4).map(lambda n: (Fraction(n * 2**30), f"{n}Gi"))
    return st.one_of(unlimited, mebi, gibi)


def amounts() -> st.SearchStrategy[dict[str, tuple[Fraction, str]]]:
    return st.fixed_dictionaries({}, optional={r: amount(r) for r in RESOURCES})


@st.composite
def trees(draw: st.DrawFn) -> list[Node]:
    counter = iter(range(1000))

    def node(depth: int) -> Node:
        made = Node(f"q{next(counter)}", draw(amounts()), draw(amounts()))
        if depth < 3:
            made.children = [node(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        return made

    return [node(0) for _ in range(draw(st.integers(1, 3)))]


def to_yaml(roots: list[Node]) -> str:
    lines = [
        "apiVersion: gitops.kai.scheduler/v1alpha1",
        "kind: QueueTree",
        "metadata: {name: random}",
        "spec:",
        "  queues:",
    ]

    def emit(node: Node, indent: str) -> None:
        lines.append(f"{indent}- name: {node.name}")
        for kind in ("quota", "limit"):
            values = getattr(node, kind)
            if values:
                body = ", ".join(f"{r}: {text}" for r, (_, text) in values.items())
                lines.append(f"{indent}  {kind}: {{{body}}}")
        if node.children:
            lines.append(f"{indent}  children:")
            for child in node.children:
                emit(child, indent + "  ")

    for root in roots:
        emit(root, "  ")
    return "\n".join(lines) + "\n"


def expected_verdicts(roots: list[Node]) -> set[tuple[str, str, str]]:
    """(rule, queue, resource), computed directly from the definitions in gitops-format.md."""
    out: set[tuple[str, str, str]] = set()

    def quota(node: Node, r: str) -> Fraction:
        return node.quota.get(r, (Fraction(0), ""))[0]

    def limit(node: Node, r: str) -> Fraction:
        return node.limit.get(r, (Fraction(-1), ""))[0]

    def walk(node: Node) -> None:
        for r in RESOURCES:
            q, lim = quota(node, r), limit(node, r)
            if lim != -1 and (q == -1 or q > lim):
                out.add(("limit-below-quota", node.name, r))
            if node.children and q != -1:
                total = sum(
                    (q if quota(c, r) == -1 else quota(c, r) for c in node.children), Fraction(0)
                )
                if total > q:
                    out.add(("children-quota-sum", node.name, r))
            if lim != -1:
                for child in node.children:
                    cq = quota(child, r)
                    if cq == -1 or cq > lim:
                        out.add(("child-quota-over-parent-limit", child.name, r))
                    cl = limit(child, r)
                    if cl != -1 and cl > lim:
                        out.add(("child-limit-over-parent-limit", child.name, r))
        for child in node.children:
            walk(child)

    for root in roots:
        walk(root)
    return out


PATH = re.compile(r"\((?P<name>q\d+)\) (?:quota|limit)\.(?P<resource>gpu|cpu|memory)$")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_rules_agree_with_a_direct_computation(roots: list[Node]) -> None:
    text = to_yaml(roots)
    problems = validate(load_text(text, "random.yaml")).problems
    assert {p.rule for p in problems} <= CHECKED, [p.text() for p in problems]
    reported = set()
    for problem in problems:
        match = PATH.search(problem.path or "")
        assert match, problem.text()
        reported.add((problem.rule, match["name"], match["resource"]))
        # Every problem points into the file at a line that exists.
        assert 1 <= problem.line <= text.count("\n")
    assert reported == expected_verdicts(roots)
    # One problem per (rule, queue, resource): nothing reported twice.
    assert len(problems) == len(reported)
