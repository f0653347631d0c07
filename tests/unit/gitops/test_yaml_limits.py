"""YAML limits that count what a file expands to, nesting that is never cut silently, and YAML
merge keys (``<<``).

The attacks run ``kai`` in a child process with capped memory and a timeout, and check the
time and the peak RSS the child reports."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from helpers.capped import run_kai
from kai.api.untrusted_files import FileLimits
from kai.cli import main
from kai.gitops.cluster_plan import plan
from kai.gitops.loader import MAX_DEPTH, load_text
from kai.gitops.validate import validate

MEMORY_CAP = 1536 * 2**20
TIMEOUT_S = 60
HEAD = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: teams
spec:
  queues:
"""


def kai(*argv: str) -> tuple[subprocess.CompletedProcess[bytes], float, int]:
    """``kai ARGV`` in a capped child (:mod:`helpers.capped`): the result, its seconds and its
    peak RSS in bytes."""
    run = run_kai(*argv, memory_cap=MEMORY_CAP, timeout=TIMEOUT_S)
    return run.done, run.seconds, run.peak


def _deep_tree(levels: int) -> str:
    lines = HEAD.splitlines()
    indent = "  "
    for level in range(levels):
        lines.append(f"{indent}- name: q{level}")
        lines.append(f"{indent}  quota: {{gpu: 1}}")
        if level < levels - 1:
            lines.append(f"{indent}  children:")
            indent += "  "
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The attacks


def test_one_large_value_repeated_by_aliases_is_refused_quickly(tmp_path: Path) -> None:
    # 1 MiB written once, repeated 8,999 times: 1.1 MB of file, 9 GB of text once expanded.
    path = tmp_path / "amplified.yaml"
    path.write_text("a: &a " + "x" * 2**20 + "\nb:\n" + "- *a\n" * 8999)
    done, elapsed, peak = kai("validate", str(path))
    assert done.returncode == 1, done.stderr
    assert b"amplified.yaml:1:4: error: [yaml]" in done.stdout
    assert b"more than 4194304 bytes of text (--max-yaml-expansion)" in done.stdout
    assert elapsed < 10 and peak < 500 * 2**20


def test_render_of_values_repeated_by_aliases_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tree.yaml"
    body = "".join(f"  - name: q{i}\n    displayName: *a\n" for i in range(300))
    path.write_text(
        HEAD.replace("  name: teams\n", f"  name: teams\n  x: &a {'y' * 2**20}\n") + body
    )
    done, elapsed, peak = kai("render", str(path))
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"(--max-yaml-expansion)" in done.stderr
    assert elapsed < 10 and peak < 500 * 2**20


def test_millions_of_empty_documents_stop_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("---\n" * 4_000_000)  # 16 MB
    done, elapsed, peak = kai("validate", str(path))
    assert done.returncode == 1
    assert b"more than 10000 YAML documents" in done.stdout
    assert b"--max-yaml-documents" in done.stdout
    assert elapsed < 10 and peak < 500 * 2**20


def test_the_expansion_and_document_limits_are_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "small.yaml"
    path.write_text("a: &a " + "x" * 100 + "\nb: [*a, *a, *a]\n---\nc: 1\n---\nd: 2\n")
    main(["validate", str(path)])
    assert "[yaml]" not in capsys.readouterr().out
    assert main(["validate", "--max-yaml-expansion", "250", str(path)]) == 1
    assert "more than 250 bytes of text" in capsys.readouterr().out
    assert main(["validate", "--max-yaml-documents", "2", str(path)]) == 1
    assert "more than 2 YAML documents" in capsys.readouterr().out
    assert main(["render", "--max-yaml-documents", "2", str(path)]) == 1
    assert "more than 2 YAML documents" in capsys.readouterr().err


def test_expansion_counts_bytes_and_values_separately() -> None:
    text = "a: &a " + "x" * 1000 + "\nb: [*a, *a]\n"
    assert load_text(text, limits=FileLimits(max_alias_bytes=2000)).problems == []
    [problem] = load_text(text, limits=FileLimits(max_alias_bytes=1999)).problems
    assert (problem.line, problem.column, problem.rule) == (1, 4, "yaml")
    [problem] = load_text(text, limits=FileLimits(max_alias_nodes=1)).problems
    assert "--max-yaml-aliases" in problem.message


# --------------------------------------------------------------------------------------------
# Nesting


def test_a_tree_deeper_than_the_limit_is_an_error_not_a_shorter_tree() -> None:
    loaded = load_text(_deep_tree(150), "deep.yaml")
    report = validate(loaded)
    assert not report.ok
    [problem] = report.errors
    assert problem.rule == "document"
    assert f"more than {MAX_DEPTH} levels" in problem.message
    assert problem.line > 200  # where the limit is passed, not the top of the file


def test_a_tree_within_the_limit_keeps_every_queue() -> None:
    from kai.gitops.compile import compile_documents

    report = validate(load_text(_deep_tree(90), "deep.yaml"))
    assert report.ok, report.problems
    assert len(compile_documents(report.documents)) == 90


def test_the_controller_reports_a_too_deep_tree_invalid() -> None:
    doc = yaml.safe_load(_deep_tree(150))
    result = plan([doc], [], [], None)
    outcome = result.outcomes["QueueTree/teams"]
    assert outcome.state == "invalid"
    assert any(f"more than {MAX_DEPTH} levels" in p.message for p in outcome.errors)
    assert not [o for o in result.apply if o["kind"] == "Queue"]


