"""The embedded server's YAML alias check against a plain model of go-yaml v2's decoder.

go-yaml counts every node it decodes and, separately, those decoded through an alias; after
every single decode it refuses the document once the aliased share passes its allowed ratio.
``kube_emulator.yamlbody.check_aliasing`` visits each node once and checks alias expansions
only at their end; here the model expands every alias node by node, checking after each
decode, and the two must agree on every generated document.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kube_emulator.yamlbody import (
    YamlBodyError,
    _allowed_alias_ratio,
    check_aliasing,
    load_yaml,
)


class _Refused(Exception):
    pass


def _decode(
    root: yaml.Node,
    count: Callable[[int], None],
    children: Callable[[yaml.Node], list[yaml.Node]],
) -> None:
    """Decode in document order: a node met for the first time is its anchor (decoded in
    place); met again, it is an alias: the alias node, then its value in full, every node of
    it (aliases inside included) counted as aliased."""
    first: set[int] = set()

    def plain(node: yaml.Node, depth: int) -> None:
        first.add(id(node))
        count(depth)
        for child in children(node):
            edge(child, depth)

    def edge(child: yaml.Node, depth: int) -> None:
        if id(child) in first:
            count(depth)
            replay(child, depth + 1)
        else:
            plain(child, depth)

    # within an expansion, the anchored value's own structure is replayed: its inner aliases
    # are the edges that were aliases where it was defined
    alias_edge: set[tuple[int, int]] = set()
    defined: set[int] = set()

    def record(node: yaml.Node) -> None:
        defined.add(id(node))
        for child in children(node):
            if id(child) in defined:
                alias_edge.add((id(node), id(child)))
            else:
                record(child)

    record(root)

    def replay(node: yaml.Node, depth: int) -> None:
        count(depth)
        for child in children(node):
            if (id(node), id(child)) in alias_edge:
                count(depth)
            replay(child, depth)

    plain(root, 0)


def _reference_refuses(root: yaml.Node) -> bool:
    """go-yaml v2's counting, literally: every alias expanded node by node, a check after each
    decode."""
    counts = {"decoded": 0, "aliased": 0}

    def count(depth: int) -> None:
        counts["decoded"] += 1
        if depth > 0:
            counts["aliased"] += 1
        d, a = counts["decoded"], counts["aliased"]
        if a > 100 and d > 1000 and a / d > _allowed_alias_ratio(d):
            raise _Refused

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    count(0)  # the document node
    try:
        _decode(root, count, children)
    except _Refused:
        return True
    return False


@st.composite
def alias_documents(draw: st.DrawFn) -> str:
    """Anchored sequences, each made of scalars and aliases of the anchor before it, then
    repeated aliases and plain entries: from harmless documents to a few levels of "billion
    laughs", many of them near go-yaml's thresholds."""
    levels = draw(st.integers(1, 5))
    share = draw(st.sampled_from([0.0, 0.5, 0.8, 1.0]))  # of items that are aliases
    lines = []
    for i in range(levels):
        width = draw(st.integers(1, 10))
        items = [f"*a{i - 1}" if i and draw(st.floats(0, 1)) < share else "x" for _ in range(width)]
        lines.append(f"a{i}: &a{i} [{', '.join(items)}]")
    target = draw(st.integers(0, levels - 1))
    lines += [f"r{j}: *a{target}" for j in range(draw(st.integers(0, 120)))]
    lines += [f"p{j}: v" for j in range(draw(st.integers(0, 700)))]
    return "\n".join(lines) + "\n"


_NESTED = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 4)
)


@settings(max_examples=100, deadline=None)
@given(alias_documents())
@example(_NESTED)  # refused (four levels of nine)
@example(_NESTED.rsplit("a3:", 1)[0])  # accepted (three levels)
@example("a: &a x\n" + "".join(f"b{i}: *a\n" for i in range(1000)))  # flat: accepted
def test_the_one_pass_check_agrees_with_go_yamls_counting(doc: str) -> None:
    root = yaml.compose(doc, Loader=yaml.SafeLoader)
    expected = _reference_refuses(root)
    try:
        check_aliasing(root)
    except YamlBodyError as exc:
        assert expected, f"refused, go-yaml accepts: {exc}"
        assert "excessive aliasing" in str(exc)
        return
    assert not expected, "accepted, go-yaml refuses"


def test_the_thresholds() -> None:
    # at most 100 aliased decodes, or at most 1,000 decodes: always accepted
    few = "a: &a x\n" + "".join(f"b{i}: *a\n" for i in range(100)) + "c: [" + "x, " * 900 + "x]\n"
    load_yaml(few)
    # a nested bomb: refused, quickly
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
    )
    with pytest.raises(YamlBodyError, match="excessive aliasing"):
        load_yaml(bomb)
    assert _allowed_alias_ratio(400_000) == 0.99
    assert _allowed_alias_ratio(4_000_000) == 0.10
    assert _allowed_alias_ratio(2_200_000) == pytest.approx(0.545)


def test_merge_keys_load_and_recursion_is_refused() -> None:
    assert load_yaml("base: &b {x: 1}\nc: {<<: *b, y: 2}\n") == {
        "base": {"x": 1},
        "c": {"x": 1, "y": 2},
    }
    with pytest.raises(YamlBodyError, match="contains itself"):
        load_yaml("a: &a [*a]\n")
