"""Shell completion: argcomplete's protocol driven through its environment variables in a real
``kai`` process, and the scripts of ``kai completion`` sourced by a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KAI = [sys.executable, "-m", "kai.cli"]


def complete(line: str, tmp_path: Path) -> list[str]:
    """What a shell offers after typing ``line`` and pressing Tab."""
    answer = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",  # the first word of COMP_LINE is the program, whatever runs it
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    out = subprocess.run([*KAI], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [word.rstrip() for word in answer.read_text().split("\n")]


def test_command_names(tmp_path: Path) -> None:
    assert complete("kai val", tmp_path) == ["validate"]
    assert complete("kai help si", tmp_path) == ["simulate"]
    offered = complete("kai ", tmp_path)
    assert {"validate", "render", "simulate", "up", "completion", "help"} <= set(offered)


def test_options_of_the_command_on_the_line(tmp_path: Path) -> None:
    assert complete("kai validate --out", tmp_path) == ["--output"]
    assert complete("kai validate -o ", tmp_path) == ["text", "json", "yaml"]
    assert set(complete("kai scheduler --log-", tmp_path)) == {"--log-level", "--log-format"}
    assert complete("kai completion ", tmp_path)[-3:] == ["bash", "zsh", "fish"]
    assert complete("kai --col", tmp_path) == ["--color"]


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nospace -o default -o bashdefault -F _python_argcomplete kai"),
        ("zsh", "#compdef kai"),
        ("fish", "complete --command kai"),
    ],
)
def test_completion_scripts(shell: str, marker: str) -> None:
    out = subprocess.run([*KAI, "completion", shell], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and marker in out.stdout


def test_bash_sources_the_script_and_completes(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    kai = Path(sys.executable).parent / "kai"
    if bash is None or not kai.exists():
        pytest.skip("needs bash and the installed `kai` script")
    script = subprocess.run(
        [str(kai), "completion", "bash"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    (tmp_path / "kai.bash").write_text(script)
    probe = (
        f"source {tmp_path / 'kai.bash'}\n"
        'COMP_LINE="kai validate --out"; COMP_POINT=${#COMP_LINE}\n'
        "COMP_WORDS=(kai validate --out); COMP_CWORD=2\n"
        "_python_argcomplete kai\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{kai.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        [bash, "--norc", "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.stdout.split() == ["--output"], out.stdout + out.stderr
