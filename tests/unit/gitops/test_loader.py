"""Reading files: positions, YAML errors, duplicate keys, files and directories, stdin."""

from __future__ import annotations

import io
import os

import pytest

from kai.gitops.loader import UsageError, load_paths, load_text

QUEUE = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\n"


def test_positions_of_keys_and_values() -> None:
    doc = load_text("a: 1\nb:\n  - x: 'q'\n    y: [1, 2.5]\n").documents[0]
    assert doc.data == {"a": 1, "b": [{"x": "q", "y": [1, 2.5]}]}
    assert doc.value_at(("a",)) == doc.value_at(("a",))
    assert (doc.value_at(("b", 0, "x")).line, doc.value_at(("b", 0, "x")).column) == (3, 8)
    assert (doc.key_at(("b", 0, "y")).line, doc.key_at(("b", 0, "y")).column) == (4, 5)
    assert (doc.value_at(("b", 0, "y", 1)).line, doc.value_at(("b", 0, "y", 1)).column) == (4, 12)
    # A missing path falls back to the nearest written ancestor.
    assert doc.value_at(("b", 0, "missing")).line == 3


def test_yaml_1_2_scalars() -> None:
    doc = load_text("a: yes\nb: true\nc: null\nd: 0x10\ne: 1e3\nf: '5'\ng: ~\n").documents[0]
    assert doc.data == {"a": "yes", "b": True, "c": None, "d": 16, "e": 1000.0, "f": "5", "g": None}


def test_multi_document_file_skips_empty_documents() -> None:
    result = load_text(f"---\n{QUEUE}---\n---\n{QUEUE}")
    assert [d.index for d in result.documents] == [0, 2]
    assert result.documents[1].value_at(("kind",)).line == 8
    assert result.problems == []


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("a: [1, 2\n", 2, 1, "malformed YAML"),
        ("a:\n  b: 1\n\tc: 2\n", 3, 1, "tab character"),
        ('a: "abc\nb: 2\n', 1, 4, "unclosed quote"),
        ("a: 1\n  b: 2\n", 2, 4, "malformed YAML"),
        ("", 1, 1, "empty file"),
        ("# only a comment\n\n", 1, 1, "empty file"),
        ("---\n---\n", 1, 1, "empty file"),
        ("a: *missing\n", 1, 4, "malformed YAML"),
        ("a: \x07\n", 1, 4, "not allowed"),
    ],
)
def test_yaml_problems(text: str, line: int, column: int, words: str) -> None:
    result = load_text(text, "f.yaml")
    assert result.documents == []
    [problem] = result.problems
    assert (problem.file, problem.line, problem.column, problem.rule) == (
        "f.yaml",
        line,
        column,
        "yaml",
    )
    assert words in problem.message


def test_non_utf8_and_binary_files() -> None:
    [problem] = load_text(b"a: 1\nb: caf\xe9\n", "latin1.yaml").problems
    assert (problem.line, problem.column, problem.rule) == (2, 7, "yaml")
    assert "not UTF-8" in problem.message and "0xe9" in problem.message
    [problem] = load_text(b"\x89PNG\r\n\x1a\n\x00\x00", "image.yaml").problems
    assert problem.rule == "yaml" and "binary" in problem.message
    # A UTF-8 byte-order mark is fine.
    assert load_text(b"\xef\xbb\xbfa: 1\n").documents[0].data == {"a": 1}


def test_duplicate_keys_reported_at_each_second_occurrence() -> None:
    text = QUEUE + "spec:\n  priority: 1\n  priority: 2\n  resources: {}\n  priority: 3\n"
    result = load_text(text, "d.yaml")
    assert [(p.line, p.column, p.rule) for p in result.problems] == [
        (6, 3, "duplicate-key"),
        (8, 3, "duplicate-key"),
    ]
    assert result.problems[0].object == "Queue/q"
    assert result.problems[0].path == "priority"
    assert "first written at line 5" in result.problems[0].message
    # The first value is kept.
    assert result.documents[0].data["spec"]["priority"] == 1


def test_directories_recursive_sorted_and_hidden_skipped(tmp_path: os.PathLike[str]) -> None:
    root = str(tmp_path)
    for rel in ("b.yaml", "a/x.yml", "a/y.txt", ".hidden.yaml", ".git/c.yaml", "a/.d/e.yaml"):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(QUEUE)
    result = load_paths([root])
    assert result.files == [os.path.join(root, "a/x.yml"), os.path.join(root, "b.yaml")]
    # An explicitly named file is read whatever its name.
    assert load_paths([os.path.join(root, "a/y.txt")]).files == [os.path.join(root, "a/y.txt")]


def test_usage_errors(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_paths([os.path.join(str(tmp_path), "nope")])
    os.makedirs(os.path.join(str(tmp_path), "empty"))
    with pytest.raises(UsageError, match="no YAML files"):
        load_paths([os.path.join(str(tmp_path), "empty")])


def test_unreadable_file_in_directory_is_io_problem(tmp_path: os.PathLike[str]) -> None:
    root = str(tmp_path)
    with open(os.path.join(root, "good.yaml"), "w") as handle:
        handle.write(QUEUE)
    os.symlink(os.path.join(root, "gone"), os.path.join(root, "dangling.yaml"))
    result = load_paths([root])
    [problem] = result.problems
    assert problem.rule == "io" and problem.file.endswith("dangling.yaml")
    assert len(result.documents) == 1


def test_stdin_is_named() -> None:
    result = load_paths(["-"], stdin=io.BytesIO(b"a: [\n"))
    assert result.problems[0].file == "<stdin>"


def test_absurd_nesting_is_a_yaml_problem_not_a_crash() -> None:
    [problem] = load_text("a: " + "[" * 5000 + "]" * 5000 + "\n").problems
    assert problem.rule == "yaml"
