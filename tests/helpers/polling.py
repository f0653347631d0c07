"""Poll until a condition holds: the one waiting helper of the test suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns a truthy value (or stops raising AssertionError)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        time.sleep(interval)
    if last is not None:
        raise last
    raise AssertionError(f"condition not met within {timeout}s")
