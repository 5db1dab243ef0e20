"""The gate's decision: nearest-rank percentiles and the pass/fail rule, as pure functions.

Rule (default, and the only one so far): pass iff every prompt succeeded AND the nearest-rank
p95 of TTFT <= the TTFT budget AND the nearest-rank p95 of TPOT <= the TPOT budget. Nearest rank
(no interpolation) reports a latency some prompt actually had. With 10 prompts the p95 is the
slowest prompt, which is what a smoke test should hold to. Percentiles cover successful
prompts only; a failure already fails the gate on its own. TPOT that cannot be measured (every
answer one token long) fails closed.

Beside the percentiles the verdict reports the largest gap between two consecutive text chunks
of any successful prompt: a stall that an average TPOT hides. It is a figure, not a budget (the
seed's smokeTest has TTFT and TPOT budgets only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from plnt import contracts
from plnt.gate.client import PromptResult

# How many failed prompts the reason names before it says "and N more".
_NAMED_FAILURES = 3


def nearest_rank(values: Iterable[float], percent: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least percent% of values <= it."""
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], got {percent}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = math.ceil(percent * len(ordered) / 100)
    return ordered[rank - 1]


@dataclass(frozen=True)
class Percentiles:
    p50: float | None
    p95: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        return cls(p50=nearest_rank(values, 50), p95=nearest_rank(values, 95))

    def rounded(self, digits: int) -> dict[str, float | None]:
        return {"p50": _round(self.p50, digits), "p95": _round(self.p95, digits)}


@dataclass(frozen=True)
class Budgets:
    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class Verdict:
    """The gate's answer with the figures it was decided on."""

    passed: bool
    reason: str
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    prompts: tuple[PromptResult, ...]
    budgets: Budgets
    measured_at: datetime
    max_gap_ms: float | None = None  # the largest gap between two text chunks of any prompt

    @property
    def verdict(self) -> str:
        return contracts.PASS if self.passed else contracts.FAIL

    @property
    def measured_at_text(self) -> str:
        return self.measured_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def to_status(self) -> dict[str, Any]:
        """The verdict for an XR's status.canary.gate: camelCase, 0.1 ms, no null values
        (a typed status field rejects null)."""
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "ttftMs": _without_none(self.ttft_ms.rounded(1)),
            "tpotMs": _without_none(self.tpot_ms.rounded(1)),
            **_without_none({"maxGapMs": _round(self.max_gap_ms, 1)}),
            "prompts": [
                _without_none(
                    {
                        "index": p.index,
                        "ttftMs": _round(p.ttft_ms, 1),
                        "tpotMs": _round(p.tpot_ms, 1),
                        "maxGapMs": _round(p.max_gap_ms, 1),
                        "tokens": p.tokens,
                        "outcome": p.outcome,
                        "error": p.error,
                    }
                )
                for p in self.prompts
            ],
            "budgets": {"ttftMs": self.budgets.ttft_ms, "tpotMs": self.budgets.tpot_ms},
            "measuredAt": self.measured_at_text,
        }

    def to_json(self) -> dict[str, Any]:
        """The verdict as `plnt gate --json` prints it: snake_case, microsecond figures."""
        return {
            "verdict": "pass" if self.passed else "fail",
            "reason": self.reason,
            "ttft_ms": self.ttft_ms.rounded(3),
            "tpot_ms": self.tpot_ms.rounded(3),
            "max_gap_ms": _round(self.max_gap_ms, 3),
            "budgets": {"ttft_ms": self.budgets.ttft_ms, "tpot_ms": self.budgets.tpot_ms},
            "prompts": [
                {
                    "index": p.index,
                    "ttft_ms": _round(p.ttft_ms, 3),
                    "tpot_ms": _round(p.tpot_ms, 3),
                    "max_gap_ms": _round(p.max_gap_ms, 3),
                    "tokens": p.tokens,
                    "outcome": p.outcome,
                    "error": p.error,
                    "attempts": p.attempts,
                }
                for p in self.prompts
            ],
            "measured_at": self.measured_at_text,
        }


def decide(
    results: Sequence[PromptResult], budgets: Budgets, measured_at: datetime | None = None
) -> Verdict:
    """Apply the rule to the per-prompt results."""
    ok = [r for r in results if r.ok]
    ttft = Percentiles.of([r.ttft_ms for r in ok if r.ttft_ms is not None])
    tpot = Percentiles.of([r.tpot_ms for r in ok if r.tpot_ms is not None])
    gaps = [r.max_gap_ms for r in ok if r.max_gap_ms is not None]
    problems = _problems(results, ok, ttft, tpot, budgets)
    if problems:
        reason = "; ".join(problems)
    else:
        reason = (
            f"all {len(results)} prompt{'s' if len(results) > 1 else ''} succeeded; "
            f"p95 TTFT {ttft.p95:.1f} ms <= budget {budgets.ttft_ms:g} ms; "
            f"p95 TPOT {tpot.p95:.1f} ms <= budget {budgets.tpot_ms:g} ms"
        )
    return Verdict(
        passed=not problems,
        reason=reason,
        ttft_ms=ttft,
        tpot_ms=tpot,
        prompts=tuple(sorted(results, key=lambda r: r.index)),
        budgets=budgets,
        measured_at=measured_at or datetime.now(UTC),
        max_gap_ms=max(gaps, default=None),
    )


def _problems(
    results: Sequence[PromptResult],
    ok: Sequence[PromptResult],
    ttft: Percentiles,
    tpot: Percentiles,
    budgets: Budgets,
) -> list[str]:
    """Every reason the rule fails, in a fixed order; empty means pass."""
    if not results:
        return ["no prompts were measured"]
    problems = []
    failed = sorted((r for r in results if not r.ok), key=lambda r: r.index)
    if failed:
        named = ", ".join(f"prompt {r.index}: {r.error}" for r in failed[:_NAMED_FAILURES])
        more = len(failed) - _NAMED_FAILURES
        extra = f", and {more} more" if more > 0 else ""
        problems.append(f"{len(failed)} of {len(results)} prompts failed ({named}{extra})")
    if ttft.p95 is not None and ttft.p95 > budgets.ttft_ms:
        problems.append(f"p95 TTFT {ttft.p95:.1f} ms > budget {budgets.ttft_ms:g} ms")
    if tpot.p95 is None:
        if ok:
            problems.append("TPOT not measurable: every answer was a single token")
    elif tpot.p95 > budgets.tpot_ms:
        problems.append(f"p95 TPOT {tpot.p95:.1f} ms > budget {budgets.tpot_ms:g} ms")
    return problems


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _without_none(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if v is not None}
