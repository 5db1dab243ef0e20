"""Every corpus case gives the same match / nomatch / error in plnt.cel and in Kubernetes."""

from __future__ import annotations

from collections import Counter

from tests.cel.oracle import diff_table, load_corpus, run_oracle


def test_corpus_is_large_and_covers_every_outcome(oracle):
    cases = load_corpus()
    outcomes = Counter(o["result"] for o in run_oracle(oracle, cases).values())
    assert len(cases) >= 200
    assert outcomes["match"] >= 50
    assert outcomes["nomatch"] >= 50
    assert outcomes["error"] >= 50


def test_corpus_matches_kubernetes(oracle):
    cases = load_corpus()
    results = run_oracle(oracle, cases)
    assert set(results) == {c["id"] for c in cases}
    rows = diff_table(cases, results)
    assert not rows, f"{len(rows)} of {len(cases)} cases differ:\n" + "\n".join(rows)
