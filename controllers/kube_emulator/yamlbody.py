"""YAML request bodies, loaded with the limits a real API server applies.

A YAML document can name a node once (``&a``) and repeat it (``*a``) any number of times; ten
levels of ten aliases make a 10^10-node document out of a few hundred bytes (a "billion laughs"
bomb). PyYAML shares the repeated objects, so loading is cheap, but everything that walks the
result afterwards (storing, serialising, every later GET or LIST) pays the expanded size. The
real server's YAML decoder refuses such documents ("excessive aliasing"); so does this one: the
expanded size of the document is counted on the composed node graph (each node once) before
anything is built from it.
"""

from __future__ import annotations

from typing import Any

import yaml

# The expanded node count a body may reach: far above any real object (a body is at most
# 3 MiB, i.e. at most ~1.5 M nodes when written without aliases), far below a bomb.
MAX_EXPANDED_NODES = 2_000_000


class YamlBodyError(ValueError):
    """The body is not YAML, or expands beyond the limit."""


def _expanded(node: yaml.Node, memo: dict[int, int], budget: int) -> int:
    """The number of nodes ``node`` stands for once every alias is expanded (stops counting
    once ``budget`` is exceeded). Iterative: a deeply nested document cannot overflow the
    stack."""
    # post-order over the graph; a node met again (an alias) costs its memoised size
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        if key in memo:
            continue
        children: list[yaml.Node] = []
        if isinstance(current, yaml.SequenceNode):
            children = list(current.value)
        elif isinstance(current, yaml.MappingNode):
            children = [n for pair in current.value for n in pair]
        if done:
            total = 1 + sum(memo[id(c)] for c in children)
            memo[key] = min(total, budget + 1)
            continue
        stack.append((current, True))
        stack.extend((c, False) for c in children if id(c) not in memo)
    return memo[id(node)]


def load_yaml(raw: bytes | str, max_nodes: int = MAX_EXPANDED_NODES) -> Any:
    """The first document of ``raw`` as Python data; :class:`YamlBodyError` if it is not YAML
    or if its aliases expand it beyond ``max_nodes`` nodes."""
    try:
        node = yaml.compose(raw, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise YamlBodyError(str(exc)) from exc
    if node is None:
        return None
    if _expanded(node, {}, max_nodes) > max_nodes:
        raise YamlBodyError(
            f"document contains excessive aliasing: it expands to more than {max_nodes} nodes"
        )
    loader = yaml.SafeLoader(raw)
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlBodyError(str(exc)) from exc
    finally:
        loader.dispose()
