"""``kai webhook``: bad flags and an unreachable cluster exit 2 with one line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from kai.cli import main


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """``kai webhook`` sets up logging on the (captured) standard error: undo it afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--self-register", "http://127.0.0.1:9443"], "over https only"),
        (["--cert-validity", "soon"], "--cert-validity 'soon'"),
        (["--ca-validity=0s"], "--ca-validity must be positive"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "no such file"),
        (["--kai-queue-rules", "off"], "invalid choice: 'off'"),
    ],
)
def test_bad_usage_exits_2(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["webhook", *args]) == 2
    assert fragment in capsys.readouterr().err


def test_help_lists_the_flags_the_chart_uses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "--kubeconfig",
        "--port",
        "--cert-dir",
        "--metrics-port",
        "--self-register",
        "--namespace",
        "--log-level",
        "--kai-queue-rules",
    ):
        assert flag in out


@pytest.mark.parametrize(("argv", "mode"), [([], "enforce"), (["--kai-queue-rules=warn"], "warn")])
def test_kai_queue_rules_reach_the_options(argv: list[str], mode: str) -> None:
    import argparse

    from kai.commands import webhook

    parser = argparse.ArgumentParser()
    webhook.add_arguments(parser)
    opts = webhook._options(parser.parse_args(argv))
    assert opts.kai_queue_rules == mode  # type: ignore[attr-defined]


def test_print_configurations_for_a_service(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["webhook", "--print-configurations", "--namespace", "kai"]) == 0
    validating, mutating = yaml.safe_load_all(capsys.readouterr().out)
    assert validating["metadata"]["name"] == mutating["metadata"]["name"] == "kai-webhook"
    hook = mutating["webhooks"][0]
    assert hook["clientConfig"] == {
        "service": {"namespace": "kai", "name": "kai-webhook", "port": 443, "path": "/mutate/pods"}
    }
    assert (
        hook["matchConditions"][0]["expression"] == "object.spec.schedulerName == 'kai-scheduler'"
    )
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kai", "kube-system"]
