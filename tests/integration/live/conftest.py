"""Fixtures for the live-component tests: a fresh embedded API server per test, a raw-JSON
client on it, and helpers to start the pieces of the live system with short periods."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kai.kube.client import Kube
from kai.sim.apiserver import ApiServer


@pytest.fixture
def server() -> Iterator[ApiServer]:
    srv = ApiServer(bookmark_interval=0.2).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def kubeconfig(server: ApiServer, tmp_path: Path) -> str:
    return str(server.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def kube(kubeconfig: str) -> Iterator[Kube]:
    k = Kube.from_kubeconfig(kubeconfig)
    try:
        yield k
    finally:
        k.close()


def eventually(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        time.sleep(interval)
    if last is not None:
        raise last
    raise AssertionError(f"condition not met within {timeout}s")
