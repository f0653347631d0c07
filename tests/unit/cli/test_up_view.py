"""`kai up`'s live view keeps the kubeconfig and the metrics URL on screen: in the header and
in the last line, with only as many queues and pods as the terminal has lines for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kai.commands.up import View


class _Cache:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}

    def items(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get(name)


def _system(queues: int, pods: int) -> Any:
    qs = [{"metadata": {"name": f"q{i:02d}"}, "spec": {}} for i in range(queues)]
    ps = [
        {
            "metadata": {"name": f"pod-{i:03d}", "namespace": "work"},
            "spec": {"nodeName": "gpu-node-00"},
            "status": {"phase": "Running"},
        }
        for i in range(pods)
    ]
    informers = {"pods": _Cache(ps), "queues": _Cache(qs)}
    return SimpleNamespace(informers={"scheduler": informers}, scheduler=None)


KUBECONFIG = Path("/tmp/kai-up-x/kubeconfig")
METRICS = "http://127.0.0.1:9999/metrics"


@pytest.mark.parametrize(("height", "queues", "pods"), [(24, 5, 100), (12, 30, 10), (40, 2, 3)])
def test_the_view_fits_the_terminal_and_keeps_the_kubeconfig(
    height: int, queues: int, pods: int
) -> None:
    screen = View(_system(queues, pods)).render("https://x", KUBECONFIG, METRICS, height=height)
    lines = screen.rstrip("\n").split("\n")
    assert len(lines) <= height
    where = f"kubeconfig: {KUBECONFIG}   metrics: {METRICS}"
    assert lines[1] == where and lines[-1] == where
    if pods == 3:  # room for everything
        assert sum("pod-" in line for line in lines) == 3


def test_without_a_height_every_queue_and_up_to_40_pods() -> None:
    screen = View(_system(30, 50)).render("https://x", KUBECONFIG)
    assert sum(line.startswith("q") for line in screen.splitlines()) == 30
    assert "... and 10 more pods" in screen
    assert "metrics:" not in screen  # --metrics-port -1
