"""Idempotent writes with retries.

Every write the components make can be repeated safely: creates treat AlreadyExists as "someone
(maybe an earlier attempt of ours) did it", patches are computed against the current object and
skipped when nothing would change, deletes treat NotFound as done. Transient failures (500, 503,
429, 504, timeouts, broken connections) are retried with exponential back-off and jitter; a 409
Conflict on an update re-reads the object and tries again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kai.kube.client import MERGE_PATCH, ApiError, Kube, Resource, TransientError

log = logging.getLogger("kai.kube.writes")
T = TypeVar("T")

RETRIABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class Backoff:
    """Exponential back-off: ``base * 2**attempt`` capped at ``cap``, with +-25% jitter."""

    def __init__(self, base: float = 0.05, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap

    def delay(self, attempt: int) -> float:
        d = min(self.cap, self.base * (2.0 ** min(attempt, 30)))
        return float(d * random.uniform(0.75, 1.25))


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, TransientError):
        return True
    return isinstance(exc, ApiError) and exc.status in RETRIABLE_STATUS


def with_retries(
    call: Callable[[], T],
    *,
    attempts: int = 8,
    backoff: Backoff | None = None,
    stop: threading.Event | None = None,
    what: str = "request",
) -> T:
    """Run ``call``; retry transient failures up to ``attempts`` times with back-off."""
    backoff = backoff or Backoff()
    for attempt in range(attempts):
        try:
            return call()
        except (ApiError, TransientError) as exc:
            if not is_transient(exc) or attempt == attempts - 1:
                raise
            delay = backoff.delay(attempt)
            log.debug("%s failed (%s); retrying in %.2fs", what, exc, delay)
            if stop is not None:
                if stop.wait(delay):
                    raise
            else:
                time.sleep(delay)
    raise AssertionError("unreachable")


def create_or_get(
    kube: Kube, res: Resource, body: dict[str, Any], *, attempts: int = 8
) -> tuple[dict[str, Any], bool]:
    """Create ``body``; when it already exists return the stored object. ``(object, created)``."""
    md = body["metadata"]
    try:
        return with_retries(
            lambda: kube.create(res, body), attempts=attempts, what=f"create {md['name']}"
        ), True
    except ApiError as exc:
        if exc.status != 409 or exc.reason != "AlreadyExists":
            raise
    return with_retries(
        lambda: kube.get(res, md["name"], md.get("namespace")),
        attempts=attempts,
        what=f"get {md['name']}",
    ), False


def create_if_absent(kube: Kube, res: Resource, body: dict[str, Any], attempts: int = 8) -> bool:
    """Create ``body``; AlreadyExists counts as success. True when this call created it."""
    try:
        with_retries(
            lambda: kube.create(res, body),
            attempts=attempts,
            what=f"create {body['metadata']['name']}",
        )
        return True
    except ApiError as exc:
        if exc.status == 409 and exc.reason == "AlreadyExists":
            return False
        raise


def delete_if_present(
    kube: Kube,
    res: Resource,
    name: str,
    namespace: str | None = None,
    *,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
    attempts: int = 8,
) -> bool:
    """Delete; NotFound (and a UID precondition that no longer holds) count as done."""
    try:
        with_retries(
            lambda: kube.delete(
                res,
                name,
                namespace,
                grace_period_seconds=grace_period_seconds,
                preconditions={"uid": uid} if uid else None,
            ),
            attempts=attempts,
            what=f"delete {name}",
        )
        return True
    except ApiError as exc:
        if exc.status == 404 or (exc.status == 409 and uid is not None):
            return False
        raise


def merge_needed(current: Any, desired: Any) -> bool:
    """Would applying ``desired`` as a JSON merge patch change ``current``?"""
    if isinstance(desired, dict):
        if not isinstance(current, dict):
            return True
        for key, value in desired.items():
            if value is None:
                if key in current:
                    return True
            elif merge_needed(current.get(key), value):
                return True
        return False
    return bool(current != desired)


def patch_if_changed(
    kube: Kube,
    res: Resource,
    current: dict[str, Any],
    patch: dict[str, Any],
    *,
    sub: str = "",
    attempts: int = 8,
) -> dict[str, Any] | None:
    """Compare-then-patch: send the merge ``patch`` only when it changes ``current``.

    Returns the patched object, or None when nothing needed changing or the object is gone.
    Merge patches carry no resourceVersion, so a 409 only comes from injected or admission
    conflicts: it is retried like a transient failure.
    """
    if not merge_needed(current, patch):
        return None
    md = current["metadata"]
    backoff = Backoff()
    for attempt in range(attempts):
        try:
            return kube.patch(
                res, md["name"], patch, md.get("namespace"), sub=sub, content_type=MERGE_PATCH
            )
        except (ApiError, TransientError) as exc:
            if isinstance(exc, ApiError) and exc.status == 404:
                return None
            retriable = is_transient(exc) or (isinstance(exc, ApiError) and exc.status == 409)
            if not retriable or attempt == attempts - 1:
                raise
            time.sleep(backoff.delay(attempt))
    return None
