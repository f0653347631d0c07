"""End-to-end fixtures: the whole live system (scheduler, binder, pod-grouper, simulated nodes
and kubelet) on a fresh embedded API server, with short periods so tests stay fast."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # e2e_helpers
sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "live"))  # live_helpers

from e2e_helpers import Cluster

from kai.kube.client import Kube
from kai.sim.system import System, SystemOptions, bootstrap
from kube_emulator import ApiServer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    server = ApiServer(bookmark_interval=0.2).start()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    kube = Kube.from_kubeconfig(kubeconfig)
    systems: list[System] = []

    def start_system(**overrides: Any) -> System:
        options = SystemOptions(
            period=0.2,
            status_period=0.3,
            lease_duration=2.0,
            renew_period=0.5,
            retry_period=0.1,
        )
        for key, value in overrides.items():
            setattr(options, key, value)
        system = System(kubeconfig, options).start()
        systems.append(system)
        return system

    bootstrap(kube)
    try:
        yield Cluster(server, kubeconfig, kube, start_system)
    finally:
        for system in systems:
            system.stop()
        kube.close()
        server.stop()
