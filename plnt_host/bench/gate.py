"""The gate client's own overhead, measured against an instant loopback server.

The fake server (TTFT 0, TPOT 0) runs in a separate process so that the client's CPU time is
its own. For each concurrency (1 and 64) the same number of prompts is measured at two answer
lengths; the difference gives the cost per token and the intercept the cost per request:

    cost(tokens) = per_request + tokens * per_token

Three ways of counting cost, all per request of `requests` prompts:
- cpu: the client process's CPU time (time.process_time): httpx, SSE parsing, JSON, timing;
- wall: wall-clock time (the server's time is its injected latency, zero here);
- wall_minus_server: wall time minus the time the server had a request in flight (its /stats
  busy time); meaningful at concurrency 1, near zero at 64 where the server is always busy.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import httpx

from plnt.gate.client import GateConfig, measure

CONCURRENCIES = (1, 64)
SHORT_TOKENS = 2
LONG_TOKENS = 66
REQUESTS = 256


def _start_server(tokens: int) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, "-m", "plnt.gate.fake_server", "--port", "0"]
    args += ["--ttft-ms", "0", "--tpot-ms", "0", "--tokens", str(tokens)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()  # "fake vLLM server on http://127.0.0.1:PORT"
    if " on " not in line:
        process.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return process, line.rsplit(" on ", 1)[1].strip()


def _busy_ns(url: str) -> int:
    return int(httpx.get(f"{url}/stats", trust_env=False).json()["busy_ns"])


def _run(url: str, concurrency: int, tokens: int, requests: int) -> dict[str, float]:
    """One measured run: wall, client CPU and server busy seconds, with every prompt ok."""
    config = GateConfig(
        base_url=url,
        model="bench",
        prompts=requests,
        max_tokens=tokens,
        concurrency=concurrency,
        timeout_s=60,
    )
    busy_before = _busy_ns(url)
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    results = asyncio.run(measure(config))
    wall = time.perf_counter() - wall_before
    cpu = time.process_time() - cpu_before
    server = (_busy_ns(url) - busy_before) / 1e9
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"bench prompt failed: {failed[0].error}")
    return {"wall_s": wall, "cpu_s": cpu, "server_s": server}


def _fit(short: float, long: float, requests: int) -> dict[str, float]:
    """Per-request and per-token microseconds from totals at SHORT_TOKENS and LONG_TOKENS."""
    per_token = (long - short) / requests / (LONG_TOKENS - SHORT_TOKENS)
    per_request = short / requests - SHORT_TOKENS * per_token
    return {
        "per_request_us": round(per_request * 1e6, 1),
        "per_token_us": round(per_token * 1e6, 2),
    }


def bench(requests: int = REQUESTS, concurrencies: tuple[int, ...] = CONCURRENCIES) -> dict:
    """Measure the gate client's overhead; returns figures keyed by concurrency."""
    process, url = _start_server(LONG_TOKENS)
    try:
        _run(url, max(concurrencies), SHORT_TOKENS, max(concurrencies))  # warm up imports
        figures: dict[str, Any] = {}
        for concurrency in concurrencies:
            short = _run(url, concurrency, SHORT_TOKENS, requests)
            long = _run(url, concurrency, LONG_TOKENS, requests)
            figures[f"concurrency_{concurrency}"] = {
                "cpu": _fit(short["cpu_s"], long["cpu_s"], requests),
                "wall": _fit(short["wall_s"], long["wall_s"], requests),
                "wall_minus_server": _fit(
                    short["wall_s"] - short["server_s"],
                    long["wall_s"] - long["server_s"],
                    requests,
                ),
                "wall_ms": {
                    f"{SHORT_TOKENS}_tokens": round(short["wall_s"] * 1e3, 1),
                    f"{LONG_TOKENS}_tokens": round(long["wall_s"] * 1e3, 1),
                },
            }
    finally:
        process.terminate()
        process.wait(timeout=10)
    return {
        "what": "plnt gate client overhead against an instant loopback vLLM-style server",
        "requests_per_run": requests,
        "tokens_per_answer": [SHORT_TOKENS, LONG_TOKENS],
        **figures,
    }


if __name__ == "__main__":
    import json

    sys.stdout.write(json.dumps(bench(), indent=2) + "\n")
