"""``--log-format text|json`` of the long-running components: one setup function, JSON lines."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai import cli
from kai.commands._logs import JsonFormatter, announce, setup_logging, status_logger, utc_time

KAI = [sys.executable, "-m", "kai.cli"]
LONG_RUNNING = ("scheduler", "binder", "podgrouper", "apiserver", "up")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("INFO", "json", stream)
    log = logging.getLogger("kai.test")
    log.debug("not shown")
    log.info("bound %d pods", 3, extra={"node": "gpu-1", "gpus": 0.5})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert list(first) == ["time", "level", "logger", "message", "node", "gpus"]
    assert first["level"] == "INFO" and first["logger"] == "kai.test"
    assert first["message"] == "bound 3 pods" and first["node"] == "gpu-1" and first["gpus"] == 0.5
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert second["level"] == "ERROR" and "ValueError: bad" in second["exception"]


def test_text_lines_and_setup_twice(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("WARNING", "text", stream)
    setup_logging("WARNING", "text", stream)  # no second handler
    logging.getLogger("kai.test").warning("careful")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(" WARNING kai.test: careful")


def test_values_that_json_cannot_hold_are_written_as_text() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "m", None, None)
    record.path = Path("/tmp/p")
    assert json.loads(JsonFormatter().format(record))["path"] == "/tmp/p"
    assert utc_time(0.25) == "1970-01-01T00:00:00.250Z"


def test_status_lines(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    status_logger("kai up", "json", stream).info("applied 3 queues", extra={"queues": 3})
    body = json.loads(stream.getvalue())
    assert body["message"] == "applied 3 queues" and body["queues"] == 3
    stream = io.StringIO()
    status_logger("kai up", "text", stream).info("stopped")
    assert stream.getvalue()[8:] == " kai up: stopped\n"  # HH:MM:SS first
    announce("serving: http://x", "text", url="http://x")
    announce("serving: http://x", "json", logger="kai.apiserver", url="http://x")
    text, as_json = capsys.readouterr().out.splitlines()
    assert text == "serving: http://x"
    assert json.loads(as_json)["url"] == "http://x"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_command_has_the_options(name: str) -> None:
    child = cli._subcommand(cli.build_parser(cli.COMMANDS, name), name)
    args = child.parse_args(["--log-format", "json", "--log-level", "DEBUG"])
    assert (args.log_format, args.log_level) == ("json", "DEBUG")


def test_apiserver_speaks_json_lines() -> None:
    proc = subprocess.Popen(
        [*KAI, "apiserver", "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        line = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert line["message"].startswith("serving: https://") and line["url"].startswith("https://")
    assert line["logger"] == "kai.apiserver" and proc.returncode == 0, err


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_component_that_cannot_start_says_why_in_its_log_format(
    log_format: str, tmp_path: Path
) -> None:
    out = subprocess.run(
        [*KAI, "binder", "--kubeconfig", str(tmp_path / "missing"), "--log-format", log_format],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": ""},
    )
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    if log_format == "text":
        assert line.startswith("kai binder: ") and "missing: no such file" in line
    else:
        body = json.loads(line)
        assert body["level"] == "ERROR" and body["logger"] == "kai.binder"
        assert "missing: no such file" in body["message"]
