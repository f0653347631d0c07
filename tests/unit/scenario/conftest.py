"""Fixtures: small scenarios built from Python data, written to a file and loaded for real."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai.scenario import Scenario, load_scenario

UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def node(name: str, gpus: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpus": gpus,
        "cpuMillis": 20000000,
        "memoryBytes": 20000000000,
        "gpuMemoryMiB": 100,
        "maxPods": 110,
        "labels": {},
        **extra,
    }


def task(name: str, status: str = "Pending", **extra: Any) -> dict[str, Any]:
    request = {"cpuMillis": 1000, "memoryBytes": 1000000}
    request.update(extra.pop("request", {"gpus": 1}))
    return {"name": name, "status": status, "request": request, **extra}


def job(name: str, tasks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "q",
        "priority": 50,
        "preemptible": True,
        "createdMinutesAgo": 1,
        "minAvailable": extra.pop("minAvailable", len(tasks)),
        "tasks": tasks,
        **extra,
    }


def document(
    nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "formatVersion": 1,
        "id": "unit/scenario",
        "mode": "single-session",
        "actions": ["allocate"],
        "config": {
            "kaiPlugins": "default",
            "predicates": True,
            "proportion": True,
            "placement": {"gpu": "binpack", "cpu": "binpack"},
            "gpuSharingPlacement": "pack",
            "stalenessGracePeriodSeconds": 60,
            "maxConsolidationPreemptees": 16,
            "allowConsolidatingReclaim": True,
            "fairShareKValue": 1,
        },
        "nodes": nodes,
        "queues": [
            {
                "name": "q",
                "parent": None,
                "priority": 100,
                "creationRank": 0,
                "gpu": dict(UNLIMITED),
                "cpuMillis": dict(UNLIMITED),
                "memoryBytes": dict(UNLIMITED),
            }
        ],
        "jobs": jobs,
        **extra,
    }


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[[dict[str, Any]], str]:
    counter = iter(range(1000))

    def write(data: dict[str, Any]) -> str:
        path = tmp_path / f"scenario{next(counter)}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    return write


@pytest.fixture
def make_scenario(write_scenario: Callable[[dict[str, Any]], str]) -> Callable[..., Scenario]:
    def make(data: dict[str, Any]) -> Scenario:
        return load_scenario(write_scenario(data))

    return make
