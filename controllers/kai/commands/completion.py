"""``kai completion bash|zsh|fish``: print the script that makes a shell complete ``kai``."""

from __future__ import annotations

import argparse
import sys

HELP = "print the shell completion script (bash, zsh, fish)"

EPILOG = """\
Load it in the current shell, or add the line to the shell's start-up file:
  bash:  eval "$(kai completion bash)"        (~/.bashrc)
  zsh:   eval "$(kai completion zsh)"         (~/.zshrc, after compinit)
  fish:  kai completion fish | source         (~/.config/fish/config.fish)
The script asks `kai` itself for the candidates, so it stays right as commands change."""

SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("shell", choices=SHELLS, help="the shell to print the script for")


def run(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["kai"], shell=args.shell))
    return 0
