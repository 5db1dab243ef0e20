"""Kubernetes quantity parsing, comparison and formatting (plnt.quantity)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from plnt.quantity import QuantityError, format_quantity, is_quantity, parse_quantity

PARSED = [
    ("80Gi", Fraction(80 * 2**30), True),
    ("500m", Fraction(1, 2), False),
    ("1e3", Fraction(1000), True),
    ("1E", Fraction(10**18), True),
    ("1000m", Fraction(1), False),  # whole, but Kubernetes keeps it as 1000 x 10^-3
    ("1.5Gi", Fraction(3 * 2**29), False),  # whole, but parsed through the decimal path
    ("1.5k", Fraction(1500), True),
    ("0.1n", Fraction(1, 10**9), False),  # rounded up to one nano unit
    ("-1.5n", Fraction(-2, 10**9), False),
    (".5", Fraction(1, 2), False),
    ("+3", Fraction(3), True),
    ("0", Fraction(0), True),
    ("123456789012345678901234", Fraction(123456789012345678901234), False),
]


@pytest.mark.parametrize(("text", "value", "is_int64"), PARSED)
def test_parse_exact_value_and_int64_representation(text, value, is_int64):
    quantity = parse_quantity(text)
    assert quantity.value == value
    assert quantity.as_int64()[1] is is_int64


@pytest.mark.parametrize(
    "text", ["", "1e", "1kK", "1 Gi", "1KiB", "1.2.3", "abc", "1e3x", "1e5000"]
)
def test_rejects_malformed(text):
    assert not is_quantity(text)
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_compare_and_equality_by_value():
    assert parse_quantity("1Gi") == parse_quantity("1024Mi")
    assert parse_quantity("1G") < parse_quantity("1Gi")
    assert parse_quantity("1") == parse_quantity("1000m")
    assert parse_quantity("2").compare(parse_quantity("1999m")) == 1
    assert sorted(parse_quantity(s) for s in ["1Gi", "1M", "500m"]) == [
        parse_quantity("500m"),
        parse_quantity("1M"),
        parse_quantity("1Gi"),
    ]


def test_arithmetic_keeps_kubernetes_representation():
    total = parse_quantity("1k").add(parse_quantity("1"))
    assert total.value == 1001 and total.as_int64() == (1001, True)
    assert not parse_quantity("1").add(parse_quantity("500m")).as_int64()[1]
    overflow = parse_quantity("9223372036854775807").add(parse_quantity("1"))
    assert overflow.value == 2**63 and not overflow.as_int64()[1]


@pytest.mark.parametrize(
    ("text", "formatted"),
    [
        ("80Gi", "80Gi"),
        ("81920Mi", "80Gi"),
        ("1536Mi", "1536Mi"),
        ("500m", "500m"),
        ("1e3", "1k"),
        ("0", "0"),
        ("-2", "-2"),
        ("1.5", "1500m"),
        ("0.1n", "1n"),
    ],
)
def test_format(text, formatted):
    assert format_quantity(parse_quantity(text)) == formatted
