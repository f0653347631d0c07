"""Fixtures for the API conformance tests.

Every test that uses ``cluster`` runs against two servers, the test id saying which:

- ``embedded``: a ``kube_emulator`` started on a free port;
- ``real``: a real kube-apiserver -- ``$KAI_TEST_KUBECONFIG`` if set, else this worker's
  ``real_cluster`` (a v1.36 control plane from ``../shared/real-k8s``; skipped where absent).

``KAI_CONFORMANCE_SERVERS=embedded`` (or ``real``) runs one of them only. Tests that need the
embedded server's knobs (fault injection, compaction, the pod-deletion rule, local webhooks)
skip on the real one, each naming why. Each test gets its own namespace; a real cluster's
controllers add ConfigMaps (``kube-root-ca.crt``) to it, so tests do not assume it is empty.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).parent))  # for k8s_helpers


@dataclass
class Cluster:
    kubeconfig: Path
    api: client.ApiClient
    server: Any | None  # the embedded ApiServer, None for a real cluster

    @property
    def embedded(self) -> bool:
        return self.server is not None

    def need_embedded(self, why: str) -> Any:
        if self.server is None:
            pytest.skip(f"needs the embedded API server: {why}")
        return self.server


SERVERS = ("embedded", "real")


def _servers() -> list[str]:
    wanted = os.environ.get("KAI_CONFORMANCE_SERVERS", ",".join(SERVERS))
    chosen = [s.strip() for s in wanted.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SERVERS))
    if unknown or not chosen:
        raise pytest.UsageError(
            f"KAI_CONFORMANCE_SERVERS={wanted!r}: expected a comma-separated subset of "
            f"{', '.join(SERVERS)}"
        )
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cluster" in metafunc.fixturenames:
        metafunc.parametrize("cluster", _servers(), indirect=True, scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    if request.param == "real":
        external = os.environ.get("KAI_TEST_KUBECONFIG")
        path = Path(external) if external else request.getfixturevalue("real_cluster").kubeconfig
        api = config.new_client_from_config(str(path))
        try:
            yield Cluster(path, api, None)
        finally:
            api.close()
        return
    from kube_emulator import ApiServer

    # the test endpoints: tests/integration/test_faults.py switches faults over HTTP
    # HTTPS: kubectl and helm send the token over HTTPS only
    server = ApiServer(bookmark_interval=0.5, enable_test_endpoints=True, tls=True).start()
    path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    api = config.new_client_from_config(str(path))
    try:
        yield Cluster(path, api, server)
    finally:
        api.close()
        server.stop()


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api)


@pytest.fixture
def ns(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    v1 = client.CoreV1Api(cluster.api)
    v1.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        v1.delete_namespace(name, grace_period_seconds=0)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
