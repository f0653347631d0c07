"""Comparing a scenario's outcome with its ``expected`` block (``kai simulate --check``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kai.scenario import model
from kai.scenario.convert import TaskState
from kai.scenario.figures import Figures
from kai.scenario.rounds import Round


@dataclass(frozen=True)
class CheckedState:
    """One state compared with ``expected``: round number (from 1) and ``result`` or ``next``."""

    round: int
    stage: str
    tasks: Mapping[str, TaskState]


@dataclass(frozen=True)
class Mismatch:
    round: int
    stage: str
    kind: str  # task | node
    name: str
    detail: str

    def line(self) -> str:
        return f"MISMATCH round {self.round} {self.stage}: {self.kind} {self.name}: {self.detail}"


def checked_states(scenario: model.Scenario, rounds: list[Round]) -> list[CheckedState]:
    """The states ``--check`` compares, in order."""
    if scenario.rounds is None:
        return [CheckedState(1, "result", rounds[0].result)]
    until = scenario.rounds.until_match
    first = rounds[until - 1].next
    assert first is not None
    states = [CheckedState(until, "next", first)]
    for index in range(until, until + scenario.rounds.after_match):
        states.append(CheckedState(index + 1, "result", rounds[index].result))
    return states


def format_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def compare(
    expected: model.Expected, state: CheckedState, figures: Mapping[str, Figures]
) -> list[Mismatch]:
    """Every difference between one state and the expectations (tasks first, in the order of
    ``expected``, then nodes)."""
    out: list[Mismatch] = []
    for name, want in expected.tasks.items():
        got = state.tasks[name]
        if got.status == want.status and (want.node is None or got.node == want.node):
            continue
        wanted = want.status if want.node is None else f"{want.status} on {want.node}"
        actual = got.status
        if want.node is not None and got.node is not None:
            actual = f"{got.status} on {got.node}"
        out.append(
            Mismatch(state.round, state.stage, "task", name, f"expected {wanted}, got {actual}")
        )
    for name, want_figures in expected.nodes.items():
        have = figures[name]
        if have.idle_gpus == want_figures.idle_gpus and (
            have.releasing_gpus == want_figures.releasing_gpus
        ):
            continue
        detail = (
            f"expected idleGpus={format_number(want_figures.idle_gpus)} "
            f"releasingGpus={format_number(want_figures.releasing_gpus)}, "
            f"got idleGpus={format_number(have.idle_gpus)} "
            f"releasingGpus={format_number(have.releasing_gpus)}"
        )
        out.append(Mismatch(state.round, state.stage, "node", name, detail))
    return out
