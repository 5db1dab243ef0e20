"""One smoke test of a canary: every canary endpoint measured at once, within a deadline.

Each endpoint gets the whole smoke test (`smokeTest.prompts` prompts): every canary replica
must meet the budgets on its own, so one slow replica cannot hide behind fast ones. The
verdict is the first failing endpoint's (by name), else all endpoints' prompts pooled under
the same rule (if every endpoint passes, the pooled nearest-rank p95 cannot exceed the worst
endpoint's, so the pool passes too).

The whole measurement is bounded by MEASURE_DEADLINE_S, well inside the two minutes Crossplane
(v2.2) gives one composite reconcile; each request by REQUEST_TIMEOUT_S. Running out of time is
a failed verdict, never a pass (the gate fails closed).

The caller names the run with a nonce (the canary revision): every prompt starts with it and
the endpoint's name, so an engine's prefix cache never answers a smoke test from an earlier
revision's, nor one endpoint's from another's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime

from plnt.gate.client import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, GateConfig, PromptResult
from plnt.gate.runner import run_gate_async
from plnt.gate.verdict import Budgets, Percentiles, Verdict, decide

MEASURE_DEADLINE_S = 45.0
REQUEST_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Target:
    """One canary endpoint to smoke-test. The API key stays out of repr (and so out of logs)."""

    endpoint: str
    base_url: str
    model: str
    api_key: str | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class SmokeTest:
    """What `spec.canary.smokeTest` asks of every endpoint, and the whole test's deadline. How
    each endpoint is driven (concurrency, per-request timeout) is this module's, in `_one`."""

    prompts: int
    budgets: Budgets
    max_tokens: int = DEFAULT_MAX_TOKENS
    deadline_s: float = MEASURE_DEADLINE_S


def failed(reason: str, budgets: Budgets) -> Verdict:
    """A Fail verdict without measurements (nothing could be measured)."""
    return Verdict(
        passed=False,
        reason=reason,
        ttft_ms=Percentiles(None, None),
        tpot_ms=Percentiles(None, None),
        prompts=(),
        budgets=budgets,
        measured_at=datetime.now(UTC),
    )


async def _one(target: Target, test: SmokeTest, nonce: str | None) -> Verdict:
    try:
        config = GateConfig(
            base_url=target.base_url,
            model=target.model,
            prompts=test.prompts,
            ttft_budget_ms=test.budgets.ttft_ms,
            tpot_budget_ms=test.budgets.tpot_ms,
            max_tokens=test.max_tokens,
            concurrency=min(DEFAULT_CONCURRENCY, test.prompts),
            timeout_s=REQUEST_TIMEOUT_S,
            api_key=target.api_key,
        )
        if nonce:  # else the config's own random one
            config = dataclasses.replace(config, nonce=f"{nonce}/{target.endpoint}")
    except ValueError as err:
        return failed(f"cannot smoke-test: {err}", test.budgets)
    return await run_gate_async(config)


async def smoke_test(targets: list[Target], test: SmokeTest, nonce: str | None = None) -> Verdict:
    """Measure every target concurrently and combine; never raises for server trouble.

    nonce names the run (unique per run: the canary revision); None draws a random one."""
    if not targets:
        return failed("no canary endpoint to measure", test.budgets)
    try:
        async with asyncio.timeout(test.deadline_s):
            verdicts = await asyncio.gather(*(_one(t, test, nonce) for t in targets))
    except TimeoutError:
        return failed(f"the smoke test did not finish within {test.deadline_s:g} s", test.budgets)
    return combine({t.endpoint: v for t, v in zip(targets, verdicts, strict=True)}, test.budgets)


def combine(by_endpoint: Mapping[str, Verdict], budgets: Budgets) -> Verdict:
    """One verdict for the canary: the first failing endpoint's, else the pooled prompts'."""
    if len(by_endpoint) == 1:
        return next(iter(by_endpoint.values()))
    for endpoint in sorted(by_endpoint):
        verdict = by_endpoint[endpoint]
        if not verdict.passed:
            return dataclasses.replace(verdict, reason=f"endpoint {endpoint}: {verdict.reason}")
    pooled: list[PromptResult] = []
    for endpoint in sorted(by_endpoint):
        offset = len(pooled)
        pooled += [
            dataclasses.replace(p, index=offset + p.index) for p in by_endpoint[endpoint].prompts
        ]
    return decide(pooled, budgets)
