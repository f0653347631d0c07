"""The fast loader (yaml-rs) against the full one (libyaml): same data, same places, or no say.

The fast loader takes only files in which it cannot read differently from the full parser;
everything else, and every file with a problem, goes to the full parser. These tests generate
GitOps-like files with the spellings where YAML readers disagree and check that whatever the
fast loader accepts, the full parser reads to exactly the same data without a problem, and
that the places of a fast-loaded document are the full parser's, found only when asked for.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai.gitops import loader
from kai.gitops.loader import LoadResult, _fast_data, _parse, load_text
from kai.gitops.validate import validate


def _full(text: str) -> tuple[LoadResult, list[str]]:
    """What the full parser makes of ``text``, and its file-level failures."""
    result, failures = LoadResult(), []
    _parse(result, "f.yaml", text, lambda line, column, message: failures.append(message))
    return result, failures


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# Scalars where readers disagree: YAML 1.1 words, prefixed and underscored numbers, special
# floats, leading colons, quotes, very long digits.
SCALARS = st.sampled_from(
    [
        "yes", "no", "on", "true", "True", "FALSE", "null", "Null", "~", "0x1F", "0X1f", "-0x1",
        "0o17", "0O17", "0b101", "1_000", "_1", "1__0", "012", "+12", "-0", ".5", "1.", "1e3",
        "1E+3", "-.inf", ".NaN", "inf", "2024-01-01", "12:30", "64Gi", "500m", "'8'", '"8"',
        "'it''s'", '"a\\tb"', ":x", "a:b", "a: b", "- x", "[1, 2]", "{a: 1}", "!!str 1",
        "&a 1", "*a", "|", ">", "@x", "`x`", "%x", "? x", "x # c", "9" * 30, "1e400", "",
        "d0-team-1", "Team 1 of department 0", "é", "a\tb", "...", "---",
    ]
)  # fmt: skip
KEYS = st.sampled_from(["name", "quota", "gpu", "cpu", "1", "null", "true", "a b", "'q'", "k"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    lines = ["apiVersion: gitops.kai.scheduler/v1alpha1", "kind: QueueTree"]
    for _ in range(draw(st.integers(1, 8))):
        indent = " " * draw(st.sampled_from([0, 0, 2, 4, 1]))
        key, value = draw(KEYS), draw(SCALARS)
        form = draw(st.sampled_from(["plain", "flow-map", "flow-seq", "block-seq", "nested"]))
        if form == "plain":
            lines.append(f"{indent}{key}: {value}")
        elif form == "flow-map":
            lines.append(f"{indent}{key}: {{gpu: {value}, cpu: {draw(SCALARS)}}}")
        elif form == "flow-seq":
            lines.append(f"{indent}{key}: [{value}, {draw(SCALARS)}]")
        elif form == "block-seq":
            lines += [f"{indent}{key}:", f"{indent}- {value}", f"{indent}- {draw(SCALARS)}"]
        else:
            lines += [f"{indent}{key}:", f"{indent}  {draw(KEYS)}: {value}"]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n---\n", "\n...\n"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_what_the_fast_loader_accepts_the_full_parser_reads_the_same(text: str) -> None:
    fast = _fast_data(text)
    if fast is None:
        return
    full, failures = _full(text)
    assert failures == [], f"the full parser refuses {text!r}: {failures}"
    assert [p.message for p in full.problems] == []
    assert len(full.documents) == 1 and full.documents[0].index == 0
    assert _same(fast, full.documents[0].data), (text, fast, full.documents[0].data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v: 0x1F\n", 31),
        ("v: 0X1F\n", "0X1F"),
        ("v: _1\n", "_1"),
        ("v: 1_000\n", "1_000"),
        ("v: 0b101\n", "0b101"),
        ("v: yes\n", "yes"),
        ("1: x\nv: 2\n", 2),
        ("v: !!str 3\n", "3"),
        ("a: &x 4\nv: *x\n", 4),
        ('v: "\\u00e9"\n', "é"),
    ],
)
def test_spellings_the_readers_disagree_on_are_read_by_the_full_parser(
    text: str, expected: Any
) -> None:
    result = load_text(text)
    assert result.problems == []
    assert result.documents[0].data["v"] == expected
    assert type(result.documents[0].data["v"]) is type(expected)


@pytest.mark.parametrize(
    ("text", "rule", "line"),
    [
        ("a: 1\nb: 2\na: 3\n", "duplicate-key", 3),
        ("a: 1\nv: [:x, 1]\n", "yaml", 2),
        ("a: [1, 2\n", "yaml", 2),
        ("a: 1\n...\nb: 2\n", "yaml", 3),
    ],
)
def test_a_file_with_a_problem_is_judged_by_the_full_parser(
    text: str, rule: str, line: int
) -> None:
    result = load_text(text)
    assert [(p.rule, p.line) for p in result.problems][:1] == [(rule, line)], result.problems


def test_places_of_a_fast_loaded_document_are_the_full_parsers() -> None:
    text = (
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: QueueTree\nmetadata: {name: t}\n"
        "spec:\n  queues:\n  - name: a\n    quota: {gpu: 1, cpu: '8'}\n"
        "    namespaces: [ns-x, ns-y]\n"
    )
    fast = load_text(text).documents[0]
    assert fast.text is not None  # taken by the fast loader: no places yet
    full = _full(text)[0].documents[0]
    paths = [(), ("spec", "queues", 0, "quota", "cpu"), ("spec", "queues", 0, "namespaces", 1)]
    paths += [("spec", "queues", 0, "missing"), ("metadata", "name")]
    for path in paths:
        got, want = fast.value_at(path), full.value_at(path)
        assert (got.line, got.column) == (want.line, want.column), path
        got, want = fast.key_at(path), full.key_at(path)
        assert (got.line, got.column) == (want.line, want.column), path
    assert fast.text is None  # the file was read again once, for the places
    assert fast.has(("spec", "queues", 0, "name")) and not fast.has(("spec", "x"))


def test_a_valid_tree_looks_at_no_place(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: QueueTree\nmetadata: {name: t}\n"
        "spec:\n  defaults: {limit: {gpu: 8}}\n  queues:\n  - name: a\n"
        "    quota: {gpu: 2}\n    children:\n    - {name: b, quota: {gpu: 1}, namespaces: [ns-n]}\n"
    )
    parses = []
    real = loader._parse
    monkeypatch.setattr(loader, "_parse", lambda *a, **k: parses.append(1) or real(*a, **k))
    report = validate(load_text(text))
    assert report.problems == [] and parses == []
    # An error makes the rules look at places: the file is read again, once.
    report = validate(load_text(text.replace("gpu: 1}", "gpu: 3}")))
    assert [(p.rule, p.line) for p in report.problems] == [("children-quota-sum", 8)]
    assert parses == [1]
