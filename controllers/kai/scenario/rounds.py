"""Running a scenario: one session (``single-session``) or full rounds with the update rules.

The session itself is a function passed in (the core's ``run_session`` in ``kai simulate``, a
stand-in in unit tests), so this module only builds inputs, reads outputs and applies the rules
of "mode: rounds" between sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kai.scenario import model
from kai.scenario.convert import TaskState, initial_state, to_snapshot
from kai.scheduler.result import SessionResult
from kai.scheduler.snapshot import Snapshot

SessionFn = Callable[[Snapshot, Sequence[str]], SessionResult]
State = dict[str, TaskState]


class CoreOutputError(Exception):
    """The core returned something the output contract cannot express (a bug in the core)."""


@dataclass(frozen=True)
class Round:
    """One session's outcome: ``result`` as the session left it, ``next`` after the update rules
    (None in single-session mode). Both are ordered as the file's tasks."""

    input: State
    result: State
    next: State | None


def round_count(scenario: model.Scenario) -> int:
    if scenario.rounds is None:
        return 1
    return scenario.rounds.until_match + scenario.rounds.after_match


def run_scenario(scenario: model.Scenario, session: SessionFn) -> list[Round]:
    """Run every round of the scenario, in order."""
    state = initial_state(scenario)
    rounds: list[Round] = []
    for _ in range(round_count(scenario)):
        result = read_result(scenario, session(to_snapshot(scenario, state), scenario.actions))
        following = advance(scenario, result) if scenario.mode == "rounds" else None
        rounds.append(Round(input=state, result=result, next=following))
        if following is not None:
            state = following
    return rounds


def read_result(scenario: model.Scenario, result: SessionResult) -> State:
    """Every task's outcome in file order, checked against the output contract."""
    nodes = {node.name for node in scenario.nodes}
    out: State = {}
    for task in scenario.tasks():
        outcome = result.tasks.get(task.name)
        if outcome is None:
            raise CoreOutputError(f"the session result has no outcome for task {task.name!r}")
        status = str(getattr(outcome.status, "value", outcome.status))
        if status not in model.STATUSES:
            raise CoreOutputError(f"task {task.name!r} has an unknown status {status!r}")
        if status not in model.PLACED_STATUSES:
            out[task.name] = TaskState(status, None, ())
            continue
        if outcome.node not in nodes:
            raise CoreOutputError(
                f"task {task.name!r} is {status} on {outcome.node!r}, which is not a node"
            )
        assert outcome.node is not None
        groups: tuple[str, ...] = ()
        if task.request.is_shared:
            groups = tuple(outcome.gpu_groups)
            prefix = outcome.node + "/"
            devices = task.request.gpu_devices
            if (
                len(set(groups)) != devices
                or len(groups) != devices
                or any(not g.startswith(prefix) or g == prefix for g in groups)
            ):
                raise CoreOutputError(
                    f"shared-GPU task {task.name!r} is {status} on {outcome.node!r} with GPU "
                    f"groups {list(groups)!r}; expected {devices} distinct '{prefix}<id>'"
                )
        out[task.name] = TaskState(status, outcome.node, groups)
    return out


def advance(scenario: model.Scenario, result: Mapping[str, TaskState]) -> State:
    """The update rules of "mode: rounds": the input of the next round."""
    deleted = {task.name for job in scenario.jobs if job.deleted for task in job.tasks}
    out: State = {}
    for name, task in result.items():
        if task.status == "Binding":
            out[name] = TaskState("Running", task.node, task.gpu_groups)
        elif task.status == "Pipelined" or (task.status == "Releasing" and name not in deleted):
            out[name] = TaskState("Pending", None, ())
        else:
            out[name] = task
    return out
