"""Logging of the long-running components (``kai scheduler``, ``binder``, ``podgrouper``,
``apiserver``, ``up``): ``--log-level`` and ``--log-format text|json`` and one setup function.

JSON lines carry ``time`` (UTC, RFC 3339 with milliseconds), ``level``, ``logger``, ``message``,
then every ``extra={...}`` field of the call, and ``exception`` with the traceback when there is
one: one object per line on standard error, for a log collector to parse.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any, TextIO

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def add_logging_options(parser: argparse.ArgumentParser, *, level: str = "INFO") -> None:
    """Add ``--log-level`` (default ``level``) and ``--log-format``."""
    parser.add_argument(
        "--log-level", default=level, choices=LOG_LEVELS, help="least severe level logged"
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text: one line for people; json: one JSON object per line (time, level, logger, "
        "message, extra fields)",
    )


def utc_time(created: float) -> str:
    """``2026-12-01T15:42:12.123Z``."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in body:
                body[key] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            body["exception"] = record.exc_text
        if record.stack_info:
            body["stack"] = self.formatStack(record.stack_info)
        return json.dumps(body, ensure_ascii=False, default=str)


def formatter(log_format: str = "text", text_format: str = TEXT_FORMAT) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(text_format)
    raise ValueError(f"unknown log format {log_format!r}; expected one of {', '.join(LOG_FORMATS)}")


def setup_logging(
    level: str = "INFO", log_format: str = "text", stream: TextIO | None = None
) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (standard error).

    Replaces the root logger's handlers, so calling it again (tests) does not double lines.
    """
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


def status_logger(
    name: str, log_format: str = "text", stream: TextIO | None = None
) -> logging.Logger:
    """A logger for a command's progress lines on standard output, always at INFO.

    text: ``HH:MM:SS NAME: message`` (what a person watching a terminal reads); json: the same
    JSON lines as :class:`JsonFormatter`, so that a log collector reads one format.
    """
    logger = logging.getLogger(f"kai.status.{name.replace(' ', '.')}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for old in list(logger.handlers):
        logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {name}: %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    return logger


def announce(message: str, log_format: str = "text", *, logger: str = "kai", **fields: Any) -> None:
    """A line that people and scripts wait for on standard output (``serving: URL``,
    ``kubeconfig: PATH``): printed as it is with text logs, a JSON line carrying ``fields`` with
    JSON logs."""
    if log_format == "json":
        body = {"time": utc_time(time.time()), "level": "INFO", "logger": logger}
        line = json.dumps({**body, "message": message, **fields}, ensure_ascii=False, default=str)
    else:
        line = message
    print(line, flush=True)


def complain(
    who: str, message: str, log_format: str = "text", *, level: str = "ERROR", **fields: Any
) -> None:
    """Why a long-running command stops (or what it works around), on standard error:
    ``kai scheduler: message`` with text logs, a JSON line (logger ``kai.scheduler``) with JSON
    logs, so that a log collector never meets a line it cannot parse."""
    if log_format == "json":
        body = {"time": utc_time(time.time()), "level": level, "logger": who.replace(" ", ".")}
        line = json.dumps({**body, "message": message, **fields}, ensure_ascii=False, default=str)
    else:
        line = f"{who}: {message}"
    print(line, file=sys.stderr, flush=True)
