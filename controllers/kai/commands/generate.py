"""``kai generate``: regenerate schemas/ and manifests/crds/ from the API models."""

from __future__ import annotations

import argparse

from kai.api import generate

HELP = "regenerate schemas/ and manifests/crds/ from the API models"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    generate.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return generate.run(args)
