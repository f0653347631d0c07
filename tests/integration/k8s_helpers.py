"""Small helpers shared by the API conformance tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client


def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
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


def pod(name: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", None)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }
    if labels:
        body["metadata"]["labels"] = labels
    return body


def status_of(exc: client.ApiException) -> dict[str, Any]:
    return json.loads(exc.body)
