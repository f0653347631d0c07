"""The render writer: output that YAML 1.1 and 1.2 readers both read back unchanged."""

from __future__ import annotations

from pathlib import Path

import yaml as pyyaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.gitops.compile import compile_documents, dump_objects
from kai.gitops.loader import load_paths, load_text
from kai.gitops.validate import validate
from kai.gitops.yaml_out import dump_queue, dump_yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "gitops"

TRICKY = [
    "",
    "yes",
    "No",
    "on",
    "null",
    "~",
    "10",
    "1e3",
    "0x1F",
    "0o17",
    ".inf",
    "2026-01-01",
    "-1",
    "-dash",
    "a: b",
    "a #b",
    "#x",
    "*alias",
    "&anchor",
    "!tag",
    "{x}",
    "[x]",
    "'q'",
    '"q"',
    "trailing ",
    " leading",
    "tab\there",
    "multi\nline\n",
    "no final newline\nx",
    "two\n\n",
    "\nleading newline",
    "ünïcode",
    "10m",
    "Default (best effort)",
    "QueueTree/a, SchedulerPolicy/b",
    "topology.kubernetes.io/zone",
]


def read_back(text: str) -> object:
    [doc] = load_text(text).documents
    assert pyyaml.safe_load(text) == doc.data
    return doc.data


def test_tricky_strings_round_trip() -> None:
    value = {"strings": TRICKY, "keys": {s: s for s in TRICKY if "\n" not in s}}
    assert read_back(dump_yaml(value)) == value


def test_shapes() -> None:
    value = {
        "a": {},
        "b": [],
        "c": [{"x": 1, "y": [1, 2]}, [3, [4]], None, True, 1.5, -1, {"z": {}}],
        "d": {"e": {"f": "multi\nline\n"}},
    }
    assert read_back(dump_yaml(value)) == value
    assert dump_yaml({"k": [{"a": 1, "b": 2}]}) == "k:\n- a: 1\n  b: 2\n"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8), inner, max_size=4
        ),
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8).filter(str.isidentifier), values, min_size=1, max_size=5
    )
)
def test_any_data_round_trips(value: dict[str, object]) -> None:
    assert read_back(dump_yaml(value)) == value


def test_rendered_example_reads_back_as_the_compiled_objects() -> None:
    report = validate(load_paths([str(EXAMPLES)]))
    assert report.ok
    objects = compile_documents(report.documents)
    docs = load_text(dump_objects(objects)).documents
    assert [d.data for d in docs] == objects


# --------------------------------------------------------------------------------------------
# dump_queue: the same bytes as dump_yaml for a compiled Queue, and for anything else


texts = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?", fullmatch=True),
)
numbers = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1, 1.5, 1e-05, 1e30, True, None]),
)
lines = texts.filter(lambda text: "\n" not in text)  # mostly one-line strings: the fast path
amounts = st.dictionaries(
    st.sampled_from(["quota", "overQuotaWeight", "limit"]) | lines,
    numbers | lines,
    min_size=1,
    max_size=4,
)


@st.composite
def queues(draw: st.DrawFn) -> dict[str, object]:
    spec: dict[str, object] = {}
    for key in draw(st.permutations(["displayName", "parentQueue", "preemptMinRuntime"])):
        if draw(st.booleans()):
            spec[key] = draw(texts if draw(st.integers(0, 9)) == 0 else lines)
    spec["priority"] = draw(numbers)
    spec["resources"] = draw(
        st.dictionaries(
            st.sampled_from(["gpu", "cpu", "memory"]) | lines, amounts, min_size=1, max_size=4
        )
    )
    if draw(st.integers(0, 9)) == 0:
        spec[draw(texts)] = draw(values)  # a shape dump_queue leaves to dump_yaml
    metadata = {
        "name": draw(lines),
        "labels": draw(st.dictionaries(lines, lines, min_size=1, max_size=3)),
        "annotations": draw(st.dictionaries(lines, lines, min_size=1, max_size=3)),
    }
    queue: dict[str, object] = {
        "apiVersion": draw(st.sampled_from(["scheduling.run.ai/v2"]) | texts),
        "kind": "Queue",
        "metadata": metadata,
        "spec": spec,
    }
    if draw(st.integers(0, 9)) == 0:
        queue[draw(texts)] = draw(values)  # another key at the top: not a Queue's shape
    return queue


@settings(max_examples=500, deadline=None)
@given(queues())
def test_dump_queue_is_dump_yaml(queue: dict[str, object]) -> None:
    assert dump_queue(queue) == dump_yaml(queue)


def test_dump_queue_of_every_rendered_queue() -> None:
    report = validate(load_paths([str(EXAMPLES)]))
    queues = [o for o in compile_documents(report.documents) if o["kind"] == "Queue"]
    assert len(queues) > 10
    for queue in queues:
        assert dump_queue(queue) == dump_yaml(queue)
