"""One function server under load over loopback gRPC: throughput, latency and memory.

The ModelReplica function on the PrefillDecode example is served by `plnt function` in its own
process, exactly as Crossplane would reach it; clients are asyncio gRPC stubs in this process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt import procs, render
from plnt.bench.cli import percentile

FUNCTION = "function-model-replica"
EXAMPLE = "model-replica-pd"


def example_request(example: str = EXAMPLE) -> fnv1.RunFunctionRequest:
    scenario = render.load_scenario(render.REPO_ROOT / "examples" / example)
    composition = render.compositions()[(scenario.xr["apiVersion"], scenario.xr["kind"])]
    trace: list = []
    render.run_pipeline(composition, scenario.xr, scenario.observed, scenario.required, trace=trace)
    return trace[0][1]


async def drive(
    address: str, req: fnv1.RunFunctionRequest, clients: int, calls_per_client: int
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0

    async def client(stub: grpcv1.FunctionRunnerServiceStub) -> None:
        nonlocal errors
        for _ in range(calls_per_client):
            start = time.perf_counter()
            try:
                await stub.RunFunction(req, timeout=30)
            except grpc.aio.AioRpcError:
                errors += 1
                continue
            latencies.append((time.perf_counter() - start) * 1000)

    async with grpc.aio.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        await stub.RunFunction(req, timeout=30)  # warm up
        start = time.perf_counter()
        await asyncio.gather(*(client(stub) for _ in range(clients)))
        wall = time.perf_counter() - start
    return {
        "clients": clients,
        "calls": len(latencies) + errors,
        "errors": errors,
        "calls_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


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
    }
