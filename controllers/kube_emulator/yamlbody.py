"""YAML request bodies, loaded with the limits a real API server applies.

A YAML document can name a node once (``&a``) and repeat it (``*a``) any number of times: ten
levels of ten aliases make a 10^10-node document out of a few hundred bytes (a "billion laughs"
bomb), and one 1 MiB string repeated 3,000 times makes 3 GB of a 1 MB body. PyYAML shares the
repeated objects, so loading is cheap, but everything that walks the result afterwards
(validating, storing, every later GET or LIST) pays the expanded size.

Two limits, both counted on the composed node graph (each node once) before anything is built:

- the real server's YAML decoder (go-yaml v2, used through sigs.k8s.io/yaml) refuses a document
  when too large a share of the nodes it decodes come from alias expansion ("document contains
  excessive aliasing"); the same rule, with the same counts and thresholds, is applied here, so
  the two servers accept and refuse the same alias-heavy documents;
- the bytes a document expands to: a document that expands past :data:`MAX_EXPANDED_BYTES` is
  refused (413) before it is built. Below that, the object goes through the usual checks, which
  refuse what the real server refuses (a ConfigMap's 1 MiB, the store's object size).
"""

from __future__ import annotations

from typing import Any

import yaml

from kube_emulator.errors import ApiError, bad_request

# go-yaml v2 (decode.go): the share of decoded nodes that may come from aliases, 99 % for
# documents of up to 400,000 decoded nodes, falling to 10 % at 4,000,000
_ALIAS_RATIO_LOW = 400_000
_ALIAS_RATIO_HIGH = 4_000_000

# The expanded size a body may reach: over five times the largest object any store accepts
# (etcd's 1.5 MiB; the request body itself is at most 3 MiB), far below a bomb.
MAX_EXPANDED_BYTES = 16 * 1024 * 1024

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlBodyError(ValueError):
    """The body is not YAML, or its aliases make it too large (``too_large``: a 413)."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def yaml_body_error(exc: YamlBodyError, apply: bool = False) -> ApiError:
    """The ``ApiError`` for a refused YAML body: 413 past the expanded size, else 400 worded as
    the real server words it (for an apply patch: "error decoding YAML: ...")."""
    if exc.too_large:
        return ApiError(413, f"Request entity too large: {exc}", "RequestEntityTooLarge")
    if apply:
        return bad_request(f"error decoding YAML: error converting YAML to JSON: {exc}")
    return bad_request(f"the request body is not valid YAML: {exc}")


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_RATIO_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_HIGH:
        return 0.10
    span = _ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW
    return 0.99 - 0.89 * ((decoded - _ALIAS_RATIO_LOW) / span)


def _excessive(decoded: int, aliased: int) -> bool:
    return aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded)


def _edges(node: yaml.Node) -> list[yaml.Node]:
    """The children go-yaml decodes, in document order: a merge key (``<<``) is not decoded
    itself, nor is a sequence of merged mappings (its items are)."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        out: list[yaml.Node] = []
        for key, value in node.value:
            if key.tag == _MERGE_TAG:
                out.extend(value.value if isinstance(value, yaml.SequenceNode) else [value])
            else:
                out += (key, value)
        return out
    return []


def check_aliasing(root: yaml.Node, max_bytes: int = MAX_EXPANDED_BYTES) -> None:
    """Refuse ``root`` as the real server's decoder would (excessive aliasing, an anchor that
    contains itself), or when it expands past ``max_bytes``; each node is visited once.

    go-yaml counts one decode per node and, per alias, one for the alias node plus, as aliased
    decodes, every node of the anchored value (aliases inside it included). It checks the
    counts after every decode; inside an alias expansion the condition can only become true,
    so checking at the end of each expansion finds every refusal the decoder would make.
    """
    decoded = 1  # the document node
    aliased = 0
    # finished nodes: (decodes of one expansion, expanded bytes); a node met again is an alias
    done: dict[int, tuple[int, int]] = {}
    open_ids: set[int] = set()

    def enter(node: yaml.Node) -> list[Any]:
        nonlocal decoded
        decoded += 1
        if _excessive(decoded, aliased):
            raise YamlBodyError("yaml: document contains excessive aliasing")
        open_ids.add(id(node))
        size = len(node.value) + 2 if isinstance(node, yaml.ScalarNode) else 2
        return [node, _edges(node), 0, 1, size]  # node, children, next child, decodes, bytes

    stack = [enter(root)]
    while stack:
        frame = stack[-1]
        node, edges, i = frame[0], frame[1], frame[2]
        if i == len(edges):
            stack.pop()
            open_ids.discard(id(node))
            done[id(node)] = (frame[3], min(frame[4], max_bytes + 1))
            if stack:
                stack[-1][3] += frame[3]
                stack[-1][4] += min(frame[4], max_bytes + 1) + 1
            continue
        frame[2] = i + 1
        child = edges[i]
        key = id(child)
        if key in open_ids:
            anchor = getattr(child, "anchor", None) or ""
            raise YamlBodyError(f"yaml: anchor '{anchor}' value contains itself")
        if key not in done:
            stack.append(enter(child))
            continue
        count, size = done[key]  # an alias: the alias node, then its value once more
        decoded += 1
        if _excessive(decoded, aliased):
            raise YamlBodyError("yaml: document contains excessive aliasing")
        decoded += count
        aliased += count
        if _excessive(decoded, aliased):
            raise YamlBodyError("yaml: document contains excessive aliasing")
        frame[3] += 1 + count
        frame[4] += size + 1
    total = done[id(root)][1]
    if total > max_bytes:
        raise YamlBodyError(
            f"the YAML body expands to more than {max_bytes} bytes once its aliases are resolved",
            too_large=True,
        )


def load_yaml(raw: bytes | str, max_bytes: int = MAX_EXPANDED_BYTES) -> Any:
    """The first document of ``raw`` as Python data; :class:`YamlBodyError` if it is not YAML,
    if the real server's decoder would refuse its aliasing, or if it expands past
    ``max_bytes``."""
    try:
        node = yaml.compose(raw, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise YamlBodyError(str(exc)) from exc
    if node is None:
        return None
    check_aliasing(node, max_bytes)
    loader = yaml.SafeLoader(raw)
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlBodyError(str(exc)) from exc
    finally:
        loader.dispose()
