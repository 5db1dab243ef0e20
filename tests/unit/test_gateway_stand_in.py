"""The Gateway stand-ins' data plane of the live tests (tests/e2e/engines.py), on its own: a
request through the control-plane Gateway and a workload cluster's Gateway to a fake engine
is answered every time, the garbage collector running meanwhile."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from plnt import labels
from plnt_host import procs
from tests.e2e import engines

NS = "team"
REPLICAS = ("m-0", "m-1")
REQUESTS = 40  # without the tasks held, the first one was lost (5 runs of 5)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class _API:
    def __init__(self, name: str) -> None:
        self.name = name


def _route(name: str, prefix: str, refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"matches": [{"path": {"type": "PathPrefix", "value": prefix}}]}
    if refs:
        rule["backendRefs"] = refs
    return {"metadata": {"namespace": NS, "name": name}, "spec": {"rules": [rule]}}


def _ref(replica: str) -> dict[str, Any]:
    rewrite = {"type": "ReplacePrefixMatch", "replacePrefixMatch": f"/{NS}/{replica}/"}
    return {
        "name": f"ep-{replica}",
        "port": 80,
        "weight": 1,
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": rewrite}}],
    }


@pytest.fixture
def gateway() -> Iterator[str]:
    """The control-plane Gateway's URL, routing /team/m by weight to two replicas, each on a
    workload cluster's Gateway of its own."""
    data_plane = engines.Engines(simulator=None)
    data_plane.start()
    try:
        ports = {name: procs.free_port() for name in ("mgmt", *REPLICAS)}
        for name, port in ports.items():
            data_plane.listen("127.0.0.1", _API(name), port)  # type: ignore[arg-type]
        data_plane.routes["mgmt"] = [_route("m", f"/{NS}/m", [_ref(r) for r in REPLICAS])]
        data_plane.backends["mgmt"] = {(NS, f"ep-{r}"): ("127.0.0.1", ports[r]) for r in REPLICAS}
        for replica in REPLICAS:
            data_plane.routes[replica] = [_route(replica, f"/{NS}/{replica}")]
            data_plane.ready[replica] = {(NS, labels.value(replica))}
        yield f"http://127.0.0.1:{ports['mgmt']}/{NS}/m"
    finally:
        data_plane.stop()


def test_every_request_through_two_hops_is_answered_while_the_collector_runs(
    gateway: str,
) -> None:
    stop = threading.Event()

    def collect() -> None:
        while not stop.is_set():
            gc.collect()
            stop.wait(0.002)

    # Only what the test allocates is collected: a full collection of the heap that the tests
    # before this one left in the same process holds the GIL for most of a second, and back
    # to back those starve the data plane until the test runs out of time.
    gc.freeze()
    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    outcomes = []
    try:
        for _ in range(REQUESTS):
            try:
                with httpx.stream(
                    "POST", f"{gateway}/v1/chat/completions", json=BODY, timeout=5
                ) as r:
                    text = r.read().decode()
                outcomes.append(str(r.status_code) if "[DONE]" in text else text[:100])
            except httpx.HTTPError as e:
                outcomes.append(repr(e))
            if outcomes[-1] != "200":
                break  # each lost request waits out the client's timeout
    finally:
        stop.set()
        collector.join(5)
        gc.unfreeze()
    assert outcomes == ["200"] * REQUESTS, f"request {len(outcomes)}: {outcomes[-1]}"
