"""Single-session and rounds runs against scripted sessions, with the update rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kai.scenario import CoreOutputError, Scenario, TaskState, advance, run_scenario
from kai.scheduler.result import SessionResult, TaskOutcome
from kai.scheduler.snapshot import Snapshot, TaskStatus

from .conftest import document, job, node, task

S = TaskStatus


class Script:
    """A session that returns prepared outcomes, one dict per call, and records its inputs."""

    def __init__(self, *results: dict[str, TaskOutcome]) -> None:
        self.results = list(results)
        self.inputs: list[Snapshot] = []
        self.actions: list[Sequence[str]] = []

    def __call__(self, snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
        self.inputs.append(snapshot)
        self.actions.append(actions)
        outcomes = {
            t.uid: TaskOutcome(t.status, t.node, t.gpu_groups)
            for j in snapshot.jobs
            for t in j.tasks
        }
        outcomes.update(self.results.pop(0))
        return SessionResult(tasks=outcomes)


def _rounds_scenario(make: Callable[..., Scenario], until: int = 1, after: int = 1) -> Scenario:
    shared = {"gpuFraction": 0.5}
    data = document(
        [node("n0", 4), node("n1", 4)],
        [
            job("j0", [task("bind"), task("pipe"), task("fail", "Failed")], minAvailable=1),
            job(
                "j1",
                [
                    task("evict", "Running", node="n1"),
                    task("share", "Running", node="n1", request=shared, gpuGroups=["n1/x"]),
                ],
                minAvailable=1,
            ),
            job("j2", [task("gone", "Releasing", node="n0")], deleted=True),
        ],
        mode="rounds",
        rounds={"untilMatch": until, "afterMatch": after},
    )
    data["actions"] = ["allocate", "reclaim"]
    return make(data)


def test_update_rules(make_scenario: Callable[..., Scenario]) -> None:
    scenario = _rounds_scenario(make_scenario)
    result = {
        "bind": TaskState("Binding", "n0", ()),
        "pipe": TaskState("Pipelined", "n1", ()),
        "fail": TaskState("Failed", None, ()),
        "evict": TaskState("Releasing", "n1", ()),
        "share": TaskState("Binding", "n1", ("n1/x",)),
        "gone": TaskState("Releasing", "n0", ()),
    }
    assert advance(scenario, result) == {
        "bind": TaskState("Running", "n0", ()),
        "pipe": TaskState("Pending", None, ()),
        "fail": TaskState("Failed", None, ()),
        "evict": TaskState("Pending", None, ()),
        "share": TaskState("Running", "n1", ("n1/x",)),
        "gone": TaskState("Releasing", "n0", ()),  # its job is being deleted
    }


def test_rounds_feed_each_result_into_the_next_round(
    make_scenario: Callable[..., Scenario],
) -> None:
    scenario = _rounds_scenario(make_scenario, until=2, after=1)
    script = Script(
        {
            "bind": TaskOutcome(S.BINDING, "n0"),
            "evict": TaskOutcome(S.RELEASING, "n1"),
            "pipe": TaskOutcome(S.PIPELINED, "n1"),
        },
        {"pipe": TaskOutcome(S.BINDING, "n1")},
        {},
    )
    rounds = run_scenario(scenario, script)
    assert len(rounds) == 3 and len(script.inputs) == 3
    assert all(a == ("allocate", "reclaim") for a in script.actions)
    second = {t.uid: (t.status, t.node) for j in script.inputs[1].jobs for t in j.tasks}
    assert second["bind"] == (S.RUNNING, "n0")
    assert second["evict"] == (S.PENDING, None)
    assert second["pipe"] == (S.PENDING, None)
    assert second["gone"] == (S.RELEASING, "n0")
    assert rounds[1].input == rounds[0].next
    assert rounds[2].input == rounds[1].next
    assert rounds[1].result["pipe"] == TaskState("Binding", "n1", ())
    assert rounds[2].result["pipe"] == TaskState("Running", "n1", ())
    assert list(rounds[0].result) == ["bind", "pipe", "fail", "evict", "share", "gone"]


def test_single_session_runs_once_without_next(make_scenario: Callable[..., Scenario]) -> None:
    scenario = make_scenario(document([node("n0")], [job("j", [task("t")])]))
    rounds = run_scenario(scenario, Script({"t": TaskOutcome(S.BINDING, "n0")}))
    assert len(rounds) == 1 and rounds[0].next is None
    assert rounds[0].result == {"t": TaskState("Binding", "n0", ())}


def test_unplaced_outcomes_lose_their_node(make_scenario: Callable[..., Scenario]) -> None:
    scenario = make_scenario(document([node("n0")], [job("j", [task("t", "Running", node="n0")])]))
    rounds = run_scenario(scenario, Script({"t": TaskOutcome(S.FAILED, "n0")}))
    assert rounds[0].result == {"t": TaskState("Failed", None, ())}


def test_whole_gpu_outcomes_have_no_gpu_groups(make_scenario: Callable[..., Scenario]) -> None:
    scenario = make_scenario(document([node("n0")], [job("j", [task("t")])]))
    rounds = run_scenario(scenario, Script({"t": TaskOutcome(S.BINDING, "n0", ("n0/0",))}))
    assert rounds[0].result == {"t": TaskState("Binding", "n0", ())}


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (None, "no outcome for task 't'"),
        (TaskOutcome(S.BINDING, None), "which is not a node"),
        (TaskOutcome(S.BINDING, "n9"), "which is not a node"),
        (TaskOutcome(S.BINDING, "n0", ()), "expected 1 distinct 'n0/<id>'"),
        (TaskOutcome(S.BINDING, "n0", ("n1/0",)), "expected 1 distinct 'n0/<id>'"),
        (TaskOutcome(S.BINDING, "n0", ("n0/0", "n0/1")), "expected 1 distinct 'n0/<id>'"),
    ],
)
def test_outcomes_outside_the_contract_are_core_errors(
    make_scenario: Callable[..., Scenario], outcome: TaskOutcome | None, message: str
) -> None:
    scenario = make_scenario(
        document([node("n0")], [job("j", [task("t", request={"gpuFraction": 0.5})])])
    )

    def session(snapshot: Snapshot, actions: Sequence[str]) -> SessionResult:
        return SessionResult(tasks={} if outcome is None else {"t": outcome})

    with pytest.raises(CoreOutputError, match=message):
        run_scenario(scenario, session)


@pytest.mark.parametrize(
    ("groups", "good"),
    [
        (("n0/0", "n0/1"), True),
        (("n0/0",), False),
        (("n0/0", "n0/0"), False),
        (("n0/0", "n0/1", "n0/2"), False),
    ],
)
def test_a_multi_device_outcome_names_one_group_per_device(
    make_scenario: Callable[..., Scenario], groups: tuple[str, ...], good: bool
) -> None:
    request = {"gpuFraction": 0.5, "gpuDevices": 2}
    scenario = make_scenario(document([node("n0")], [job("j", [task("t", request=request)])]))
    script = Script({"t": TaskOutcome(S.BINDING, "n0", groups)})
    if good:
        assert run_scenario(scenario, script)[0].result["t"] == TaskState("Binding", "n0", groups)
    else:
        with pytest.raises(CoreOutputError, match="expected 2 distinct 'n0/<id>'"):
            run_scenario(scenario, script)
