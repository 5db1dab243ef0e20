"""Entry points: measure with the client, then decide. The async one is for callers that
already run an event loop (an async composition function); the sync one wraps it."""

from __future__ import annotations

import asyncio

from plnt.gate.client import GateConfig, measure, wait_routable
from plnt.gate.verdict import Budgets, Verdict, decide


async def run_gate_async(config: GateConfig) -> Verdict:
    """Smoke-test config.base_url and return the verdict; never raises for server trouble.
    The first prompt waits until the route answers (wait_routable)."""
    await wait_routable(config)
    results = await measure(config)
    return decide(results, Budgets(ttft_ms=config.ttft_budget_ms, tpot_ms=config.tpot_budget_ms))


def run_gate(config: GateConfig) -> Verdict:
    """run_gate_async for synchronous callers (starts its own event loop)."""
    return asyncio.run(run_gate_async(config))
