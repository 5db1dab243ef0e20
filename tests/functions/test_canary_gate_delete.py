"""Delete cancels the smoke test: a measurement no call asks about any more (Crossplane calls no
function for an XR being deleted) stops within its lease, and a call for an XR being deleted
stops it at once; either way no request reaches the engine after that.

The engine is a loopback fake streaming 8 tokens 200 ms apart (1.4 s a prompt), 12 prompts at 4
at a time: the whole test takes three rounds, about 4.2 s, so a measurement that went on would
send all 12.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from functions.canary_gate import fn, inflight
from plnt.gate.fake_server import Behaviour
from tests.functions.test_canary_gate import GENEROUS, canary_at, gate, request, run, xr
from tests.support import serve_in_thread

SLOW = Behaviour(ttft_ms=0, tpot_ms=200, tokens=8)
PROMPTS = 12
ROUND = 4  # prompts in flight at once (the gate's concurrency)
LEASE_S, CHECK_S = 1.0, 0.1


@pytest.fixture(autouse=True)
def short_lease(monkeypatch: pytest.MonkeyPatch) -> Iterator[inflight.Measurements]:
    measurements = inflight.Measurements(lease_s=LEASE_S, check_s=CHECK_S)
    monkeypatch.setattr(fn, "MEASUREMENTS", measurements)
    yield measurements
    measurements.clear()


def composite() -> dict:
    out = xr({"prompts": PROMPTS, "maxTokens": 8, **GENEROUS})
    out["metadata"]["uid"] = "6b1f7f0e-5c1a-4a8e-9d6e-0f2a4b6c8d10"
    return out


def requests_after(server, seconds: float) -> int:
    time.sleep(seconds)
    return len(server.requests)


def test_a_measurement_nobody_asks_about_stops_within_its_lease(short_lease) -> None:
    with serve_in_thread(SLOW) as server:
        req = request(composite(), canary_at(server.url))
        assert gate(run(req))["state"] == "Measuring"  # the last call: then the XR is deleted
        settled = requests_after(server, LEASE_S + CHECK_S + 0.4)
        assert settled == ROUND  # the first round only: abandoned while it streamed
        assert requests_after(server, 4.0) == settled  # nothing sent after that
    assert short_lease.abandoned == 1
    assert short_lease.running() == []


def test_a_measurement_that_is_asked_about_runs_to_its_verdict(short_lease) -> None:
    with serve_in_thread(SLOW) as server:
        req = request(composite(), canary_at(server.url))
        deadline = time.monotonic() + 30
        while (state := gate(run(req))).get("verdict") is None:
            assert time.monotonic() < deadline, state
            time.sleep(0.3)  # well inside the lease, as Crossplane's 3 s TTL is inside 8 s
        assert state["verdict"] == "Pass", state
        assert len(server.requests) == PROMPTS
    assert short_lease.abandoned == 0


def test_a_call_for_an_xr_being_deleted_stops_its_measurement_at_once(short_lease) -> None:
    with serve_in_thread(SLOW) as server:
        assert gate(run(request(composite(), canary_at(server.url))))["state"] == "Measuring"
        deleting = composite()
        deleting["metadata"]["deletionTimestamp"] = "2026-12-05T14:00:00Z"
        rsp = run(request(deleting, canary_at(server.url)))
        assert not rsp.desired.composite.resource.fields  # nothing written for it
        settled = requests_after(server, 0.5)
        assert settled <= ROUND  # at most the round already sent
        assert requests_after(server, 4.0) == settled
    assert short_lease.abandoned == 1


def test_an_abandoned_measurement_of_an_xr_still_there_starts_again(short_lease) -> None:
    with serve_in_thread(SLOW) as server:
        req = request(composite(), canary_at(server.url))
        run(req)
        time.sleep(LEASE_S + CHECK_S + 0.4)
        assert short_lease.running() == []
        assert gate(run(req))["state"] == "Measuring"  # its next call measures afresh
        assert short_lease.started == 2
        assert short_lease.running()
