"""constraints.txt (the exact versions CI installs) kept in step with pyproject.toml's ranges.

pyproject.toml says which packages kai needs and which versions are compatible; constraints.txt
pins one tested version of each of them and of everything they pull in. These tests fail when a
dependency was added, dropped or re-ranged in pyproject.toml without regenerating the pins with
``.ci/update-constraints``.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
REGENERATE = "regenerate it with .ci/update-constraints"


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _direct_requirements() -> dict[str, list[Requirement]]:
    """Every requirement of the runtime and of each extra, by where it is declared."""
    project = _project()
    out: dict[str, list[Requirement]] = {"dependencies": []}
    out["dependencies"] = [Requirement(r) for r in project["dependencies"]]  # type: ignore[attr-defined]
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    for extra, reqs in extras.items():
        out[f"[{extra}]"] = [Requirement(r) for r in reqs]
    return out


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, raw in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt:{number}: {raw!r} is not an exact pin 'name==version'"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _applies(req: Requirement, extra: str = "") -> bool:
    if req.marker is None:
        return True
    env = {**default_environment(), "extra": extra}
    return bool(req.marker.evaluate(env))


def _third_party(reqs: list[Requirement]) -> list[Requirement]:
    return [r for r in reqs if canonicalize_name(r.name) != DISTRIBUTION and _applies(r)]


def test_every_direct_dependency_is_pinned_inside_its_range() -> None:
    pins = _pins()
    problems = []
    for where, reqs in _direct_requirements().items():
        for req in _third_party(reqs):
            pin = pins.get(canonicalize_name(req.name))
            if pin is None:
                problems.append(f"{req.name} ({where}) has no pin in constraints.txt")
            elif not req.specifier.contains(pin, prereleases=True):
                problems.append(
                    f"{req.name} ({where}): the pin {pin} is outside the range '{req.specifier}'"
                )
    assert not problems, f"constraints.txt is stale ({REGENERATE}):\n  " + "\n  ".join(problems)


def test_ranges_are_bounded_above() -> None:
    """Compatible ranges, never open-ended: a new major version is tried before it is let in."""
    open_ended = [
        f"{req} ({where})"
        for where, reqs in _direct_requirements().items()
        for req in _third_party(reqs)
        if not any(spec.operator in ("<", "<=", "==", "~=") for spec in req.specifier)
    ]
    assert not open_ended, "requirements without an upper bound: " + ", ".join(open_ended)


def _closure(roots: list[Requirement]) -> dict[str, str]:
    """The installed distributions these requirements pull in, transitively: name -> version."""
    seen: dict[str, str] = {}
    stack: list[tuple[Requirement, str]] = [(r, "") for r in roots]
    while stack:
        req, extra = stack.pop()
        if not _applies(req, extra):
            continue
        name = canonicalize_name(req.name)
        extras_needed = sorted(req.extras)
        key = name if not extras_needed else f"{name}[{','.join(extras_needed)}]"
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            pytest.fail(f"{req.name} is required but not installed: reinstall the dev environment")
        seen[key] = dist.version
        seen.setdefault(name, dist.version)
        for raw in dist.requires or []:
            sub = Requirement(raw)
            if sub.marker is None or not extras_needed:
                stack.append((sub, ""))
            else:
                stack.extend((sub, e) for e in extras_needed)
    return {k: v for k, v in seen.items() if "[" not in k and k != DISTRIBUTION}


def test_constraints_list_exactly_what_the_dev_install_pulls_in() -> None:
    """Nothing missing, nothing left over from a dependency that was dropped.

    The walk reads the installed packages' metadata, so it is exact only in an environment
    installed from constraints.txt (as .ci/run does); elsewhere it is skipped."""
    pins = _pins()
    # kai itself is installed editable: start from what it declares (runtime and every extra).
    roots = [r for reqs in _direct_requirements().values() for r in _third_party(reqs)]
    needed = _closure(roots)
    drifted = {n: v for n, v in needed.items() if n in pins and Version(v) != pins[n]}
    if drifted:
        pytest.skip(
            "this environment was not installed from constraints.txt ("
            + ", ".join(f"{n} {v} != {pins[n]}" for n, v in sorted(drifted.items()))
            + ")"
        )
    missing = sorted(set(needed) - set(pins))
    extra = sorted(set(pins) - set(needed))
    assert not missing and not extra, (
        f"constraints.txt is stale ({REGENERATE}): "
        f"not pinned: {missing or 'none'}; pinned but no longer required: {extra or 'none'}"
    )
