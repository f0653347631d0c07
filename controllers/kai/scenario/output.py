"""What ``kai simulate`` prints: the JSON document of the contract, or a table for people."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kai.scenario import model
from kai.scenario.comparison import Mismatch, checked_states, compare
from kai.scenario.convert import TaskState
from kai.scenario.figures import Figures, node_figures
from kai.scenario.rounds import Round


@dataclass(frozen=True)
class Report:
    """A run's rounds with their node figures and, with ``--check``, its mismatches."""

    scenario: model.Scenario
    rounds: list[Round]
    result_figures: list[dict[str, Figures]]
    next_figures: list[dict[str, Figures] | None]
    mismatches: list[Mismatch] | None  # None: not checked


def build_report(scenario: model.Scenario, rounds: list[Round], *, check: bool) -> Report:
    result_figures = [node_figures(scenario, r.result) for r in rounds]
    next_figures = [None if r.next is None else node_figures(scenario, r.next) for r in rounds]
    mismatches: list[Mismatch] | None = None
    if check:
        assert scenario.expected is not None
        mismatches = []
        for state in checked_states(scenario, rounds):
            index = state.round - 1
            figures = next_figures[index] if state.stage == "next" else result_figures[index]
            assert figures is not None
            mismatches.extend(compare(scenario.expected, state, figures))
    return Report(scenario, rounds, result_figures, next_figures, mismatches)


def _state_json(tasks: Mapping[str, TaskState], figures: Mapping[str, Figures]) -> dict[str, Any]:
    return {
        "tasks": {
            name: {"status": t.status, "node": t.node, "gpuGroups": list(t.gpu_groups)}
            for name, t in tasks.items()
        },
        "nodes": {
            name: {"idleGpus": f.idle_gpus, "releasingGpus": f.releasing_gpus}
            for name, f in figures.items()
        },
    }


def render_json(report: Report) -> str:
    """Exactly one JSON object, keys in the documented order, followed by a newline."""
    return orjson.dumps(report_document(report)).decode("utf-8") + "\n"


def report_document(report: Report) -> dict[str, Any]:
    """The document of ``kai simulate -o json`` (and ``-o yaml``): id, mode, rounds."""
    rounds: list[dict[str, Any]] = []
    for index, one in enumerate(report.rounds):
        entry = {"result": _state_json(one.result, report.result_figures[index])}
        following = report.next_figures[index]
        if one.next is not None and following is not None:
            entry["next"] = _state_json(one.next, following)
        rounds.append(entry)
    return {"id": report.scenario.id, "mode": report.scenario.mode, "rounds": rounds}


def _place(task: TaskState) -> str:
    return task.status if task.node is None else f"{task.status} {task.node}"


def _table(rows: list[list[str]], *, marks: bool, indent: str = "  ") -> list[str]:
    if not marks:  # the first column holds the "!" marks of --check
        rows = [row[1:] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (
            indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def render_text(report: Report) -> str:
    scenario = report.scenario
    rounds_mode = scenario.mode == "rounds"
    lines = [f"scenario {scenario.id}  mode {scenario.mode}  actions {', '.join(scenario.actions)}"]
    marked: set[tuple[int, str, str]] = set()  # (round, kind, name) rows that mismatch
    if report.mismatches is not None:
        lines.append("rows marked ! differ from expected")
        marked = {(m.round, m.kind, m.name) for m in report.mismatches}
    job_of = {task.name: job for job in scenario.jobs for task in job.tasks}
    for index, one in enumerate(report.rounds):
        lines.append(f"round {index + 1}")
        header = ["", "TASK", "JOB", "QUEUE", "INPUT", "RESULT", "GPU-GROUPS"]
        if rounds_mode:
            header.append("NEXT")
        rows = [header]
        for name, result in one.result.items():
            job = job_of[name]
            row = [
                "!" if (index + 1, "task", name) in marked else "",
                name,
                job.name,
                job.queue,
                _place(one.input[name]),
                _place(result),
                ",".join(result.gpu_groups) or "-",
            ]
            if one.next is not None:
                row.append(_place(one.next[name]))
            rows.append(row)
        lines.extend(_table(rows, marks=report.mismatches is not None))
        node_header = ["", "NODE", "GPUS", "IDLE-GPUS", "RELEASING-GPUS"]
        if rounds_mode:
            node_header += ["NEXT-IDLE-GPUS", "NEXT-RELEASING-GPUS"]
        node_rows = [node_header]
        following = report.next_figures[index]
        for node in scenario.nodes:
            figures = report.result_figures[index][node.name]
            row = [
                "!" if (index + 1, "node", node.name) in marked else "",
                node.name,
                str(node.gpus),
                str(figures.idle_gpus),
                str(figures.releasing_gpus),
            ]
            if following is not None:
                row += [
                    str(following[node.name].idle_gpus),
                    str(following[node.name].releasing_gpus),
                ]
            node_rows.append(row)
        if scenario.nodes:
            lines.extend(_table(node_rows, marks=report.mismatches is not None))
    if report.mismatches is not None:
        lines.extend(m.line() for m in report.mismatches)
        if report.mismatches:
            lines.append(f"CHECK FAIL ({len(report.mismatches)} mismatches)")
        else:
            lines.append("CHECK PASS")
    return "\n".join(lines) + "\n"
