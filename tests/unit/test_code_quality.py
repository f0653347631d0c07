"""The code-quality gates of the project, run as part of the test suite so `.ci/run` enforces them:
ruff (lint), mypy --strict on the API and GitOps layers, and the import-linter layer contracts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; install the dev extras: pip install -e '.[dev]'")
    return found


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def test_ruff_is_clean() -> None:
    _run([_tool("ruff"), "check", "controllers", "tests", "bench"])


def test_mypy_strict_on_api_and_gitops() -> None:
    _run([_tool("mypy"), "--strict", "-p", "kai.api", "-p", "kai.gitops"])


def test_import_layers_hold() -> None:
    _run([_tool("lint-imports")])
