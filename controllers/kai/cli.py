"""The ``kai`` command: one entry point, one registration table, one place for exit statuses.

Each subcommand lives in its own module under :mod:`kai.commands` and is imported only when it
runs (or is asked for help), so ``kai validate`` and ``kai simulate`` start fast: no Kubernetes
client, no web server. A command module provides ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``; registering it is one line in :data:`COMMANDS`. Shared options live in
``kai.commands._output`` (``-o/--output``), ``kai.commands._console`` (colour) and
``kai.commands._logs`` (``--log-level``, ``--log-format``); ``--debug`` and ``--color`` are
given to every command here.

Exit statuses, the same for every command (``docs/cli.md``):

====  =====================================================================================
0     success
1     the command found problems (validation errors, ``simulate --check`` mismatches)
2     bad usage or unreadable input
3     internal error: one line on standard error, the traceback only with ``--debug`` or
      ``KAI_DEBUG=1``
130   interrupted (Ctrl-C / SIGINT)
141   standard output closed by its reader (``kai validate | head -1``): nothing printed
====  =====================================================================================
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `yes | head -1` reports for `yes`

# name -> (module, one-line help): the one registration point. The help is repeated here so
# that `kai --help` imports no command module.
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
    "fairshare": ("kai.commands.fairshare", "time-based fairshare: simulate queues over cycles"),
    "simulate": ("kai.commands.simulate", "run a scheduling scenario file through the core"),
    "up": ("kai.commands.up", "run the whole system on an embedded API server, simulated GPUs"),
    "apiserver": ("kai.commands.apiserver", "run only the embedded Kubernetes API server"),
    "scheduler": ("kai.commands.scheduler", "run the scheduler against a Kubernetes API"),
    "binder": ("kai.commands.binder", "run the binder (BindRequest -> pod binding)"),
    "podgrouper": ("kai.commands.podgrouper", "run the pod-grouper against a Kubernetes API"),
    "completion": (
        "kai.commands.completion",
        "print the shell completion script (bash, zsh, fish)",
    ),
    "controller": ("kai.commands.controller", "reconcile GitOps documents into Queues, Topologies"),
    "webhook": ("kai.commands.webhook", "run the admission webhooks (validate, mutate)"),
    "snapshot": (
        "kai.commands.snapshot",
        "capture what the scheduler reads from a cluster into one snapshot file",
    ),
    "explain": (
        "kai.commands.explain",
        "say why a pod or PodGroup is pending, with numbers and what would unblock it",
    ),
    "queues": (
        "kai.commands.queues",
        "show the queue tree: quota, fair share, allocated, pending demand per resource",
    ),
    "plan": (
        "kai.commands.plan",
        "show what a change to the GitOps documents would do: Queue diff, fair share, workloads",
    ),
}

COLOR_MODES = ("auto", "always", "never")

EPILOG = """\
Run `kai help COMMAND` or `kai COMMAND --help` for a command's options.
Exit status: 0 ok, 1 problems found, 2 bad usage, 3 internal error, 130 interrupted."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; every option's help ends with its default.

    An option whose help already says what its default is ("(default: ...)") is left alone, an
    on/off flag shows ``(default: off)``, an option without a default value must say in its
    help what happens when it is not given (a unit test checks every command).
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        # What argparse does, without importing shutil (and its compression modules) for it.
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            return f"{text} (default: {'on' if action.default else 'off'})".strip()
        if action.default is None or action.default == []:
            return text
        return f"{text} (default: %(default)s)".strip()


def _terminal_columns() -> int:
    """$COLUMNS, else the terminal's width, else 80 (as ``shutil.get_terminal_size``)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _available() -> dict[str, tuple[str, str]]:
    """The commands whose module exists in this build."""
    return {
        name: entry
        for name, entry in COMMANDS.items()
        if importlib.util.find_spec(entry[0]) is not None
    }


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--debug`` and ``--color``: accepted before the command name and after it.

    Their defaults are SUPPRESS so that a value given before the command is not overwritten by
    the subcommand's default; :func:`_resolve_common` fills them in afterwards.
    """
    group = parser.add_argument_group("common options")
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the traceback of an internal error (default: off, or on when KAI_DEBUG=1)",
    )
    group.add_argument(
        "--color",
        choices=COLOR_MODES,
        default=argparse.SUPPRESS,
        help="colour problems and tables: auto = on a terminal unless NO_COLOR is set "
        "(default: auto)",
    )


