"""Node figures of a task state, ``idleGpus`` and ``releasingGpus`` (see "Node figures").

Only whole devices are counted (MIG instances are not). A whole-GPU task uses its ``gpus``
devices; shared-GPU tasks use the distinct devices named by their ``gpuGroups``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kai.scenario import model
from kai.scenario.convert import TaskState

#: whole-GPU tasks in these statuses hold their devices (Pipelined ones wait for released ones)
_HOLDING = frozenset({"Running", "Binding", "Allocated", "Bound", "Releasing"})


@dataclass(frozen=True)
class Figures:
    idle_gpus: int
    releasing_gpus: int


def node_figures(scenario: model.Scenario, state: Mapping[str, TaskState]) -> dict[str, Figures]:
    """The figures of every node of the scenario, in the file's node order."""
    requests = {task.name: task.request for task in scenario.tasks()}
    used = {node.name: 0 for node in scenario.nodes}
    releasing = dict.fromkeys(used, 0)
    pipelined = dict.fromkeys(used, 0)
    # node -> device -> whether every placed task on it is Releasing
    shared: dict[str, dict[str, bool]] = {name: {} for name in used}
    for name, task in state.items():
        if task.status not in model.PLACED_STATUSES or task.node not in used:
            continue
        request = requests[name]
        if request.is_shared:
            devices = shared[task.node]
            for group in task.gpu_groups:
                devices[group] = devices.get(group, True) and task.status == "Releasing"
            continue
        gpus = request.whole_gpus
        if task.status in _HOLDING:
            used[task.node] += gpus
        if task.status == "Releasing":
            releasing[task.node] += gpus
        elif task.status == "Pipelined":
            pipelined[task.node] += gpus
    out: dict[str, Figures] = {}
    for node in scenario.nodes:
        devices = shared[node.name]
        freed_shared = sum(1 for all_releasing in devices.values() if all_releasing)
        out[node.name] = Figures(
            idle_gpus=node.gpus - used[node.name] - len(devices),
            releasing_gpus=max(0, releasing[node.name] - pipelined[node.name] + freed_shared),
        )
    return out
