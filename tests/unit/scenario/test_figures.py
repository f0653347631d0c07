"""Node figures idleGpus / releasingGpus exactly as docs/scenario-format.md defines them."""

from __future__ import annotations

from collections.abc import Callable

from kai.scenario import Scenario, TaskState, node_figures
from kai.scenario.figures import Figures

from .conftest import document, job, node, task


def _scenario(make: Callable[..., Scenario]) -> Scenario:
    shared = {"gpuFraction": 0.5}
    tasks = [
        task("whole1", "Running", node="n0"),
        task("whole2", "Releasing", node="n0", request={"gpus": 2}),
        task("whole-pipe", "Pipelined", node="n0"),
        task("bind", "Binding", node="n1", request={"gpus": 3}),
        task("sa1", "Running", node="n0", request=shared, gpuGroups=["n0/a"]),
        task("sa2", "Releasing", node="n0", request=shared, gpuGroups=["n0/a"]),
        task("sb", "Releasing", node="n0", request=shared, gpuGroups=["n0/b"]),
        task("sc", "Pipelined", node="n0", request={"gpuMemoryMiB": 30}, gpuGroups=["n0/c"]),
        task(
            "mig", "Running", node="n1", request={"gpus": 0, "mig": {"nvidia.com/mig-1g.10gb": 1}}
        ),
        task("cpu", "Running", node="n1", request={"gpus": 0}),
        task("pending", "Pending"),
        task("failed", "Failed", request={"gpus": 4}),
    ]
    return make(document([node("n0", 8), node("n1", 4)], [job("j", tasks, minAvailable=1)]))


def test_figures_of_the_input_state(make_scenario: Callable[..., Scenario]) -> None:
    scenario = _scenario(make_scenario)
    state = {t.name: TaskState(t.status, t.node, t.gpu_groups) for t in scenario.tasks()}
    # n0: whole held = 1 + 2 (the Pipelined task holds nothing yet); shared devices a, b, c;
    # releasing = 2 - 1 (pipelined claims one) + 1 (device b, all of whose tasks are releasing)
    assert node_figures(scenario, state) == {
        "n0": Figures(idle_gpus=8 - 3 - 3, releasing_gpus=2),
        "n1": Figures(idle_gpus=1, releasing_gpus=0),
    }


def test_releasing_never_below_zero(make_scenario: Callable[..., Scenario]) -> None:
    tasks = [
        task("rel", "Releasing", node="n0"),
        task("pipe", "Pipelined", node="n0", request={"gpus": 3}),
    ]
    scenario = make_scenario(document([node("n0", 4)], [job("j", tasks)]))
    state = {t.name: TaskState(t.status, t.node, t.gpu_groups) for t in scenario.tasks()}
    assert node_figures(scenario, state) == {"n0": Figures(idle_gpus=3, releasing_gpus=0)}


def test_figures_follow_the_given_state(make_scenario: Callable[..., Scenario]) -> None:
    scenario = _scenario(make_scenario)
    state = {t.name: TaskState("Pending", None, ()) for t in scenario.tasks()}
    state["sb"] = TaskState("Running", "n0", ("n0/b",))
    assert node_figures(scenario, state) == {
        "n0": Figures(idle_gpus=7, releasing_gpus=0),
        "n1": Figures(idle_gpus=4, releasing_gpus=0),
    }
