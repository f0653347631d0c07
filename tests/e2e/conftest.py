"""End-to-end fixtures: the whole live system (scheduler, binder, pod-grouper, simulated nodes
and kubelet) on a fresh embedded API server, with short periods so tests stay fast."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # e2e_helpers
sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "live"))  # live_helpers

from e2e_helpers import Cluster, system_starter

from kai.kube.client import Kube
from kai.sim.system import System, bootstrap
from kube_emulator import ApiServer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    server = ApiServer(bookmark_interval=0.2).start()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    kube = Kube.from_kubeconfig(kubeconfig)
    systems: list[System] = []

    bootstrap(kube)
    try:
        yield Cluster(server, kubeconfig, kube, system_starter(kubeconfig, systems))
    finally:
        for system in systems:
            system.stop()
        kube.close()
        server.stop()
