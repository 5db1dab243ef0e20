"""Kubernetes resource quantities ("80Gi", "500m", "1e3"), exact, shared by all of plnt.

Parsing follows k8s.io/apimachinery's ParseQuantity rule for rule, including what it keeps
of the representation: a quantity is either a small "int64Amount" (value x 10^scale) or an
arbitrary-precision decimal. The value is what compares; the representation decides only
`as_int64()` (Kubernetes answers "not an integer" for "1000m" or "1.5Gi" although their
values are whole), which the CEL `isInteger()`/`asInteger()` functions expose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import total_ordering

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_MAX_INT64_FACTORS = 18  # decimal digits that always fit in an int64
_NANO = -9
# Kubernetes accepts any int32 exponent; exact arithmetic on 10**2e9 is not feasible, so
# larger exponents are refused (no device attribute or capacity comes close).
_MAX_EXPONENT = 4096

_DECIMAL_SUFFIXES = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = set("eEinumkKMGTP")
_DIGITS = set("0123456789")

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """The string is not a Kubernetes quantity."""


_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@total_ordering
@dataclass(frozen=True, eq=False)
class Quantity:
    """An exact quantity; `int_amount` is (value, scale) when Kubernetes keeps it as int64Amount."""

    value: Fraction
    format: str = DECIMAL_SI
    int_amount: tuple[int, int] | None = field(default=None, compare=False)
    # The inf.Dec scale (digits after the point) when not an int64Amount; it only shapes
    # as_approximate_float, which Kubernetes computes from the stored digits.
    dec_scale: int = field(default=9, compare=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1, like Quantity.Cmp."""
        return (self.value > other.value) - (self.value < other.value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def as_int64(self) -> tuple[int, bool]:
        """Quantity.AsInt64: only an int64Amount with a scale >= 0 that fits converts."""
        if self.int_amount is None:
            return 0, False
        value, scale = self.int_amount
        if scale < 0:
            return 0, False
        result = value * 10**scale
        if not INT64_MIN <= result <= INT64_MAX:
            return 0, False
        return result, True

    def as_approximate_float(self) -> float:
        """Quantity.AsApproximateFloat64: the stored digits as a float times a power of ten,
        rounded twice like Go does, so equal values can differ in the last bit."""
        if self.int_amount is not None:
            base, exponent = float(self.int_amount[0]), self.int_amount[1]
        else:
            base = float(int(self.value * Fraction(10) ** self.dec_scale))
            exponent = -self.dec_scale
        return base if exponent == 0 else base * _pow10(exponent)

    def _inf_scale(self) -> int:
        return self.dec_scale if self.int_amount is None else -self.int_amount[1]

    def add(self, other: Quantity) -> Quantity:
        """Quantity.Add: stays an int64Amount while both are and the sum fits."""
        fmt = other.format if self.value == 0 else self.format
        amount = _add_int_amounts(self.int_amount, other.int_amount)
        scale = max(self._inf_scale(), other._inf_scale())
        return Quantity(self.value + other.value, fmt, amount, scale)

    def sub(self, other: Quantity) -> Quantity:
        fmt = other.format if self.value == 0 else self.format
        negated = None if other.int_amount is None else (-other.int_amount[0], other.int_amount[1])
        amount = _add_int_amounts(self.int_amount, negated)
        scale = max(self._inf_scale(), other._inf_scale())
        return Quantity(self.value - other.value, fmt, amount, scale)

    def __str__(self) -> str:
        return format_quantity(self)


_POW10 = [float(f"1e{i}") for i in range(32)]  # Go's pow10tab constants
_POW10_POS32 = [1e0, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288]
_POW10_NEG32 = [1e-0, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320]


def _pow10(n: int) -> float:
    """Go's math.Pow10, table for table (two roundings for large |n|)."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10[n % 32]
    if -323 <= n < 0:
        return _POW10_NEG32[-n // 32] / _POW10[-n % 32]
    return math.inf if n > 0 else 0.0


def from_int(value: int) -> Quantity:
    """resource.NewQuantity(value, DecimalExponent), as the CEL add/sub int overloads build it."""
    return Quantity(Fraction(value), DECIMAL_EXPONENT, (value, 0))


def _fits(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def _add_int_amounts(
    a: tuple[int, int] | None, b: tuple[int, int] | None
) -> tuple[int, int] | None:
    """int64Amount.Add; None when either side is (or the result becomes) a decimal."""
    if a is None or b is None:
        return None
    (av, ascale), (bv, bscale) = a, b
    if bv == 0:
        return a
    if av == 0:
        return b
    low = min(ascale, bscale)
    left, right = av * 10 ** (ascale - low), bv * 10 ** (bscale - low)
    if not (_fits(left) and _fits(right) and _fits(left + right)):
        return None
    return left + right, low


@dataclass
class _Scan:
    """A cursor over a quantity string, advancing the way parseQuantityString's loops do."""

    text: str
    pos: int = 0

    def done(self) -> bool:
        return self.pos >= len(self.text)

    def skip(self, chars: set[str]) -> str:
        """Advances over a run of `chars`; the run."""
        start = self.pos
        while not self.done() and self.text[self.pos] in chars:
            self.pos += 1
        return self.text[start : self.pos]

    def take(self, chars: str) -> str:
        """Advances over one of `chars` if it is next; that character, or ""."""
        if self.done() or self.text[self.pos] not in chars:
            return ""
        self.pos += 1
        return self.text[self.pos - 1]


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, value, num, denom, suffix), its phases in its order:
    sign, leading zeros, numerator, denominator, then a suffix that is all there is left."""
    scan = _Scan(text)
    positive = scan.take("+-") != "-"
    scan.skip({"0"})
    if scan.done():
        return positive, "0", "0", "", ""
    num = scan.skip(_DIGITS) or "0"
    if scan.done():
        return positive, text, num, "", ""
    denom = ""
    if scan.take("."):
        denom = scan.skip(_DIGITS)
        if scan.done():
            return positive, text, num, denom, ""
    value, suffix_start = text[: scan.pos], scan.pos
    scan.skip(_SUFFIX_CHARS)
    scan.take("+-")
    scan.skip(_DIGITS)
    if not scan.done():
        raise QuantityError(_FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and set(body) <= _DIGITS and abs(int(digits)) <= _MAX_EXPONENT:
            return 10, int(digits), DECIMAL_EXPONENT
    raise QuantityError("unable to parse quantity's suffix")


def parse_quantity(text: str) -> Quantity:
    """resource.ParseQuantity, exactly; raises QuantityError. Kubernetes keeps a quantity as an
    int64Amount when its digits fit, and as an inf.Dec otherwise."""
    if not isinstance(text, str) or not text:
        raise QuantityError(_FORMAT_WRONG)
    if text == "0":
        return Quantity(Fraction(0), DECIMAL_SI, (0, 0))
    positive, value, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix)
    small = _as_int64_amount(positive, num, denom, exponent, fmt)
    if small is not None:
        return small
    return _as_decimal(value, denom, base, exponent, fmt)


def _as_int64_amount(
    positive: bool, num: str, denom: str, exponent: int, fmt: str
) -> Quantity | None:
    """ParseQuantity's fast path: the quantity as an int64Amount (value x 10^scale, scale at
    least nano), or None when its digits may not fit one."""
    scale, mantissa = 0, 1
    if fmt in (DECIMAL_EXPONENT, DECIMAL_SI):
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        precision = -1
    scale -= len(denom)
    if precision < 0 or scale < _NANO:
        return None
    result = int(num + denom) * mantissa
    if not _fits(result):
        return None
    result = result if positive else -result
    return Quantity(Fraction(result) * Fraction(10) ** scale, fmt, (result, scale))


def _as_decimal(value: str, denom: str, base: int, exponent: int, fmt: str) -> Quantity:
    """ParseQuantity's slow path: the quantity as an inf.Dec, rounded up to nano units;
    a BinarySI one is capped at int64 and, below 1, becomes DecimalSI."""
    try:
        amount = Fraction(Decimal(value))
    except InvalidOperation as err:
        raise QuantityError("unable to parse quantity's numeric part") from err
    amount *= Fraction(base) ** exponent
    negative = amount < 0
    amount = abs(amount)
    # inf.Dec keeps the digits after the point: rounded up to nano units unless zero.
    dec_scale = 9 if amount else len(denom) - (exponent if base == 10 else 0)
    if amount:
        amount = Fraction(math.ceil(amount * 10**9), 10**9)
    if fmt == BINARY_SI and amount > INT64_MAX:
        amount, dec_scale = Fraction(INT64_MAX), 0
    if fmt == BINARY_SI and 0 < amount < 1:
        fmt = DECIMAL_SI
    return Quantity(-amount if negative else amount, fmt, None, dec_scale)


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def format_quantity(quantity: Quantity) -> str:
    """A canonical string: binary suffixes for BinarySI whole multiples of 1024, else decimal SI."""
    value = quantity.value
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == 0:
        return "0"
    # Binary suffixes only within int64: Kubernetes caps larger BinarySI values when parsing.
    if quantity.format == BINARY_SI and value.denominator == 1 and 1024 <= value <= INT64_MAX:
        for suffix, power in sorted(_BINARY_SUFFIXES.items(), key=lambda kv: -kv[1]):
            if value % (1 << power) == 0:
                return f"{sign}{value // (1 << power)}{suffix}"
    by_exponent = sorted(
        ((exp, s) for s, exp in _DECIMAL_SUFFIXES.items()), key=lambda pair: -pair[0]
    )
    for exp, suffix in by_exponent:
        scaled = value / Fraction(10) ** exp
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    nanos = math.ceil(value * 10**9)
    return f"{sign}{nanos}n"
