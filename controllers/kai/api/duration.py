"""Go durations (``metav1.Duration``: ``90s``, ``10m``, ``1h30m``, ``1.5h``, ``-5m``, ``0``).

The one parser of duration strings: API fields (queue min-runtimes, PodGroup preemption delay and
staleness grace period), GitOps policies and KAI plugin arguments all go through it. The schema
side is ``kai.api.types.DURATION_PATTERN``; both follow Go's ``time.ParseDuration`` grammar.
"""

from __future__ import annotations

import re

__all__ = ["DurationError", "parse_duration"]

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # micro sign
    "μs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """A string is not a Go duration; the message shows it and gives examples."""


def parse_duration(text: str) -> float:
    """The duration in seconds; :class:`DurationError` when ``text`` is not a Go duration."""
    value = text.strip()
    sign = -1.0 if value.startswith("-") else 1.0
    body = value[1:] if value[:1] in ("+", "-") else value
    if body == "0":
        return 0.0
    total = 0.0
    position = 0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None:
            break
        total += float(match[1]) * _UNIT_SECONDS[match[2]]
        position = match.end()
    if not body or position != len(body):
        raise DurationError(f"{text!r} is not a duration such as 90s, 10m or 1h30m")
    return sign * total
