"""One function server under load over loopback gRPC: throughput, latency and memory.

The ModelReplica function on the PrefillDecode example is served by `plnt function` in its own
process, exactly as Crossplane would reach it; clients are asyncio gRPC stubs in this process.

`contention`: 1,000 RunFunction calls at once, each with a 60 s deadline (what Crossplane gives a
function), while every core is kept busy by CPU burners (one, then two processes per core, each
bounded in time). Reported: how many completed, were refused (RESOURCE_EXHAUSTED), were
cancelled, ran out of deadline or failed otherwise, with the p50/p99 latency of those that
completed and of the refusals.
"""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt_host import procs, render
from plnt_host.bench.cli import percentile

FUNCTION = "function-model-replica"
EXAMPLE = "model-replica-pd"
STORM_CALLS = 1000
STORM_DEADLINE_S = 60.0  # what Crossplane gives one function call
BURN_LIMIT_S = 150.0  # a burner stops by itself even if nobody stops it


def example_request(example: str = EXAMPLE) -> fnv1.RunFunctionRequest:
    scenario = render.load_scenario(render.REPO_ROOT / "examples" / example)
    composition = render.compositions()[(scenario.xr["apiVersion"], scenario.xr["kind"])]
    trace: list = []
    render.run_pipeline(composition, scenario.xr, scenario.observed, scenario.required, trace=trace)
    return trace[0][1]


async def _at_once(
    address: str,
    req: fnv1.RunFunctionRequest,
    deadline_s: float,
    task: Callable[[grpcv1.FunctionRunnerServiceStub], Awaitable[None]],
    count: int,
) -> float:
    """Warms the server up with one call, then runs `count` tasks at once on one channel; the
    wall time they took."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        await stub.RunFunction(req, timeout=deadline_s)
        start = time.perf_counter()
        await asyncio.gather(*(task(stub) for _ in range(count)))
        return time.perf_counter() - start


async def drive(
    address: str,
    req: fnv1.RunFunctionRequest,
    clients: int,
    calls_per_client: int,
    deadline_s: float = STORM_DEADLINE_S,
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0

    async def client(stub: grpcv1.FunctionRunnerServiceStub) -> None:
        nonlocal errors
        for _ in range(calls_per_client):
            start = time.perf_counter()
            try:
                await stub.RunFunction(req, timeout=deadline_s)
            except grpc.aio.AioRpcError:
                errors += 1
                continue
            latencies.append((time.perf_counter() - start) * 1000)

    wall = await _at_once(address, req, deadline_s, client, clients)
    return {
        "clients": clients,
        "calls": len(latencies) + errors,
        "errors": errors,
        "calls_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


async def storm(
    address: str, req: fnv1.RunFunctionRequest, calls: int, deadline_s: float
) -> dict[str, Any]:
    """`calls` RunFunction calls at once; outcomes by status code, latencies by outcome."""
    latencies: dict[str, list[float]] = collections.defaultdict(list)

    async def one(stub: grpcv1.FunctionRunnerServiceStub) -> None:
        start = time.perf_counter()
        try:
            await stub.RunFunction(req, timeout=deadline_s)
            outcome = "completed"
        except grpc.aio.AioRpcError as err:
            outcome = OUTCOMES.get(err.code(), "other")
        latencies[outcome].append((time.perf_counter() - start) * 1000)

    wall = await _at_once(address, req, deadline_s, one, calls)
    out: dict[str, Any] = {"calls": calls, "deadline_s": deadline_s, "wall_s": round(wall, 1)}
    for outcome in ("completed", "refused", "cancelled", "deadline_exceeded", "other"):
        out[outcome] = len(latencies[outcome])
    for outcome in ("completed", "refused", "cancelled"):
        if latencies[outcome]:
            out[f"{outcome}_p50_ms"] = round(percentile(latencies[outcome], 50), 1)
            out[f"{outcome}_p99_ms"] = round(percentile(latencies[outcome], 99), 1)
    return out


OUTCOMES = {
    grpc.StatusCode.RESOURCE_EXHAUSTED: "refused",
    grpc.StatusCode.CANCELLED: "cancelled",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline_exceeded",
}


def burners(count: int, seconds: float = BURN_LIMIT_S) -> list[subprocess.Popen]:
    """CPU burners: one busy loop per process, each ending by itself after `seconds`."""
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


def contention(
    calls: int = STORM_CALLS, deadline_s: float = STORM_DEADLINE_S, per_core: int = 1
) -> dict[str, Any]:
    """The storm with every core saturated by `per_core` burners."""
    req = example_request()
    cores = len(os.sched_getaffinity(0))
    with procs.serving(FUNCTION) as (address, _proc):
        burning = burners(cores * per_core)
        try:
            time.sleep(1.0)  # let the burners take the cores
            row = asyncio.run(storm(address, req, calls, deadline_s))
        finally:
            procs.stop(burning)
    return {"cpu_burners": cores * per_core, **row}


def bench(total_calls: int = 640) -> dict[str, Any]:
    req = example_request()
    with procs.serving(FUNCTION) as (address, proc):
        rows = [
            asyncio.run(drive(address, req, clients, max(1, total_calls // clients)))
            for clients in (1, 8, 64)
        ]
        peak = procs.peak_rss_kib(proc.pid)
    return {
        "function": FUNCTION,
        "example": EXAMPLE,
        "request_bytes": req.ByteSize(),
        "load": rows,
        "server_peak_rss_mib": round(peak / 1024, 1),
        # One burner per core saturates both; two per core stand for a machine that is also
        # busy with other work (the server then gets about a fifth of the CPU).
        "contention": [contention(per_core=n) for n in (1, 2)],
    }
