"""The decision rule and the percentiles, on hand-made per-prompt results (no network)."""

from datetime import UTC, datetime

import pytest

from plnt.gate.client import PromptResult
from plnt.gate.verdict import Budgets, Percentiles, decide, nearest_rank

BUDGETS = Budgets(ttft_ms=250, tpot_ms=40)
WHEN = datetime(2026, 11, 30, 4, 5, 6, tzinfo=UTC)


def ok(index, ttft, tpot, tokens=16):
    return PromptResult(index=index, outcome="ok", ttft_ms=ttft, tpot_ms=tpot, tokens=tokens)


def failed(index, outcome="http-error", error="HTTP 500: boom"):
    return PromptResult(index=index, outcome=outcome, error=error)


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [
        ([5.0], 50, 5.0),
        ([5.0], 95, 5.0),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),  # rank ceil(0.5 * 4) = 2, no interpolation
        ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
        (list(range(1, 11)), 95, 10),  # with 10 values p95 is the largest
        (list(range(1, 11)), 90, 9),
        (list(range(1, 21)), 95, 19),  # rank exactly 19, no float round-up to 20
        (list(range(1, 101)), 95, 95),
        (list(range(1, 101)), 100, 100),
        (list(range(100, 0, -1)), 1, 1),
        ([], 95, None),
    ],
)
def test_nearest_rank(values, percent, expected):
    assert nearest_rank(values, percent) == expected


@pytest.mark.parametrize("percent", [0, -5, 100.5])
def test_nearest_rank_refuses_percent_out_of_range(percent):
    with pytest.raises(ValueError, match="percent"):
        nearest_rank([1.0], percent)


def test_percentiles_of_figures():
    assert Percentiles.of([30.0, 10.0, 20.0]) == Percentiles(p50=20.0, p95=30.0)


def test_pass_when_all_succeed_within_budget():
    results = [ok(i, 120.0 + i, 20.0 + i / 10) for i in range(10)]
    verdict = decide(results, BUDGETS, WHEN)
    assert verdict.passed
    assert verdict.verdict == "Pass"
    assert verdict.ttft_ms == Percentiles(p50=124.0, p95=129.0)
    assert verdict.tpot_ms == Percentiles(p50=20.4, p95=20.9)
    assert verdict.reason == (
        "all 10 prompts succeeded; p95 TTFT 129.0 ms <= budget 250 ms; "
        "p95 TPOT 20.9 ms <= budget 40 ms"
    )


@pytest.mark.parametrize(
    ("results", "reason"),
    [
        (
            [ok(0, 412.0, 20.0), ok(1, 100.0, 20.0)],
            "p95 TTFT 412.0 ms > budget 250 ms",
        ),
        (
            [ok(0, 100.0, 20.0), ok(1, 100.0, 40.5)],
            "p95 TPOT 40.5 ms > budget 40 ms",
        ),
        (
            [ok(0, 300.0, 50.0)],
            "p95 TTFT 300.0 ms > budget 250 ms; p95 TPOT 50.0 ms > budget 40 ms",
        ),
        (
            [ok(0, 100.0, 20.0), failed(1)],
            "1 of 2 prompts failed (prompt 1: HTTP 500: boom)",
        ),
        (
            [failed(i, "timeout", "no complete answer within 5 s") for i in range(5)],
            "5 of 5 prompts failed (prompt 0: no complete answer within 5 s, prompt 1: no "
            "complete answer within 5 s, prompt 2: no complete answer within 5 s, and 2 more)",
        ),
        (
            [ok(0, 100.0, None, tokens=1)],
            "TPOT not measurable: every answer was a single token",
        ),
        ([], "no prompts were measured"),
    ],
)
def test_fail_reasons(results, reason):
    verdict = decide(results, BUDGETS, WHEN)
    assert not verdict.passed
    assert verdict.verdict == "Fail"
    assert verdict.reason == reason


def test_exactly_on_budget_passes():
    verdict = decide([ok(0, 250.0, 40.0)], BUDGETS, WHEN)
    assert verdict.passed


def test_p95_is_the_slowest_of_ten_so_one_slow_prompt_fails():
    results = [ok(i, 100.0, 20.0) for i in range(9)] + [ok(9, 251.0, 20.0)]
    verdict = decide(results, BUDGETS, WHEN)
    assert not verdict.passed
    assert verdict.ttft_ms == Percentiles(p50=100.0, p95=251.0)


def test_percentiles_leave_out_failed_prompts():
    verdict = decide([ok(0, 100.0, 20.0), failed(1)], BUDGETS, WHEN)
    assert verdict.ttft_ms == Percentiles(p50=100.0, p95=100.0)


def test_to_status_is_camel_case_without_nulls():
    results = [ok(1, 123.456, 20.04, tokens=8), failed(0, "no-done", "stream ended early")]
    status = decide(results, BUDGETS, WHEN).to_status()
    assert status == {
        "verdict": "Fail",
        "reason": "1 of 2 prompts failed (prompt 0: stream ended early)",
        "ttftMs": {"p50": 123.5, "p95": 123.5},
        "tpotMs": {"p50": 20.0, "p95": 20.0},
        "prompts": [
            {"index": 0, "tokens": 0, "outcome": "no-done", "error": "stream ended early"},
            {"index": 1, "ttftMs": 123.5, "tpotMs": 20.0, "tokens": 8, "outcome": "ok"},
        ],
        "budgets": {"ttftMs": 250, "tpotMs": 40},
        "measuredAt": "2026-11-30T04:05:06Z",
    }


def test_to_status_of_all_failed_has_no_figures():
    status = decide([failed(0)], BUDGETS, WHEN).to_status()
    assert status["ttftMs"] == {}
    assert status["tpotMs"] == {}
    assert status["verdict"] == "Fail"


def test_to_json_keys_for_the_cli():
    data = decide([ok(0, 120.0, 20.0, tokens=4)], BUDGETS, WHEN).to_json()
    assert data["verdict"] == "pass"
    assert data["ttft_ms"] == {"p50": 120.0, "p95": 120.0}
    assert data["tpot_ms"] == {"p50": 20.0, "p95": 20.0}
    assert data["prompts"] == [
        {
            "index": 0,
            "ttft_ms": 120.0,
            "tpot_ms": 20.0,
            "max_gap_ms": None,
            "tokens": 4,
            "outcome": "ok",
            "error": None,
            "attempts": 1,
        }
    ]
    assert data["measured_at"] == "2026-11-30T04:05:06Z"
    assert data["reason"].startswith("all 1 prompt succeeded;")
