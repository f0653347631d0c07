"""The render writer: output that YAML 1.1 and 1.2 readers both read back unchanged."""

from __future__ import annotations

from pathlib import Path

import yaml as pyyaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.gitops.compile import compile_documents, dump_objects
from kai.gitops.loader import load_paths, load_text
from kai.gitops.validate import validate
from kai.gitops.yaml_out import dump_yaml

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