def _resolve_common(args: argparse.Namespace) -> None:
    env_debug = os.environ.get("KAI_DEBUG", "") not in ("", "0")
    args.debug = bool(getattr(args, "debug", False)) or env_debug
    args.color = getattr(args, "color", "auto")


def _selected(args: Sequence[str], commands: dict[str, tuple[str, str]]) -> str | None:
    """The command named on the line: the first word that is one (no option value is)."""
    return next((word for word in args if word in commands), None)


def _load(name: str, commands: dict[str, tuple[str, str]]) -> ModuleType:
    return importlib.import_module(commands[name][0])


def build_parser(
    commands: dict[str, tuple[str, str]], selected: str | None = None
) -> argparse.ArgumentParser:
    """The whole command line; only ``selected`` gets its options (its module is imported)."""
    parser = argparse.ArgumentParser(
        prog="kai",
        description="kai: a GitOps-first GPU scheduler for Kubernetes.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    from kai import __version__

    parser.add_argument(
        "--version", action="version", version=f"kai {__version__}", help="print the version"
    )
    add_common_options(parser)
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for name, (_, help_text) in commands.items():
        child = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        if name == selected:
            _load(name, commands).add_arguments(child)
        add_common_options(child)
    helper = sub.add_parser(
        "help",
        help="show the help of a command, or list the commands",
        description="Show the help of COMMAND, or list the commands.",
        formatter_class=HelpFormatter,
    )
    helper.add_argument(
        "topic",
        nargs="?",
        metavar="COMMAND",
        choices=list(commands),
        help="the command to explain (default: list the commands)",
    )
    return parser


def _complete(commands: dict[str, tuple[str, str]]) -> None:
    """Answer a shell's completion request (argcomplete's protocol) and exit."""
    import argcomplete

    words = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT", "0") or 0)]
    # The word being completed is not a command yet: only complete words before it.
    complete_words = words.split()[1:] if words.endswith(" ") else words.split()[1:-1]
    parser = build_parser(commands, _selected(complete_words, commands))
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kai`` with ``argv`` (default: the process's arguments); return the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    name = "kai"
    debug = os.environ.get("KAI_DEBUG", "") not in ("", "0")
    try:
        commands = _available()
        if "_ARGCOMPLETE" in os.environ and argv is None:
            _complete(commands)
        selected = _selected(words, commands)
        parser = build_parser(commands, selected)
        try:
            args = parser.parse_args(words)
        except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
            return EXIT_USAGE if exc.code is None else int(exc.code)
        _resolve_common(args)
        debug = args.debug
        name = f"kai {args.command}" if args.command else name
        code = _dispatch(parser, args, commands)
        sys.stdout.flush()  # a reader that left shows here, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        if debug:
            import traceback

            traceback.print_exc()
        hint = "" if debug else " (run with --debug or KAI_DEBUG=1 for the traceback)"
        print(f"{name}: internal error: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
        return EXIT_INTERNAL


def _dispatch(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    commands: dict[str, tuple[str, str]],
) -> int:
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "help":
        if args.topic is None:
            parser.print_help()
        else:
            _subcommand(build_parser(commands, args.topic), args.topic).print_help()
        return EXIT_OK
    module = _load(args.command, commands)
    return int(module.run(args))


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child: argparse.ArgumentParser = action.choices[name]
            return child
    raise LookupError(name)


def _silence_stdout() -> None:
    """Point standard output at /dev/null so that the interpreter's last flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


if __name__ == "__main__":
    sys.exit(main())
