"""``kai webhook``: bad flags and an unreachable cluster exit 2 with one line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

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
        (["--max-connections", "0"], "max-connections must be positive"),
        (["--max-connections", "many"], "--max-connections 'many': not a whole number"),
        (["--request-timeout", "soon"], "--request-timeout 'soon'"),
        (["--max-request-body", "8Zi"], "--max-request-body '8Zi'"),
        (
            ["--max-connections", "10", "--max-connections-per-client", "20"],
            "max-connections-per-client is more than max-connections",
        ),
        (["--http2-connection-buffer", "1Mi"], "connection-buffer must hold one body"),
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
        "--bind-address",
        "--max-connections",
        "--request-timeout",
        "--max-queued",
        "--http2-max-streams",
        "--body-buffer",
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


def _options(monkeypatch: pytest.MonkeyPatch, *args: str, pod_ip: str | None = None) -> Any:
    import argparse

    from kai.commands import webhook

    parser = argparse.ArgumentParser()
    webhook.add_arguments(parser)
    if pod_ip is None:
        monkeypatch.delenv("POD_IP", raising=False)
    else:
        monkeypatch.setenv("POD_IP", pod_ip)
    return webhook._options(parser.parse_args(list(args)))


def test_the_bind_address_is_the_pod_ip_when_set_and_a_flag_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _options(monkeypatch).host == "0.0.0.0"
    assert _options(monkeypatch, pod_ip="10.1.2.3").host == "10.1.2.3"
    assert _options(monkeypatch, "--bind-address=0.0.0.0", pod_ip="10.1.2.3").host == "0.0.0.0"
    assert _options(monkeypatch, "--host", "127.0.0.1").host == "127.0.0.1"  # the old name


def test_limit_flags_reach_the_server_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    from kai.webhooks.server import Limits

    limits = _options(
        monkeypatch,
        "--max-connections=50",
        "--max-connections-per-client=5",
        "--request-timeout=3s",
        "--idle-timeout=2m",
        "--max-request-body=4Mi",
        "--max-queued=9",
        "--http2-max-streams=20",
        "--http2-connection-buffer=8Mi",
        "--body-buffer=32Mi",
        "--http2-max-resets=40",
        "--handshake-timeout=1500ms",
    ).limits
    assert limits == Limits(
        max_connections=50,
        max_connections_per_client=5,
        request_timeout=3.0,
        idle_timeout=120.0,
        max_body=4 * 1024**2,
        max_queued=9,
        max_streams=20,
        connection_buffer=8 * 1024**2,
        process_buffer=32 * 1024**2,
        max_resets=40,
        handshake_timeout=1.5,
    )


def test_the_limit_flags_of_the_docs_are_the_ones_of_the_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/webhooks.md's table of server limits: every flag and default as `--help` has it."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text()
    rows = re.findall(r"^\| `(--[\w-]+) \w+` \| (\S+) \|", doc, re.M)
    assert len(rows) == 11
    assert main(["webhook", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for flag, default in rows:
        found = re.search(re.escape(flag) + r" \w+ (.*?)\(default: ([^)]+)\)", help_text)
        assert found, flag
        assert found.group(2) == default, (flag, found.group(2), default)


def test_every_address_by_default_outside_a_pod_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    assert main(["webhook", "--kubeconfig", "/nonexistent/kubeconfig"]) == 2
    assert "listening on every address (0.0.0.0)" in capsys.readouterr().err
    assert main(["webhook", "--bind-address=0.0.0.0", "--kubeconfig", "/nonexistent/x"]) == 2
    assert "listening on every address" not in capsys.readouterr().err  # asked for
