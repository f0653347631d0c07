"""The declared dependencies are what the code imports.

``[project].dependencies`` is exactly what ``kai`` imports at run time; the ``local`` extra holds
what the embedded API server (``kube_emulator``) imports beyond that. Both are derived here from
the sources (every ``import`` statement, top-level or inside a function) and the installed
distributions' metadata, so a new import without its dependency, or a dependency nothing imports
any more, fails.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "controllers"
FIRST_PARTY = {"kai", "kube_emulator"}


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _names(reqs: object) -> set[str]:
    assert isinstance(reqs, list)
    return {canonicalize_name(Requirement(r).name) for r in reqs} - {"kai-gitops-scheduler"}


def _imported_distributions(package: str) -> dict[str, set[str]]:
    """Third-party distributions the package imports -> the modules importing them."""
    owners = md.packages_distributions()
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGES / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in FIRST_PARTY or top in sys.stdlib_module_names or top == "__future__":
                    continue
                assert top in owners, f"{path}: imports {top!r}, which no installed package has"
                for dist in owners[top]:
                    found.setdefault(canonicalize_name(dist), set()).add(
                        str(path.relative_to(PACKAGES))
                    )
    return found


def _feature_extras() -> set[str]:
    """What the optional features import (extras other than ``local`` and ``dev``, e.g.
    ``plot``): imported only where the feature runs, with a message naming the extra."""
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    return set().union(*(_names(v) for k, v in extras.items() if k not in ("local", "dev")))


def test_runtime_dependencies_are_what_kai_imports() -> None:
    declared = _names(_project()["dependencies"])
    imported = _imported_distributions("kai")
    optional = _feature_extras()
    undeclared = {
        d: sorted(m)[:3] for d, m in imported.items() if d not in declared and d not in optional
    }
    # the embedded API server ships with kai (`kai up`): what only it imports is a runtime
    # dependency too
    unused = sorted(declared - set(imported) - set(_imported_distributions("kube_emulator")))
    assert not undeclared, f"kai imports packages missing from [project].dependencies: {undeclared}"
    assert not unused, f"[project].dependencies that kai never imports (move or drop): {unused}"


def test_the_local_extra_holds_what_the_emulator_imports() -> None:
    project = _project()
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    local = _names(extras["local"])
    imported = _imported_distributions("kube_emulator")
    assert set(imported) == local, (
        f"the emulator imports {sorted(imported)}; the local extra lists {sorted(local)}"
    )
    assert "kai-gitops-scheduler[local]" in extras["dev"], (
        "the dev extra brings the emulator's dependencies"
    )


def test_apiserver_tls_without_its_dependency_says_how_to_install_it() -> None:
    """Without the ``cryptography`` package (not installed with plain
    ``pip install kai-gitops-scheduler``), ``kai apiserver --tls`` refuses to start and names
    the extra that brings it."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["cryptography"] = None  # as if it were not installed
        from kai.cli import main
        sys.exit(main(["apiserver", "--tls", "--port", "0"]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(PACKAGES)},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (
        "kai apiserver: --tls needs the 'cryptography' package: "
        "pip install 'kai-gitops-scheduler[local]'\n"
    )
