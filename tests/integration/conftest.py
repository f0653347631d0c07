"""Fixtures for the API conformance tests.

By default every test talks to an embedded ``kube_emulator`` started on a free port. With
``KAI_TEST_KUBECONFIG=/path/to/kubeconfig`` the same tests run against that (real) cluster;
tests that need the embedded server's knobs (fault injection, compaction, the pod-deletion
rule, local webhooks) are skipped there. Each test gets its own namespace.
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("KAI_TEST_KUBECONFIG")
    if external:
        path = Path(external)
        yield Cluster(path, config.new_client_from_config(str(path)), None)
        return
    from kube_emulator import ApiServer

    server = ApiServer(bookmark_interval=0.5).start()
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
