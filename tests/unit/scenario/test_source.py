"""File-level problems (unreadable, not UTF-8, not YAML, empty...) and the JSON fast path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kai.scenario import ScenarioError, load_scenario

BASE = (Path(__file__).parent / "data" / "base.yaml").read_text()


def _errors(path: Path, **kwargs: bool) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path), **kwargs)
    return [line.replace(f"{path}:", "F:", 1) for line in caught.value.lines]


def test_missing_file(tmp_path: Path) -> None:
    assert _errors(tmp_path / "nope.yaml") == [
        "F:1:1: (document): cannot read the file: No such file or directory"
    ]


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"formatVersion: 1\nid: \xff\n")
    assert _errors(path) == ["F:2:5: (document): the file is not valid UTF-8"]


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert _errors(path) == ["F:1:1: (document): the file is empty"]


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- a\n- b\n")
    assert _errors(path) == ["F:1:1: (document): the top level must be a mapping, got a list"]


def test_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("formatVersion: 1\nactions: [allocate\nmode: rounds\n")
    (line,) = _errors(path)
    assert line.startswith("F:3:5: (document): not valid YAML: ")


def test_two_documents(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "---\nid: again\n")
    assert _errors(path) == [
        f"F:{BASE.count(chr(10)) + 2}:1: (document): one scenario per file, found a second"
    ]


def test_check_needs_expected(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE[: BASE.index("expected:")])
    load_scenario(str(path))  # valid without --check
    assert _errors(path, require_expected=True) == [
        "F:1:1: expected: required by --check (the file has no expected block)"
    ]


def test_queues_must_not_be_empty(tmp_path: Path) -> None:
    text = yaml.safe_load(BASE)
    text["queues"] = []
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    lines = _errors(path)
    assert lines[0].endswith("queues: must be a non-empty list")


def test_every_problem_is_reported_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    text = BASE.replace("gpuFraction: 0.5", "gpuFraction: 2").replace(
        "mode: single-session", "mode: x"
    )
    path.write_text(text)
    assert _errors(path) == [
        "F:3:7: mode: must be one of single-session, rounds, got 'x'",
        "F:65:28: jobs[0].tasks[0].request.gpuFraction: must be > 0 and < 1, got 2",
    ]


def test_json_gives_the_same_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(yaml.safe_load(BASE), indent=1))
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(BASE)
    assert load_scenario(str(path)) == load_scenario(str(yaml_path))


def test_json_problems_are_located_in_the_json_text(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE)
    data["jobs"][0]["tasks"][0]["request"]["gpuFraction"] = 1.5
    path = tmp_path / "s.json"
    text = json.dumps(data, indent=1)
    path.write_text(text)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if '"gpuFraction": 1.5' in line)
    column = lines[row].index("1.5") + 1
    assert _errors(path) == [
        f"F:{row + 1}:{column}: jobs[0].tasks[0].request.gpuFraction: must be > 0 and < 1, got 1.5"
    ]


def test_json_repeated_key_is_an_error(tmp_path: Path) -> None:
    text = json.dumps(yaml.safe_load(BASE), indent=1)
    text = text.replace('"id": "unit/base",', '"id": "unit/base",\n "id": "again",', 1)
    path = tmp_path / "s.json"
    path.write_text(text)
    assert _errors(path) == ["F:4:2: id: key 'id' is repeated in this mapping"]


def test_yaml_flow_document_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    data = yaml.safe_load(BASE)
    path.write_text(yaml.safe_dump(data, default_flow_style=True, width=100000))
    assert load_scenario(str(path)).id == "unit/base"


def test_equal_looking_requests_are_each_checked(tmp_path: Path) -> None:
    """A valid request seen before must not make ``true`` pass for ``1`` (or 1.0 for 1)."""
    data = yaml.safe_load(BASE)
    tasks = data["jobs"][0]["tasks"]
    tasks.append({**tasks[1], "name": "job0-2", "request": {**tasks[1]["request"], "gpus": True}})
    tasks.append({**tasks[1], "name": "job0-3", "request": {**tasks[1]["request"], "gpus": 1.0}})
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    lines = [line.split(": ", 1)[1] for line in _errors(path)]
    assert lines == [
        "jobs[0].tasks[2].request.gpus: must be an integer >= 0, got true",
        "jobs[0].tasks[3].request.gpus: must be an integer >= 0, got 1.0",
    ]