def test_render_refuses_a_too_deep_tree(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(_deep_tree(150))
    done, _, _ = kai("render", str(path))
    assert done.returncode == 1 and done.stdout == b""
    assert b"[document]" in done.stderr


# --------------------------------------------------------------------------------------------
# Merge keys

MERGED = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: teams
spec:
  queues:
  - name: research
    quota: &quota {gpu: 8, cpu: "64"}
    limit: &limit
      gpu: 16
  - name: product
    quota:
      <<: *quota
      gpu: 4
    limit:
      <<: [*limit, {cpu: "128", gpu: 1}]
"""


def test_merge_keys_with_yaml_1_1_semantics() -> None:
    loaded = load_text(MERGED, "m.yaml")
    assert loaded.problems == []
    product = loaded.documents[0].data["spec"]["queues"][1]
    assert product["quota"] == {"gpu": 4, "cpu": "64"}  # the explicit key wins
    assert product["limit"] == {"gpu": 16, "cpu": "128"}  # the earlier map in the list wins
    assert validate(loaded).ok


def _place(text: str, line: int, snippet: str) -> tuple[int, int]:
    return (line, text.splitlines()[line - 1].index(snippet) + 1)


def test_a_merged_value_is_placed_where_it_is_written() -> None:
    text = MERGED.replace('cpu: "64"', 'cpu: "sixty"')
    report = validate(load_text(text, "m.yaml"))
    places = {(p.path, p.line, p.column) for p in report.errors}
    line, column = _place(text, 8, '"sixty"')
    assert places == {("queues[0].quota.cpu", line, column), ("queues[1].quota.cpu", line, column)}
    doc = load_text(MERGED, "m.yaml").documents[0]
    queue = ("spec", "queues", 1)
    assert doc.position((*queue, "quota", "cpu"), False) == _place(MERGED, 8, '"64"')
    assert doc.position((*queue, "quota", "cpu"), True) == _place(MERGED, 8, "cpu")
    assert doc.position((*queue, "quota", "gpu"), False) == _place(MERGED, 14, "4")
    assert doc.position((*queue, "limit", "gpu"), False) == _place(MERGED, 10, "16")
    assert doc.position((*queue, "limit", "cpu"), True) == _place(MERGED, 16, "cpu")


def test_merged_keys_are_not_duplicates_but_written_ones_are() -> None:
    text = "base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n  z: 4\n  z: 5\n"
    problems = load_text(text).problems
    assert [(p.rule, p.line) for p in problems] == [("duplicate-key", 6)]


def test_a_quoted_merge_key_is_an_ordinary_key() -> None:
    [doc] = load_text('m: {"<<": 1, a: 2}\n').documents
    assert doc.data == {"m": {"<<": 1, "a": 2}}


@pytest.mark.parametrize("value", ["1", "[1, 2]", "[{a: 1}, 2]"])
def test_a_merge_of_something_else_than_mappings_is_an_error(value: str) -> None:
    [problem] = load_text(f"m:\n  <<: {value}\n").problems
    assert problem.rule == "yaml" and "merge key (<<)" in problem.message
    assert problem.line == 2


def test_merges_count_against_the_expansion_limits() -> None:
    text = "a: &a {k: " + "x" * 1000 + "}\nb: {<<: *a}\nc: {<<: *a}\n"
    assert load_text(text, limits=FileLimits(max_alias_bytes=2100)).problems == []
    [problem] = load_text(text, limits=FileLimits(max_alias_bytes=1500)).problems
    assert "--max-yaml-expansion" in problem.message


KEYS = st.sampled_from(["k0", "k1", "k2", "k3", "k4"])
MAPS = st.dictionaries(KEYS, st.integers(-5, 5), max_size=4)


def _flow(mapping: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in mapping.items()) + "}"


@settings(max_examples=150, deadline=None)
@given(
    anchors=st.lists(MAPS, min_size=1, max_size=3),
    merged=st.lists(st.integers(0, 2), min_size=1, max_size=3),
    explicit=MAPS,
    explicit_first=st.booleans(),
    as_list=st.booleans(),
)
def test_merges_agree_with_the_yaml_1_1_merge_spec(
    anchors: list[dict[str, int]],
    merged: list[int],
    explicit: dict[str, int],
    explicit_first: bool,
    as_list: bool,
) -> None:
    lines = [f"a{i}: &a{i} {_flow(m)}" for i, m in enumerate(anchors)]
    refs = [f"*a{i % len(anchors)}" for i in merged]
    merge = f"  <<: [{', '.join(refs)}]" if as_list or len(refs) > 1 else f"  <<: {refs[0]}"
    own = [f"  {k}: {v}" for k, v in explicit.items()]
    lines += ["out:", *([*own, merge] if explicit_first else [merge, *own])]
    text = "\n".join(lines) + "\n"
    # ruamel.yaml as the reference (PyYAML lets a later map of a list win, against the spec)
    expected: dict[str, Any] = YAML(typ="safe", pure=True).load(text)
    loaded = load_text(text)
    assert loaded.problems == []
    assert loaded.documents[0].data == expected
