"""The code-quality gates of the project, run as part of the test suite so `.ci/run` enforces them:
ruff (lint, with the C90/PLR complexity rules), `ruff format --check`, mypy --strict on every
package under `controllers/`, and the import-linter contracts.

Each gate is also checked to bite: a planted violation in a throw-away copy of the tree must make
it fail, so a gate that silently stopped checking (a path typo, a dropped contract) shows up here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHECKED = ["controllers", "tests", "bench"]


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; install the dev extras: pip install -e '.[dev]'")
    return found


def _proc(
    args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def _run(args: list[str]) -> None:
    proc = _proc(args)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def _packages() -> set[str]:
    return {p.parent.name for p in (ROOT / "controllers").glob("*/__init__.py")}


def test_ruff_is_clean() -> None:
    _run([_tool("ruff"), "check", *CHECKED])


def test_ruff_format_is_clean() -> None:
    proc = _proc([_tool("ruff"), "format", "--check", *CHECKED])
    assert proc.returncode == 0, (
        "ruff format would change these files; run `ruff format controllers tests bench`:\n"
        f"{proc.stdout}\n{proc.stderr}"
    )


def test_complexity_rules_are_on() -> None:
    lint = _pyproject()["tool"]["ruff"]["lint"]
    assert {"C90", "PLR"} <= set(lint["select"])
    assert lint["mccabe"]["max-complexity"] <= 15
    assert lint["pylint"]["max-branches"] <= 15
    assert lint["pylint"]["max-statements"] <= 60


def test_mypy_config_is_strict_on_every_package() -> None:
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy.get("strict") is True
    assert set(mypy["packages"]) == _packages(), (
        "every package under controllers/ must be listed in [tool.mypy] packages"
    )
    strict_flags = {"strict", "disallow_untyped_defs", "disallow_any_generics", "warn_return_any"}
    for override in mypy.get("overrides", []):
        loosened = {k for k in strict_flags if override.get(k) is False}
        if override.get("ignore_errors"):
            loosened.add("ignore_errors")
        assert not loosened, f"a mypy override loosens {sorted(loosened)}: {override}"


def test_mypy_strict_on_the_whole_package() -> None:
    # the packages and `strict = true` come from pyproject.toml (checked above)
    _run([_tool("mypy")])


def test_import_layers_hold() -> None:
    _run([_tool("lint-imports")])


REQUIRED_CONTRACTS = {
    # (type, source or modules, a module that must be forbidden) -> what the project relies on
    ("forbidden", "kai.scheduler", "kai.kube"): "the core imports only kai.api",
    ("forbidden", "kai.scheduler", "kai.gitops"): "the core imports only kai.api",
    ("forbidden", "kai.kube", "kai.scheduler"): "kai.kube imports no core",
    ("forbidden", "kube_emulator", "kai"): "the emulator imports nothing from kai",
    ("independence", "kai.gitops", "kai.scheduler"): "gitops and the core are independent",
}


def _declared_contracts() -> set[tuple[str, str, str]]:
    declared: set[tuple[str, str, str]] = set()
    for contract in _pyproject()["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "forbidden":
            for source in contract["source_modules"]:
                for target in contract["forbidden_modules"]:
                    declared.add(("forbidden", source, target))
        elif contract["type"] == "independence":
            modules = contract["modules"]
            for a in modules:
                for b in modules:
                    declared.add(("independence", a, b))
    return declared


@pytest.mark.parametrize("contract", sorted(REQUIRED_CONTRACTS), ids=lambda c: "-".join(c))
def test_required_layer_contract_is_declared(contract: tuple[str, str, str]) -> None:
    assert contract in _declared_contracts(), (
        f"pyproject.toml lost the import-linter contract: {REQUIRED_CONTRACTS[contract]}"
    )


def _copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "controllers",
        tree / "controllers",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


# a planted import per contract the project relies on, and the contract that must report it
PLANTED = [
    ("kai/scheduler/_planted.py", "import kai.kube\n", "The scheduler core imports only kai.api"),
    ("kai/gitops/_planted.py", "import kai.scheduler\n", "The GitOps compiler and the scheduler"),
    ("kai/kube/_planted.py", "import kai.scheduler\n", "kai.kube (cluster access)"),
    ("kube_emulator/_planted.py", "import kai.api\n", "kube_emulator) imports nothing from kai"),
]


@pytest.mark.parametrize(("module", "source", "contract"), PLANTED, ids=[p[0] for p in PLANTED])
def test_import_linter_reports_a_broken_contract(
    tmp_path: Path, module: str, source: str, contract: str
) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "controllers" / module).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(tree / "controllers")}
    proc = _proc([_tool("lint-imports"), "--no-cache"], cwd=tree, env=env)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, f"lint-imports missed a planted import in {module}:\n{out}"
    assert f"{contract}" in out and "BROKEN" in out, out


def test_ruff_format_check_reports_an_unformatted_file(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "controllers" / "kai" / "_planted.py").write_text("x = {  'a':1 }\n")
    proc = _proc([_tool("ruff"), "format", "--check", "controllers"], cwd=tree)
    assert proc.returncode != 0 and "_planted.py" in proc.stdout + proc.stderr


def test_ruff_reports_a_too_complex_function(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(20))
    (tree / "controllers" / "kai" / "_planted.py").write_text(
        f"def f(x: int) -> int:\n{branches}    return -1\n"
    )
    proc = _proc([_tool("ruff"), "check", "controllers/kai/_planted.py"], cwd=tree)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "C901" in out and "PLR0912" in out, out
