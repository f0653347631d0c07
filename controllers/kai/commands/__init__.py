"""Subcommands of the `kai` CLI, one module each (see kai.cli)."""
