""".pre-commit-config.yaml runs the suite's code-quality gates with the project's own tools.

The gates themselves run in tests/unit/test_code_quality.py; this only checks that the hooks
name the same tools, need nothing from the network (local hooks, system language) and that each
tool is installed next to the interpreter running the tests, as the hooks expect.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".pre-commit-config.yaml"
GATES = {
    "ruff": ["ruff", "check", "controllers", "tests", "bench"],
    "ruff-format": ["ruff", "format", "--check", "controllers", "tests", "bench"],
    "mypy": ["mypy"],
    "import-linter": ["lint-imports"],
}


def _hooks() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load(CONFIG.read_text())
    hooks: dict[str, dict[str, Any]] = {}
    for repo in config["repos"]:
        assert repo["repo"] == "local", f"{repo['repo']}: only local hooks (offline, pinned tools)"
        for hook in repo["hooks"]:
            hooks[hook["id"]] = hook
    return hooks


def test_the_hooks_are_the_suites_gates() -> None:
    hooks = _hooks()
    assert set(hooks) == set(GATES)
    for hook_id, command in GATES.items():
        hook = hooks[hook_id]
        entry = shlex.split(hook["entry"])
        assert entry[0] == f".venv/bin/{command[0]}", hook_id
        assert entry[1:] == command[1:], hook_id
        assert hook["language"] == "system", hook_id
        assert hook["pass_filenames"] is False, f"{hook_id}: the gates check the whole tree"


def test_each_tool_is_installed_with_the_dev_extras() -> None:
    bin_dir = Path(sys.executable).parent
    missing = [c[0] for c in GATES.values() if not (bin_dir / c[0]).exists()]
    assert not missing, f"not in {bin_dir}: {missing}; install the dev extras"
    assert (bin_dir / "pre-commit").exists(), "pre-commit is part of the dev extras"
