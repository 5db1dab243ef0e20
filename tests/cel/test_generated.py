"""Seeded generated selectors and devices: plnt.cel agrees with Kubernetes on each.

The normal run checks a fixed slice of 200; `make fuzz` sets PLNT_FUZZ_EXAMPLES for more.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.cel.generate import cases
from tests.cel.oracle import diff_table, run_oracle

SEED = 20261130
EXAMPLES = int(os.environ.get("PLNT_FUZZ_EXAMPLES", "200"))


@pytest.mark.fuzz
def test_generated_selectors_match_kubernetes(oracle):
    generated = cases(SEED, EXAMPLES)
    results = run_oracle(oracle, generated)
    outcomes = Counter(r["result"] for r in results.values())
    assert min(outcomes["match"], outcomes["nomatch"], outcomes["error"]) >= EXAMPLES // 20, (
        outcomes
    )
    rows = diff_table(generated, results)
    assert not rows, f"{len(rows)} of {len(generated)} generated cases differ:\n" + "\n".join(
        rows[:50]
    )
