"""1,000 concurrent RunFunction calls against one function server: no errors, no lasting growth."""

from __future__ import annotations

import asyncio
import time

from plnt import procs
from plnt.bench import grpc_load


def test_thousand_concurrent_calls_complete_and_memory_returns() -> None:
    req = grpc_load.example_request()
    with procs.serving(grpc_load.FUNCTION) as (address, proc):
        # Baseline after a warm-up at the same concurrency, so one-off allocations
        # (imports, compiled caches, gRPC's buffers) are in it.
        warm = asyncio.run(grpc_load.drive(address, req, clients=1000, calls_per_client=1))
        assert warm["errors"] == 0
        baseline = procs.rss_kib(proc.pid)

        for _ in range(3):
            run = asyncio.run(grpc_load.drive(address, req, clients=1000, calls_per_client=1))
            assert run["calls"] == 1000
            assert run["errors"] == 0
        time.sleep(1.0)
        after = procs.rss_kib(proc.pid)
    assert after <= baseline * 1.10, f"RSS grew from {baseline} KiB to {after} KiB"
