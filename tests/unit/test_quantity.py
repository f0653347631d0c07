"""kai.api.quantity: exact Kubernetes quantities."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai.api.quantity import (
    QUANTITY_PATTERN,
    QuantityError,
    ceil_to_int,
    format_number,
    parse_quantity,
    to_megabytes_ceil,
    to_millicores_ceil,
)

SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


@pytest.mark.parametrize(("suffix", "factor"), SUFFIXES.items())
def test_every_suffix(suffix: str, factor: Fraction) -> None:
    assert parse_quantity(f"3{suffix}") == 3 * factor
    assert parse_quantity(f"1.5{suffix}") == Fraction(3, 2) * factor
    assert parse_quantity(f"-2{suffix}") == -2 * factor


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("1.5e+2", 150),
        ("12E0", 12),
        ("2.5e-1", Fraction(1, 4)),
        ("1E", 10**18),  # exa, not an exponent
        ("0", 0),
        ("-1", -1),
        ("+5", 5),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("0.1", Fraction(1, 10)),
        ("500m", Fraction(1, 2)),
        ("64Gi", 64 * 2**30),
        ("512M", 512 * 10**6),
        ("0001", 1),
    ],
)
def test_forms(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


def test_numbers() -> None:
    assert parse_quantity(3) == 3
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert parse_quantity(1e3) == 1000
    assert parse_quantity(-1) == -1
    assert parse_quantity(Fraction(1, 3)) == Fraction(1, 3)


def test_exact_arithmetic() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("0.3")
    assert parse_quantity(0.1) + parse_quantity(0.2) == parse_quantity(0.3)
    assert parse_quantity("100m") * 3 == parse_quantity("300m")
    assert parse_quantity("1Gi") == 1024 * parse_quantity("1Mi")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " 1",
        "1 ",
        "1.2.3",
        "1Kb",
        "1K",  # Kubernetes spells kilo k
        "1ki",
        "1k3",
        "1e",
        "e3",
        "--1",
        "+-1",
        "1e1.5",
        "1Mi5",
        "0x10",
        "1_000",
        ".",
        "m",
        "1e3Ki",
        "1e101",
        "1e-101",
        "١",  # a non-ASCII digit
        "inf",
        "NaN",
    ],
)
def test_invalid_strings(bad: str) -> None:
    with pytest.raises(QuantityError, match=re.escape(repr(bad)) if bad else "quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", [True, False, None, [1], {"a": 1}, float("nan"), float("inf")])
def test_invalid_values(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_error_messages_say_what_to_write() -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity("2 GB")
    assert "'2 GB' is not a Kubernetes quantity" in str(info.value)
    assert '"64Gi"' in str(info.value)
    with pytest.raises(QuantityError, match="boolean true"):
        parse_quantity(True)


def test_ordering() -> None:
    texts = ["1Gi", "1G", "999M", "1e9", "1000000001", "500m", "1", "-1", "0", "1Ki", "1k"]
    ordered = sorted(texts, key=parse_quantity)
    assert ordered == [
        "-1",
        "0",
        "500m",
        "1",
        "1k",
        "1Ki",
        "999M",
        "1G",
        "1e9",
        "1000000001",
        "1Gi",
    ]
    assert parse_quantity("1G") == parse_quantity("1e9")


def test_conversions() -> None:
    assert to_millicores_ceil(parse_quantity("0.0001")) == 1
    assert to_millicores_ceil(parse_quantity("1500m")) == 1500
    assert to_millicores_ceil(parse_quantity("2")) == 2000
    assert to_millicores_ceil(Fraction(-1)) == -1
    assert to_megabytes_ceil(parse_quantity("1Gi")) == 1074
    assert to_megabytes_ceil(parse_quantity("1M")) == 1
    assert to_megabytes_ceil(parse_quantity("1")) == 1
    assert to_megabytes_ceil(Fraction(-1)) == -1
    assert ceil_to_int(Fraction(-3, 2)) == -1
    assert ceil_to_int(Fraction(3, 2)) == 2
    assert ceil_to_int(Fraction(4)) == 4
    assert format_number(Fraction(3)) == 3 and isinstance(format_number(Fraction(3)), int)
    assert format_number(Fraction(1, 2)) == 0.5


# --- property tests ------------------------------------------------------------------------


@given(
    negative=st.booleans(),
    whole=st.integers(min_value=0, max_value=10**12),
    decimals=st.text(alphabet="0123456789", max_size=9),
    suffix=st.sampled_from(sorted(SUFFIXES)),
)
def test_decimal_with_suffix_round_trip(
    negative: bool, whole: int, decimals: str, suffix: str
) -> None:
    number = f"{whole}.{decimals}" if decimals else str(whole)
    text = ("-" if negative else "") + number + suffix
    expected = Fraction(Decimal(number)) * SUFFIXES[suffix]
    assert parse_quantity(text) == (-expected if negative else expected)


@given(
    mantissa=st.decimals(
        allow_nan=False, allow_infinity=False, places=4, min_value=-(10**6), max_value=10**6
    ),
    exponent=st.integers(min_value=-30, max_value=30),
)
def test_exponent_round_trip(mantissa: Decimal, exponent: int) -> None:
    text = f"{mantissa:f}e{exponent}"
    assert parse_quantity(text) == Fraction(mantissa) * Fraction(10) ** exponent


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_integers_round_trip(value: int) -> None:
    assert parse_quantity(value) == value
    assert parse_quantity(str(value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_floats_are_read_by_their_shortest_decimal(value: float) -> None:
    assert parse_quantity(value) == Fraction(repr(value))
    assert float(parse_quantity(value)) == value


@given(st.text(alphabet="0123456789.+-eEkKMGTPEinum ", max_size=8))
def test_schema_pattern_agrees_with_the_parser(text: str) -> None:
    """The JSON Schema `pattern` accepts exactly the strings the parser accepts."""
    try:
        parse_quantity(text)
        parsed = True
    except QuantityError as error:
        parsed = "out of range" in str(error)  # the grammar allows it, the size cap does not
    assert (re.fullmatch(QUANTITY_PATTERN, text) is not None) == parsed
