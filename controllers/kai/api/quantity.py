"""Kubernetes resource quantities, parsed and compared exactly.

A quantity is held as a :class:`fractions.Fraction` of its base unit (cores for cpu, bytes for
memory, devices for GPUs), so ``0.1 + 0.2 == 0.3`` and ``"500m" == 0.5`` hold exactly. Every other
module that reads ``"64Gi"``, ``"500m"``, ``"1e3"`` or ``"512M"`` goes through this one.

Grammar (as apimachinery's ``resource.Quantity``)::

    quantity  ::= sign? number suffix?
    number    ::= digits ("." digits?)? | "." digits
    suffix    ::= binarySI | decimalSI | decimalExponent
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") sign? digits
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "QUANTITY_PATTERN",
    "QuantityError",
    "ceil_to_int",
    "format_number",
    "parse_quantity",
    "to_megabytes_ceil",
    "to_millicores_ceil",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)
# The same grammar as a plain (ECMA-262 compatible) regular expression, for JSON Schema `pattern`.
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
# Kubernetes caps exponents well below this; the cap keeps "1e999999999" from eating memory.
_MAX_EXPONENT = 100


class QuantityError(ValueError):
    """A value is not a valid Kubernetes quantity; the message says why and shows the value."""


def parse_quantity(value: object) -> Fraction:
    """Return the exact value of a quantity given as a string or a YAML number.

    Booleans and other types are refused (YAML ``yes`` is not a quantity). A float is taken by its
    shortest decimal representation, so the YAML number ``0.1`` is exactly one tenth.
    """
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity, got the boolean {str(value).lower()}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"expected a finite quantity, got {value}")
        return Fraction(repr(value))
    if isinstance(value, Fraction):
        return value
    if not isinstance(value, str):
        raise QuantityError(
            f'expected a quantity (a number or a string such as "500m"), got {type(value).__name__}'
        )
    text = value.strip()
    match = _PATTERN.match(text)
    if match is None or text != value:
        raise QuantityError(
            f'{value!r} is not a Kubernetes quantity (examples: "500m", "2", "64Gi", "512M", "1e3")'
        )
    number = Fraction(match["num"] if not match["num"].endswith(".") else match["num"][:-1])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{value!r}: exponent {exponent} is out of range")
        number *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -number if match["sign"] == "-" else number


def ceil_to_int(value: Fraction) -> int:
    """The smallest integer >= value."""
    return -((-value.numerator) // value.denominator)


def to_millicores_ceil(cores: Fraction) -> int:
    """CPU cores to KAI's millicores; a fraction of a millicore rounds up (-1 stays -1)."""
    if cores == -1:
        return -1
    return ceil_to_int(cores * 1000)


def to_megabytes_ceil(num_bytes: Fraction) -> int:
    """Bytes to KAI's megabytes (10^6 bytes), rounded up (-1 stays -1)."""
    if num_bytes == -1:
        return -1
    return ceil_to_int(num_bytes / 10**6)


def format_number(value: Fraction) -> int | float:
    """A plain YAML/JSON number for an exact value: an int when whole, else the nearest float."""
    if value.denominator == 1:
        return int(value)
    return float(value)
