"""Exact amounts written the way Kubernetes users read them: ``4``, ``500m``, ``64Gi``, ``0.3``.

Messages of the hierarchy rules and previews (``kai plan``) print quotas with these, so a value
is shown in the notation it is usually written in, exactly (no float noise), and -1 stays -1.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["decimal_text", "format_amount"]

UNLIMITED = Fraction(-1)


def decimal_text(value: Fraction | int) -> str:
    """Exact decimal text when the value has one, else a short float."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    if den == 1:
        text = f"{float(value):.12f}".rstrip("0").rstrip(".")
        if Fraction(text) == value:
            return text
    return f"{float(value):.6g}"


_BINARY_SUFFIXES = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_DECIMAL_SUFFIXES = (
    ("E", 10**18),
    ("P", 10**15),
    ("T", 10**12),
    ("G", 10**9),
    ("M", 10**6),
    ("k", 10**3),
)


def format_amount(resource: str, value: Fraction | int) -> str:
    """A value in Kubernetes notation: ``4``, ``500m``, ``64Gi``, ``-1``."""
    if value == UNLIMITED:
        return "-1"
    if resource == "cpu":
        if value.denominator == 1:
            return str(value.numerator)
        millis = value * 1000
        return f"{decimal_text(millis)}m"
    if resource == "memory" and value > 0 and value.denominator == 1:
        number = value.numerator
        for suffix, unit in _BINARY_SUFFIXES:
            if number >= unit and number % unit == 0:
                return f"{number // unit}{suffix}"
        for suffix, unit in _DECIMAL_SUFFIXES:
            if number >= unit and number % unit == 0:
                return f"{number // unit}{suffix}"
    return decimal_text(value)
