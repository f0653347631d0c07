"""Fixtures for the live-component tests: a fresh embedded API server per test, a raw-JSON
client on it, and helpers to start the pieces of the live system with short periods."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai.kube.client import Kube
from kube_emulator import ApiServer

sys.path.insert(0, str(Path(__file__).parent))  # for live_helpers


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
