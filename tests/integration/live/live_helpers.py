"""Helpers shared by the live-component tests: the conformance tests' polling helper, with the
longer default wait that whole control loops need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k8s_helpers import eventually as _eventually


def eventually(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns a truthy value (or stops raising AssertionError)."""
    return _eventually(check, timeout=timeout, interval=interval)
