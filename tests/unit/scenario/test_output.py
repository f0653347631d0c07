"""JSON and text output, --check comparisons and mismatch lines, exit codes of the command."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kai.commands.simulate import execute
from kai.scheduler.errors import UnsupportedActionError
from kai.scheduler.result import SessionResult, TaskOutcome
from kai.scheduler.snapshot import Snapshot, TaskStatus

from .conftest import document, job, node, task

S = TaskStatus


def bind_pending(snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
    """A stand-in session: every Pending task is bound to the first node."""
    outcomes = {}
    for one in snapshot.jobs:
        for t in one.tasks:
            if t.status is S.PENDING:
                outcomes[t.uid] = TaskOutcome(S.BINDING, snapshot.nodes[0].name)
            else:
                outcomes[t.uid] = TaskOutcome(t.status, t.node, t.gpu_groups)
    return SessionResult(tasks=outcomes)


def _cycle_example(expected: dict[str, Any] | None = None) -> dict[str, Any]:
    data = document(
        [node("node0", 2)],
        [job("job0", [task("job0-0")])],
        mode="rounds",
        rounds={"untilMatch": 1, "afterMatch": 1},
    )
    data["id"] = "allocate/cycle_example"
    if expected is not None:
        data["expected"] = expected
    return data


SPEC_EXAMPLE = {
    "id": "allocate/cycle_example",
    "mode": "rounds",
    "rounds": [
        {
            "result": {
                "tasks": {"job0-0": {"status": "Binding", "node": "node0", "gpuGroups": []}},
                "nodes": {"node0": {"idleGpus": 1, "releasingGpus": 0}},
            },
            "next": {
                "tasks": {"job0-0": {"status": "Running", "node": "node0", "gpuGroups": []}},
                "nodes": {"node0": {"idleGpus": 1, "releasingGpus": 0}},
            },
        },
        {
            "result": {
                "tasks": {"job0-0": {"status": "Running", "node": "node0", "gpuGroups": []}},
                "nodes": {"node0": {"idleGpus": 1, "releasingGpus": 0}},
            },
            "next": {
                "tasks": {"job0-0": {"status": "Running", "node": "node0", "gpuGroups": []}},
                "nodes": {"node0": {"idleGpus": 1, "releasingGpus": 0}},
            },
        },
    ],
}


def test_json_is_the_documented_example(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    path = write_scenario(_cycle_example())
    outcome = execute(path, output="json", session=bind_pending)
    assert outcome.code == 0 and outcome.stderr == ""
    assert outcome.stdout == json.dumps(SPEC_EXAMPLE, separators=(",", ":")) + "\n"
    again = execute(path, output="json", session=bind_pending)
    assert again.stdout == outcome.stdout


def test_single_session_json_has_no_next(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    path = write_scenario(document([node("n0", 2)], [job("j", [task("t")])]))
    parsed = json.loads(execute(path, output="json", session=bind_pending).stdout)
    assert list(parsed) == ["id", "mode", "rounds"]
    assert parsed["mode"] == "single-session" and len(parsed["rounds"]) == 1
    assert list(parsed["rounds"][0]) == ["result"]


def test_check_pass(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    expected = {
        "tasks": {"job0-0": {"status": "Running", "node": "node0"}},
        "nodes": {"node0": {"idleGpus": 1, "releasingGpus": 0}},
    }
    path = write_scenario(_cycle_example(expected))
    text = execute(path, check=True, session=bind_pending)
    assert text.code == 0 and text.stdout.endswith("CHECK PASS\n")
    assert text.stdout.startswith(
        "scenario allocate/cycle_example  mode rounds  actions allocate\n"
    )
    assert "round 1\n" in text.stdout and "round 2\n" in text.stdout
    as_json = execute(path, output="json", check=True, session=bind_pending)
    assert as_json.code == 0 and as_json.stderr == ""


def test_check_mismatches(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    # Round 1's next is checked (Running), then round 2's result (Running).
    expected = {
        "tasks": {"job0-0": {"status": "Pipelined", "node": "node0"}},
        "nodes": {"node0": {"idleGpus": 2, "releasingGpus": 0}},
    }
    path = write_scenario(_cycle_example(expected))
    figures = "expected idleGpus=2 releasingGpus=0, got idleGpus=1 releasingGpus=0"
    lines = [
        "MISMATCH round 1 next: task job0-0: expected Pipelined on node0, got Running on node0",
        f"MISMATCH round 1 next: node node0: {figures}",
        "MISMATCH round 2 result: task job0-0: expected Pipelined on node0, got Running on node0",
        f"MISMATCH round 2 result: node node0: {figures}",
    ]
    text = execute(path, check=True, session=bind_pending)
    assert text.code == 1 and text.stderr == ""
    assert text.stdout.endswith("\n".join(lines) + "\nCHECK FAIL (4 mismatches)\n")
    marked = [line for line in text.stdout.splitlines() if line.startswith("  !")]
    assert len(marked) == 4  # the task and node rows of rounds 1 and 2
    as_json = execute(path, output="json", check=True, session=bind_pending)
    assert as_json.code == 1 and as_json.stderr == "".join(line + "\n" for line in lines)
    json.loads(as_json.stdout)


def test_mismatch_without_expected_node(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    data = document([node("n0", 2)], [job("j", [task("t")])])
    data["expected"] = {"tasks": {"t": {"status": "Pending"}}}
    outcome = execute(write_scenario(data), check=True, session=bind_pending)
    assert "MISMATCH round 1 result: task t: expected Pending, got Binding\n" in outcome.stdout


def test_check_needs_expected(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    path = write_scenario(document([node("n0", 2)], [job("j", [task("t")])]))
    outcome = execute(path, check=True, session=bind_pending)
    assert outcome.code == 2 and outcome.stdout == ""
    assert (
        outcome.stderr
        == f"{path}:1:1: expected: required by --check (the file has no expected block)\n"
    )


def test_unsupported_action_exits_2(write_scenario: Callable[[dict[str, Any]], str]) -> None:
    def refuse(snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
        raise UnsupportedActionError("reclaim")

    path = write_scenario(document([node("n0", 2)], [job("j", [task("t")])]))
    outcome = execute(path, output="json", session=refuse)
    assert outcome.code == 2 and outcome.stdout == ""
    assert outcome.unsupported_action == "reclaim" and "'reclaim'" in outcome.stderr


def test_internal_error_exits_3_with_nothing_on_stdout(
    write_scenario: Callable[[dict[str, Any]], str],
) -> None:
    def crash(snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
        raise ZeroDivisionError("boom")

    path = write_scenario(document([node("n0", 2)], [job("j", [task("t")])]))
    outcome = execute(path, output="text", check=False, session=crash)
    assert outcome.code == 3 and outcome.stdout == ""
    assert "internal error" in outcome.stderr and "ZeroDivisionError" in outcome.stderr

    def bad(snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
        return SessionResult(tasks={})

    outcome = execute(path, session=bad)
    assert outcome.code == 3 and outcome.stdout == ""
    assert "no outcome for task 't'" in outcome.stderr


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from kai.cli import main

    assert main(["simulate"]) == 2
    assert main(["simulate", "x.yaml", "--output", "yaml"]) == 2
    capsys.readouterr()
    assert main(["simulate", "/nonexistent/x.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == "/nonexistent/x.yaml:1:1: (document): cannot read the file: No such file or directory\n"
    )
