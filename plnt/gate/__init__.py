"""plnt's canary latency gate: stream chat completions, time TTFT/TPOT, decide pass or fail.

    verdict = run_gate(GateConfig(base_url="http://canary:8000", model="m"))
    status = verdict.to_status()   # for an XR's status.canary.gate

Modules: `client` (httpx measuring client), `stream` (SSE/chunk parsing), `verdict` (percentiles
and the rule), `runner` (entry points), `fake_server` (a loopback vLLM-style server for tests
and `plnt bench`). The `plnt gate` command and the client's benchmark are the host's
(plnt_host/gate_cli.py, plnt_host/bench/gate.py).
"""

from plnt.gate.client import GateConfig, PromptResult, measure
from plnt.gate.runner import run_gate, run_gate_async
from plnt.gate.verdict import Budgets, Percentiles, Verdict, decide, nearest_rank

__all__ = [
    "Budgets",
    "GateConfig",
    "Percentiles",
    "PromptResult",
    "Verdict",
    "decide",
    "measure",
    "nearest_rank",
    "run_gate",
    "run_gate_async",
]
