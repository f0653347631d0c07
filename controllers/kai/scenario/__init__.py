"""Scheduling scenario files (docs/scenario-format.md): load and validate them, build the core's
snapshot, run single sessions or rounds, compute node figures, check and print outcomes.

Part of the core layer: plain data in and out, no Kubernetes.
"""

from __future__ import annotations

from kai.scenario.comparison import Mismatch, checked_states, compare
from kai.scenario.convert import NOW, TaskState, initial_state, to_snapshot
from kai.scenario.figures import Figures, node_figures
from kai.scenario.model import Scenario
from kai.scenario.output import Report, build_report, render_json, render_text, report_document
from kai.scenario.rounds import CoreOutputError, Round, SessionFn, advance, run_scenario
from kai.scenario.source import ScenarioError
from kai.scenario.validate import load_scenario, validate_document

__all__ = [
    "NOW",
    "CoreOutputError",
    "Figures",
    "Mismatch",
    "Report",
    "Round",
    "Scenario",
    "ScenarioError",
    "SessionFn",
    "TaskState",
    "advance",
    "build_report",
    "checked_states",
    "compare",
    "initial_state",
    "load_scenario",
    "node_figures",
    "render_json",
    "render_text",
    "report_document",
    "run_scenario",
    "to_snapshot",
    "validate_document",
]
