"""plnt.quantity agrees with Kubernetes' resource.Quantity on random quantity strings.

For each string (and pairs, for add/sub) the oracle checks, in Kubernetes, that the value,
isInteger(), asInteger() and asApproximateFloat() are exactly what plnt.quantity computes, and
that strings plnt rejects are rejected there too. PLNT_FUZZ_EXAMPLES raises the count.
"""

from __future__ import annotations

import os
import random

import pytest

from plnt.quantity import Quantity, QuantityError, format_quantity, parse_quantity
from tests.cel.generate import quantity_text
from tests.cel.oracle import run_oracle

SEED = 424242
EXAMPLES = int(os.environ.get("PLNT_FUZZ_EXAMPLES", "300"))


def _claims(expr: str, quantity: Quantity) -> str:
    """A CEL condition true exactly when Kubernetes computes what plnt computed."""
    as_int, is_int = quantity.as_int64()
    integer = f"{expr}.asInteger() == {as_int}" if is_int else f"!{expr}.isInteger()"
    return (
        f'{expr}.compareTo(quantity("{format_quantity(quantity)}")) == 0'
        f" && {expr}.isInteger() == {str(is_int).lower()} && {integer}"
        f" && {expr}.asApproximateFloat() == {quantity.as_approximate_float()!r}"
    )


def _cases(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        text, other = quantity_text(rng), quantity_text(rng)
        try:
            left = parse_quantity(text)
        except QuantityError:
            cases.append({"id": f"q{index}", "expression": f'!isQuantity("{text}")'})
            continue
        claims = [_claims(f'quantity("{text}")', left)]
        try:
            right = parse_quantity(other)
        except QuantityError:
            right = None
        if right is not None:
            pair = f'quantity("{text}")', f'quantity("{other}")'
            claims.append(_claims(f"{pair[0]}.add({pair[1]})", left.add(right)))
            claims.append(_claims(f"{pair[0]}.sub({pair[1]})", left.sub(right)))
        cases.append({"id": f"q{index}", "expression": " && ".join(claims)})
    return [{**case, "device": {"driver": "example.com"}} for case in cases]


@pytest.mark.fuzz
def test_quantities_compute_as_in_kubernetes(oracle):
    cases = _cases(SEED, EXAMPLES)
    results = run_oracle(oracle, cases)
    wrong = [
        f"{c['expression']}  -> {results[c['id']]['result']} {results[c['id']].get('message', '')}"
        for c in cases
        if results[c["id"]]["result"] != "match"
    ]
    assert sum("isQuantity" not in c["expression"] for c in cases) >= EXAMPLES // 2
    assert not wrong, f"{len(wrong)} of {len(cases)} differ:\n" + "\n".join(wrong[:20])
