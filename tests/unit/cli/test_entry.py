"""The entry point: help, the registration table, lazy loading, exit statuses (usage, internal
error, Ctrl-C, broken pipe) for every command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kai import cli

ROOT = Path(__file__).resolve().parents[3]
KAI = [sys.executable, "-m", "kai.cli"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "help")
    assert code == 0
    for name, (_, help_text) in cli.COMMANDS.items():
        assert name in out and help_text.split()[0] in out
    assert run(capsys, "--help")[1] == out
    code, out, err = run(capsys)  # no command: the same help, as a usage error
    assert code == 2 and out == "" and "COMMAND" in err


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_help_command_and_help_flag_agree(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, via_help, _ = run(capsys, "help", name)
    assert code == 0 and via_help.startswith(f"usage: kai {name} ")
    code, via_flag, _ = run(capsys, name, "--help")
    assert code == 0 and via_flag == via_help


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_option_has_help_and_shows_its_default(name: str) -> None:
    parser = cli.build_parser(cli.COMMANDS, name)
    child = cli._subcommand(parser, name)
    formatter = child._get_formatter()
    for action in child._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"kai {name} {action.option_strings or action.dest}: no help text"
        if action.option_strings:
            shown = formatter._get_help_string(action) or ""
            assert "(default" in shown, f"kai {name} {action.option_strings}: no default shown"


def test_unknown_command_and_bad_flag_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "nosuch")
    assert code == 2 and "invalid choice: 'nosuch'" in err
    code, _, err = run(capsys, "validate", "--output", "xml")
    assert code == 2 and "invalid choice: 'xml'" in err
    code, _, err = run(capsys, "help", "nosuch")
    assert code == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kai import __version__

    assert run(capsys, "--version")[:2] == (0, f"kai {__version__}\n")


def _imported_after(*argv: str) -> set[str]:
    code = (
        "import sys, contextlib, io\n"
        "from kai.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({list(argv)!r})\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(out.stdout.split())


def test_commands_are_loaded_lazily() -> None:
    top = _imported_after("--help")
    assert not {m for m in top if m.startswith("kai.commands.")}
    assert not {"kubernetes", "numpy", "pydantic", "yaml", "argcomplete"} & top
    one = _imported_after("validate", "--help")
    loaded = {m for m in one if m.startswith("kai.commands.")}
    assert loaded == {"kai.commands.validate", "kai.commands._output", "kai.commands._limits"}


FAKE_COMMAND = '''\
"""A command for the tests: it does what KAI_TEST_ACTION says."""
import argparse
HELP = "a test command"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("ok", "findings", "crash", "interrupt", "pipe"),
                        help="what to do")

def run(args: argparse.Namespace) -> int:
    if args.action == "crash":
        raise RuntimeError("the frobnicator is empty")
    if args.action == "interrupt":
        raise KeyboardInterrupt
    if args.action == "pipe":
        raise BrokenPipeError
    print("ran", args.action, args.debug, args.color)
    return 1 if args.action == "findings" else 0
'''


@pytest.fixture
def fake_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """One module and one line in COMMANDS: all it takes to add a command."""
    (tmp_path / "kai_test_fake_command.py").write_text(FAKE_COMMAND)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "fake", ("kai_test_fake_command", "a test command"))
    monkeypatch.delenv("KAI_DEBUG", raising=False)
    return "fake"


def test_a_registered_command_runs_with_the_common_options(
    fake_command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "help")[1].count("a test command") == 1
    assert run(capsys, fake_command, "ok") == (0, "ran ok False auto\n", "")
    assert run(capsys, fake_command, "findings", "--debug", "--color", "never") == (
        1,
        "ran findings True never\n",
        "",
    )
    # common options before the command name count too
    assert run(capsys, "--color", "always", fake_command, "ok")[1] == "ran ok False always\n"


def test_internal_error_is_one_line_and_exit_3(
    fake_command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(capsys, fake_command, "crash")
    assert code == 3 and out == ""
    assert err == (
        "kai fake: internal error: RuntimeError: the frobnicator is empty "
        "(run with --debug or KAI_DEBUG=1 for the traceback)\n"
    )
    code, _, err = run(capsys, fake_command, "crash", "--debug")
    assert code == 3 and "Traceback (most recent call last)" in err
    assert err.endswith("kai fake: internal error: RuntimeError: the frobnicator is empty\n")
    monkeypatch.setenv("KAI_DEBUG", "1")
    code, _, err = run(capsys, fake_command, "crash")
    assert code == 3 and "Traceback" in err


def test_interrupt_and_broken_pipe(fake_command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, fake_command, "interrupt") == (130, "", "")
    assert run(capsys, fake_command, "pipe") == (141, "", "")


def test_a_reader_that_leaves_gets_no_complaint() -> None:
    """`kai validate examples/gitops-broken | head -1`: the reader closes the pipe before kai
    writes (here at once); kai exits 141 and says nothing about it."""
    proc = subprocess.Popen(
        [*KAI, "validate", str(ROOT / "examples" / "gitops-broken")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err and "internal error" not in err


def test_head_in_a_shell_pipeline() -> None:
    out = subprocess.run(
        ["bash", "-c", f"{' '.join(KAI)} validate examples/gitops-broken | head -1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.count("\n") == 1 and ": error: " in out.stdout
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr


def test_ctrl_c_on_a_long_running_command_exits_130(tmp_path: Path) -> None:
    import signal

    proc = subprocess.Popen(
        [*KAI, "apiserver"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().startswith("serving: https://")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err


def test_ctrl_c_while_loading_exits_130_quietly() -> None:
    # SIGINT arrives while the command's module is being imported: no traceback either.
    code = textwrap.dedent(
        """
        import os, signal, sys
        # Ctrl-C as at a terminal: a background job of a non-interactive shell (a CI runner's
        # `cmd &`) starts with SIGINT ignored, and Python then keeps it ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import kai.cli
        real = kai.cli._load
        def load(name, commands):
            os.kill(os.getpid(), signal.SIGINT)
            return real(name, commands)
        kai.cli._load = load
        sys.exit(kai.cli.main(["validate", "."]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert out.returncode == 130 and out.stderr == ""


def test_the_cli_page_documents_every_command_and_flag() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.COMMANDS:
        assert f"### kai {name}\n" in page, f"docs/cli.md has no section for kai {name}"
        child = cli._subcommand(cli.build_parser(cli.COMMANDS, name), name)
        section = page.split(f"### kai {name}\n", 1)[1].split("\n### ", 1)[0]
        for action in child._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--debug", "--color"):
                    assert f"`{flag}" in section, f"docs/cli.md: kai {name} {flag} missing"
