"""The ``kai`` command.

Each subcommand lives in its own module under :mod:`kai.commands` and is imported only when it
runs, so ``kai simulate`` and ``kai validate`` start fast (no Kubernetes client, no web server).
A command module provides ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Exit codes: 0 success, 1 the command found problems, 2 bad usage or unreadable input, 3 internal
error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

# name -> (module, one-line help). The help is repeated here so that `kai --help` imports nothing.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("kai.commands.validate", "check GitOps documents (schema + hierarchy rules)"),
    "render": (
        "kai.commands.render",
        "compile GitOps documents into Queues, Topologies, ConfigMap",
    ),
    "generate": (
        "kai.commands.generate",
        "regenerate schemas/ and manifests/crds/ from the models",
    ),
    "simulate": ("kai.commands.simulate", "run a scheduling scenario file through the core"),
    "up": ("kai.commands.up", "run the whole system on an embedded API server, simulated GPUs"),
    "apiserver": ("kai.commands.apiserver", "run only the embedded Kubernetes API server"),
    "scheduler": ("kai.commands.scheduler", "run the scheduler against a Kubernetes API"),
    "binder": ("kai.commands.binder", "run the binder (BindRequest -> pod binding)"),
    "podgrouper": ("kai.commands.podgrouper", "run the pod-grouper against a Kubernetes API"),
}


def _available() -> dict[str, tuple[str, str]]:
    """The commands whose module exists in this build."""
    found = {}
    for name, (module, help_text) in COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def _top_usage(commands: dict[str, tuple[str, str]]) -> str:
    width = max((len(n) for n in commands), default=8)
    lines = ["usage: kai COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in commands.items()]
    lines += ["", "Run `kai COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = _available()
    if not args or args[0] in ("-h", "--help", "help"):
        print(_top_usage(commands))
        return 0 if args else 2
    if args[0] == "--version":
        from kai import __version__

        print(f"kai {__version__}")
        return 0
    name = args[0]
    if name not in commands:
        print(f"kai: unknown command {name!r}\n\n{_top_usage(commands)}", file=sys.stderr)
        return 2
    module = importlib.import_module(commands[name][0])
    parser = argparse.ArgumentParser(prog=f"kai {name}", description=commands[name][1])
    module.add_arguments(parser)
    try:
        parsed = parser.parse_args(args[1:])
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    try:
        return int(module.run(parsed))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`kai validate | head`): not an error of ours. Point stdout at
        # devnull so the interpreter's final flush does not complain again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
