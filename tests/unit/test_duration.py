"""kai.api.duration: the one Go-duration parser."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai.api.duration import DurationError, parse_duration
from kai.api.types import DURATION_PATTERN


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("+10m", 600.0),
        ("-5m", -300.0),
        ("250ms", 0.25),
        ("3us", 3e-6),
        ("3µs", 3e-6),
        ("7ns", 7e-9),
        (".5s", 0.5),
    ],
)
def test_valid(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-", "5", "5 m", "m5", "1d", "1h 30m", "s", "1.2.3s"])
def test_invalid(text: str) -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration(text)


@given(st.text(alphabet="0123456789.+-hmsunµ", max_size=8))
def test_parser_agrees_with_the_schema_pattern(text: str) -> None:
    """What the JSON Schema/CRD pattern accepts is exactly what the parser accepts."""
    accepted = re.fullmatch(DURATION_PATTERN.strip("^$"), text) is not None
    try:
        parse_duration(text)
        parsed = True
    except DurationError:
        parsed = False
    assert accepted == parsed
