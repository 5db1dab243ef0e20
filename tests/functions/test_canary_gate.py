"""function-canary-gate through its real run_function, against a loopback vLLM-style server.

The XR is examples/deploy-qwen3-8b's with a canary; the canary's ModelReplica and ModelEndpoint
are given as observed state, the endpoint's URL pointing at `plnt.gate.fake_server`. Latency
assertions only use lower bounds (the server never answers sooner than injected) or budgets far
above what a loopback server takes, so no test depends on how busy the machine is.

A smoke test spans calls: the first answers Measuring and starts it in the background, a call
after it finished writes the verdict (`measured` below makes both calls and checks the first).
Every test starts with an empty set of measurements, as a fresh function process would.

The cases that measure nothing (skipped, waiting, carried, failed closed, idle) keep their whole
response in tests/functions/responses/canary_gate/; the tests named for a rule read the field it
is about. A measured response holds loopback ports and latencies, so those tests read fields.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import pathlib
import socket
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import grpc
import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from functions.canary_gate import canary, fn, inflight, measure
from plnt import contracts, xp
from plnt.capacity import binding
from plnt.gate.fake_server import Behaviour, FakeServer
from plnt_host import procs, render, runtime
from tests.functions import tables
from tests.support import binder_annotation, has_fatal, serve_in_thread

REPO = pathlib.Path(__file__).resolve().parents[2]
BASE_XR = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
STABLE = "1111111111"
CANARY = "2222222222"
NAMESPACE = BASE_XR["metadata"]["namespace"]
GENEROUS = {"ttftBudgetMs": 5000, "tpotBudgetMs": 1000}  # far above any loopback answer
FAST = Behaviour(ttft_ms=0, tpot_ms=0, tokens=8)
API_KEY = "sk-canary-do-not-leak"


# --- building requests ---------------------------------------------------------------------


def xr(smoke_test: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict:
    out = copy.deepcopy(BASE_XR)
    out["spec"]["canary"] = {
        "trafficPercent": 25,
        "smokeTest": {"prompts": 3, "maxTokens": 8, **(smoke_test or GENEROUS)},
    }
    out["status"] = (
        {"revisions": {"stable": STABLE, "canary": CANARY}} if status is None else status
    )
    return out


def labelled(kind: str, name: str, revision: str) -> dict[str, Any]:
    prefix = {"ModelReplica": "replica", "ModelEndpoint": "endpoint"}[kind]
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"modelplane.ai/revision": revision, "modelplane.ai/deployment": "qwen3-8b"},
            "annotations": {xp.COMPOSITION_RESOURCE_NAME: f"{prefix}-{name}"},
        },
    }


def replica(name: str, revision: str = CANARY, ready: bool = True) -> dict[str, Any]:
    obj = labelled("ModelReplica", name, revision)
    obj["spec"] = {"clusterName": "lab-l4", "engines": copy.deepcopy(BASE_XR["spec"]["engines"])}
    obj["status"] = {"conditions": [{"type": "Ready", "status": str(ready)}]}
    return obj


def endpoint(name: str, url: str, revision: str = CANARY, **spec: Any) -> dict[str, Any]:
    obj = labelled("ModelEndpoint", name, revision)
    obj["spec"] = {"url": url, **spec}
    return obj


def canary_at(url: str, ready: bool = True) -> list[dict[str, Any]]:
    """A stable replica and one canary replica with its endpoint at `url`."""
    return [
        replica("qwen3-8b-111111-0", STABLE),
        replica("qwen3-8b-222222-0", ready=ready),
        endpoint("qwen3-8b-222222-0", url),
    ]


def request(
    composite: dict[str, Any],
    observed: list[dict[str, Any]] = (),
    desired_status: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(composite)
    for obj in observed:
        name = obj["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]
        req.observed.resources[name].resource.update(obj)
    if desired_status is not None:
        req.desired.composite.resource.update({"status": desired_status})
    if context:
        req.context.update(context)
    return req


def run(req: fnv1.RunFunctionRequest, required: list[dict] = ()) -> fnv1.RunFunctionResponse:
    """Calls the function until its requirements are stable, answering them from `required`."""
    previous = None
    for _ in range(5):
        rsp = runtime.call_sync(fn.run_function, req, "function-canary-gate")
        assert not has_fatal(rsp), [r.message for r in rsp.results]
        wanted = dict(rsp.requirements.resources)
        if wanted == previous or not wanted:
            return rsp
        previous = wanted
        req = copy.deepcopy(req)
        req.required_resources.clear()
        for name, sel in wanted.items():
            req.required_resources[name].CopyFrom(render.fetch(list(required), sel))
    raise AssertionError("requirements did not stabilise")


def measured(req: fnv1.RunFunctionRequest, required: list[dict] = ()) -> fnv1.RunFunctionResponse:
    """Two reconciles of the same request: the first starts the smoke test and says so, the
    one after it finished carries the verdict."""
    started = fn.MEASUREMENTS.started
    first = run(req, required)
    assert fn.MEASUREMENTS.started == started + 1
    measuring = gate(first)
    assert measuring["state"] == "Measuring", measuring
    assert condition(first).reason == "Measuring"
    assert ttl_seconds(first) == fn.MEASURE_TTL_S
    passed_on = xp.context(
        fnv1.RunFunctionRequest(context=first.context), contracts.VERDICT_CONTEXT
    )
    assert (passed_on or {}).get("revision") != measuring["revision"]  # no verdict yet
    assert fn.MEASUREMENTS.wait(timeout=60)
    return run(req, required)


@pytest.fixture(autouse=True)
def fresh_measurements() -> Iterator[None]:
    fn.MEASUREMENTS.clear()
    yield
    fn.MEASUREMENTS.clear()


def status(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    return xp.to_dict(rsp.desired.composite.resource).get("status") or {}


def gate(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    return status(rsp)["canary"]["gate"]


def condition(rsp: fnv1.RunFunctionResponse) -> fnv1.Condition:
    (found,) = [c for c in rsp.conditions if c.type == "CanaryGate"]
    return found


def ttl_seconds(rsp: fnv1.RunFunctionResponse) -> float:
    return rsp.meta.ttl.ToMilliseconds() / 1000


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serve_in_thread(FAST) as running:
        yield running


@pytest.fixture
def closed_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- the cases that measure nothing ---------------------------------------------------------

# No case sends a prompt: this URL is never called (nothing listens on port 1 either).
UNCALLED = "http://127.0.0.1:1"
OBSERVED_PASS = {
    "revision": CANARY,
    "verdict": "Pass",
    "reason": "all 3 prompts succeeded",
    "ttftMs": {"p50": 120.5, "p95": 131.2},
    "tpotMs": {"p50": 20.1, "p95": 20.9},
    "budgets": {"ttftMs": 250, "tpotMs": 40},
    "prompts": [],
    "measuredAt": "2026-01-01T00:00:00Z",
}
NOON = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


class _Noon(datetime.datetime):
    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _Noon:
        return cls.fromtimestamp(NOON.timestamp(), tz)


def run_at_noon(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """fn.run_function, a verdict made without measuring dated at NOON (measure's clock)."""
    with mock.patch.object(measure, "datetime", _Noon):
        return fn.run_function(req)


def without_canary() -> fnv1.RunFunctionRequest:
    composite = xr()
    del composite["spec"]["canary"]
    req = request(composite, canary_at(UNCALLED), desired_status={"replicas": 3})
    req.desired.resources["replica-x"].resource.update({"kind": "ModelReplica"})
    req.context.update({"other": "value"})
    return req


def two_replicas_desired() -> fnv1.RunFunctionRequest:
    """The schedule step wants two canary replicas; only one exists so far."""
    req = request(xr(), canary_at(UNCALLED))
    req.desired.resources["replica-qwen3-8b-222222-1"].resource.update(replica("qwen3-8b-222222-1"))
    req.desired.resources["replica-qwen3-8b-222222-0"].resource.update(replica("qwen3-8b-222222-0"))
    req.desired.resources["endpoint-qwen3-8b-222222-0"].resource.update({"kind": "ModelEndpoint"})
    return req


def with_endpoint(**spec: Any) -> list[dict[str, Any]]:
    observed = canary_at(UNCALLED)
    observed[-1]["spec"].update(spec)
    return observed


def without_model_name() -> fnv1.RunFunctionRequest:
    composite = xr()
    container = composite["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] = ["--max-model-len=32768"]
    observed = canary_at(UNCALLED)
    observed[1]["spec"]["engines"] = composite["spec"]["engines"]
    return request(composite, observed)


def deleting() -> dict[str, Any]:
    composite = xr()
    composite["metadata"]["deletionTimestamp"] = "2026-12-05T14:00:00Z"
    return composite


WAITS = {  # case: (what is observed, what the gate waits for)
    "waiting-canary-replica-unready": (
        [replica("qwen3-8b-222222-0", ready=False)],
        "0 of 1 canary ModelReplicas ready",
    ),
    "waiting-no-canary-replica": (
        [replica("qwen3-8b-111111-0", STABLE)],
        "no canary ModelReplica yet",
    ),
    "waiting-no-canary-endpoint": ([replica("qwen3-8b-222222-0")], "no canary ModelEndpoint yet"),
    "waiting-endpoint-but-replica-unready": (
        canary_at(UNCALLED, ready=False),
        "0 of 1 canary ModelReplicas ready",
    ),
}
CARRIED_STATUS = {
    "revisions": {"stable": STABLE, "canary": CANARY},
    "canary": {"revision": CANARY, "gate": OBSERVED_PASS},
}
CONTEXT_FAIL = OBSERVED_PASS | {"verdict": "Fail", "reason": "p95 TTFT 400 ms > budget 250 ms"}
PROMOTED = {"revisions": {"stable": CANARY}, "canary": {"gate": OBSERVED_PASS}}

TABLE = tables.Table(
    "canary_gate",
    run_at_noon,
    (
        tables.Case("no-canary", without_canary()),
        *(tables.Case(name, request(xr(), observed)) for name, (observed, _) in WAITS.items()),
        tables.Case("waiting-desired-replica-not-observed", two_replicas_desired()),
        tables.Case(
            "waiting-api-key-secret",
            request(xr(), with_endpoint(auth={"secretRef": {"name": "absent", "key": "token"}})),
        ),
        tables.Case("unknown-model-name", without_model_name()),
        tables.Case(
            "carried-observed-verdict", request(xr(status=CARRIED_STATUS), canary_at(UNCALLED))
        ),
        tables.Case(
            "verdict-in-context",
            request(xr(), canary_at(UNCALLED), context={contracts.VERDICT_CONTEXT: CONTEXT_FAIL}),
        ),
        tables.Case(
            "previous-step-promoted",
            request(xr(), canary_at(UNCALLED), desired_status=copy.deepcopy(PROMOTED)),
        ),
        tables.Case("idle", request(xr(status={"revisions": {"stable": STABLE}}))),
        tables.Case("no-composite", fnv1.RunFunctionRequest()),
        tables.Case("deleting", request(deleting(), canary_at(UNCALLED))),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)
    assert fn.MEASUREMENTS.started == 0


# --- skip, wait -----------------------------------------------------------------------------


def test_without_canary_the_desired_state_passes_through_unchanged() -> None:
    req = TABLE.case("no-canary").request
    rsp = response("no-canary")
    assert rsp.desired == req.desired
    assert rsp.context == req.context
    assert list(rsp.conditions) == []
    assert list(rsp.results) == []


@pytest.mark.parametrize("name", WAITS)
def test_waits_for_ready_canary_replicas_and_an_endpoint(name: str) -> None:
    message = WAITS[name][1]
    rsp = response(name)
    assert gate(rsp) == {"revision": CANARY, "state": "Waiting", "message": message}
    cond = condition(rsp)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_UNKNOWN, "WaitingForCanary")
    assert message in cond.message
    assert ttl_seconds(rsp) == fn.WAIT_TTL_S
    assert contracts.VERDICT_CONTEXT not in rsp.context.fields


def test_waits_for_a_desired_canary_replica_not_yet_observed() -> None:
    rsp = response("waiting-desired-replica-not-observed")
    assert gate(rsp)["message"] == "1 of 2 canary ModelReplicas ready"
    assert fn.MEASUREMENTS.started == 0


# --- measure ---------------------------------------------------------------------------------


def test_ready_canary_and_fast_server_pass_into_status_and_context(server: FakeServer) -> None:
    rsp = measured(request(xr(), canary_at(server.url)))
    verdict = gate(rsp)
    assert verdict["verdict"] == "Pass"
    assert (verdict["revision"], verdict["state"]) == (CANARY, "Measured")
    assert verdict["endpoints"] == ["qwen3-8b-222222-0"]
    assert verdict["budgets"] == {"ttftMs": 5000, "tpotMs": 1000}
    assert [p["outcome"] for p in verdict["prompts"]] == ["ok", "ok", "ok"]
    assert [p["tokens"] for p in verdict["prompts"]] == [8, 8, 8]
    assert set(verdict["ttftMs"]) == {"p50", "p95"}
    assert (
        xp.context(fnv1.RunFunctionRequest(context=rsp.context), contracts.VERDICT_CONTEXT)
        == verdict
    )
    cond = condition(rsp)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_TRUE, "Passed")
    assert "(budget 5000 ms)" in cond.message and "(budget 1000 ms)" in cond.message
    # the model name comes from the engine's --model=, max_tokens from the smoke test
    assert [r["model"] for r in server.requests] == ["Qwen/Qwen3-8B"] * 3
    assert {r["max_tokens"] for r in server.requests} == {8}
    assert all(r["stream"] is True for r in server.requests)
    assert ttl_seconds(rsp) == fn.MEASURE_TTL_S  # the schedule step acts on it soon


def test_slow_first_token_fails_with_the_figures() -> None:
    with serve_in_thread(Behaviour(ttft_ms=300, tpot_ms=0, tokens=4)) as slow:
        budgets = {"ttftBudgetMs": 100, "tpotBudgetMs": 1000}
        rsp = measured(request(xr(budgets), canary_at(slow.url)))
    verdict = gate(rsp)
    assert verdict["verdict"] == "Fail"
    assert verdict["ttftMs"]["p95"] >= 300  # the server never sends the first token sooner
    assert "> budget 100 ms" in verdict["reason"]
    cond = condition(rsp)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "Failed")
    assert f"p95 TTFT {verdict['ttftMs']['p95']:g} ms (budget 100 ms)" in cond.message
    assert "p95 TPOT" in cond.message and "(budget 1000 ms)" in cond.message
    assert any(r.severity == fnv1.SEVERITY_WARNING for r in rsp.results)


def test_server_down_fails_closed(closed_url: str) -> None:
    rsp = measured(request(xr(), canary_at(closed_url)))
    verdict = gate(rsp)
    assert verdict["verdict"] == "Fail"
    assert {p["outcome"] for p in verdict["prompts"]} == {"connect-error"}
    assert verdict["ttftMs"] == {}
    assert "3 of 3 prompts failed" in verdict["reason"]
    assert condition(rsp).reason == "Failed"
    assert "p95 TTFT not measured (budget 5000 ms)" in condition(rsp).message


@pytest.mark.parametrize("failure", ["http-500", "malformed", "no-done", "empty"])
def test_a_broken_stream_fails_closed(failure: str) -> None:
    with serve_in_thread(Behaviour(tokens=4, failure=failure)) as broken:
        rsp = measured(request(xr(), canary_at(broken.url)))
    assert gate(rsp)["verdict"] == "Fail"
    assert {p["outcome"] for p in gate(rsp)["prompts"]} != {"ok"}


def test_one_slow_endpoint_fails_the_canary(server: FakeServer) -> None:
    observed = [*canary_at(server.url), replica("qwen3-8b-222222-1")]
    with serve_in_thread(Behaviour(ttft_ms=300, tokens=4)) as slow:
        observed.append(endpoint("qwen3-8b-222222-1", slow.url))
        budgets = {"ttftBudgetMs": 100, "tpotBudgetMs": 1000}
        rsp = measured(request(xr(budgets), observed))
    verdict = gate(rsp)
    assert verdict["verdict"] == "Fail"
    assert verdict["reason"].startswith("endpoint qwen3-8b-222222-1: ")
    assert verdict["endpoints"] == ["qwen3-8b-222222-0", "qwen3-8b-222222-1"]
    assert len(server.requests) == 3  # every endpoint gets the whole smoke test


def test_two_fast_endpoints_pool_their_prompts(server: FakeServer) -> None:
    observed = [*canary_at(server.url), replica("qwen3-8b-222222-1")]
    observed.append(endpoint("qwen3-8b-222222-1", server.url + "/v1"))
    verdict = gate(measured(request(xr(), observed)))
    assert verdict["verdict"] == "Pass"
    assert [p["index"] for p in verdict["prompts"]] == list(range(6))
    assert len(server.requests) == 6


def test_api_key_from_the_secret_is_sent_and_never_written() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "canary-key", "namespace": NAMESPACE},
        "data": {"token": base64.b64encode(API_KEY.encode()).decode()},
    }
    with serve_in_thread(Behaviour(tokens=4, api_key=API_KEY)) as guarded:
        observed = canary_at(guarded.url)
        observed[-1]["spec"]["auth"] = {"secretRef": {"name": "canary-key", "key": "token"}}
        rsp = measured(request(xr(), observed), required=[secret])
        authorizations = list(guarded.authorizations)
    assert gate(rsp)["verdict"] == "Pass"
    assert authorizations == [f"Bearer {API_KEY}"] * 3
    selector = rsp.requirements.resources["api-key-qwen3-8b-222222-0"]
    assert (selector.kind, selector.match_name, selector.namespace) == (
        "Secret",
        "canary-key",
        NAMESPACE,
    )
    assert API_KEY not in json_format.MessageToJson(rsp)


def test_a_missing_api_key_secret_is_waited_for() -> None:
    rsp = response("waiting-api-key-secret")
    assert gate(rsp)["state"] == "Waiting"
    assert gate(rsp)["message"] == (
        f"no Secret {NAMESPACE}/absent with key token (API key of qwen3-8b-222222-0)"
    )
    assert fn.MEASUREMENTS.started == 0


def test_endpoint_model_overrides_the_engine_args(server: FakeServer) -> None:
    observed = canary_at(server.url)
    observed[-1]["spec"]["model"] = "qwen3-canary"
    assert gate(measured(request(xr(), observed)))["verdict"] == "Pass"
    assert {r["model"] for r in server.requests} == {"qwen3-canary"}


def test_unknown_model_name_fails_without_measuring() -> None:
    verdict = gate(response("unknown-model-name"))
    assert verdict["verdict"] == "Fail"
    assert "cannot tell the model name" in verdict["reason"]
    assert fn.MEASUREMENTS.started == 0


# --- the smoke test spans reconciles -----------------------------------------------------------


def in_run(composite: dict[str, Any], run_id: str) -> dict[str, Any]:
    composite["spec"]["canary"]["runId"] = run_id
    return composite


def test_a_lost_response_does_not_cause_a_second_measurement(server: FakeServer) -> None:
    """The call that carried the verdict was never applied: the XR still says Measuring."""
    req = request(xr(), canary_at(server.url))
    verdict = gate(measured(req))
    again = run(req)  # the same observed state as before
    assert gate(again) == verdict
    assert fn.MEASUREMENTS.started == 1
    assert len(server.requests) == 3


def test_once_the_status_holds_the_verdict_the_cache_lets_it_go(server: FakeServer) -> None:
    req = request(xr(), canary_at(server.url))
    verdict = gate(measured(req))
    observed_status = {
        "revisions": {"stable": STABLE, "canary": CANARY},
        "canary": {"gate": verdict},
    }
    carried = run(request(xr(status=observed_status), canary_at(server.url)))
    assert gate(carried) == verdict
    # a fresh process (or a cache that forgot) with the verdict in status: still no measurement
    fn.MEASUREMENTS.clear()
    assert gate(run(request(xr(status=observed_status), canary_at(server.url)))) == verdict
    assert fn.MEASUREMENTS.started == 0
    assert len(server.requests) == 3


def test_a_restart_mid_measurement_measures_again() -> None:
    with serve_in_thread(Behaviour(ttft_ms=200, tokens=4)) as slow:
        req = request(xr(), canary_at(slow.url))
        assert gate(run(req))["state"] == "Measuring"
        fn.MEASUREMENTS.clear()  # the function process restarted: no verdict was recorded
        verdict = gate(measured(req))
    assert verdict["verdict"] == "Pass"
    assert fn.MEASUREMENTS.started == 1  # since the restart


def test_a_new_run_cancels_the_measurement_of_the_old_one() -> None:
    """The seed's update: cancel the running workflow, start a fresh one."""
    with serve_in_thread(Behaviour(ttft_ms=300, tokens=4)) as slow:
        old = run(request(in_run(xr(), "r-1111111111"), canary_at(slow.url)))
        assert (gate(old)["state"], gate(old)["run"]) == ("Measuring", "r-1111111111")
        rsp = measured(request(in_run(xr(), "r-2222222222"), canary_at(slow.url)))
        assert fn.MEASUREMENTS.running() == []
    verdict = gate(rsp)
    assert (verdict["verdict"], verdict["run"], verdict["revision"]) == (
        "Pass",
        "r-2222222222",
        CANARY,
    )


def test_a_verdict_of_another_run_is_not_carried(server: FakeServer) -> None:
    observed_status = {
        "revisions": {"stable": STABLE, "canary": CANARY},
        "canary": {"gate": OBSERVED_PASS | {"run": "r-1111111111"}},
    }
    rsp = measured(
        request(in_run(xr(status=observed_status), "r-2222222222"), canary_at(server.url))
    )
    assert gate(rsp)["run"] == "r-2222222222"
    assert len(server.requests) == 3


def test_measurements_keep_a_bounded_number_of_verdicts_and_fail_closed_on_errors() -> None:
    measurements = inflight.Measurements(keep=2)

    def failed(reason: str) -> dict[str, Any]:
        return {"verdict": "Fail", "reason": reason}

    async def passes() -> dict[str, Any]:
        return {"verdict": "Pass"}

    async def breaks() -> dict[str, Any]:
        raise RuntimeError("boom")

    keys = [inflight.Key("uid", f"rev{i}", None) for i in range(3)]
    for key in keys:
        assert measurements.poll(key, passes, failed) is None
        assert measurements.wait(timeout=10)
        assert measurements.poll(key, passes, failed) == {"verdict": "Pass"}
    assert measurements.started == 3
    # the oldest verdict was let go: asking again starts a measurement
    assert measurements.poll(keys[0], passes, failed) is None
    assert measurements.poll(keys[2], passes, failed) == {"verdict": "Pass"}
    broken = inflight.Key("other", "rev", "r-1")
    assert measurements.poll(broken, breaks, failed) is None
    assert measurements.wait(timeout=10)
    assert measurements.poll(broken, breaks, failed) == {
        "verdict": "Fail",
        "reason": "the smoke test could not run (RuntimeError)",
    }


def test_rendering_the_examples_never_starts_a_measurement() -> None:
    """`make preview` is deterministic and sends no request: no example has a ready canary
    endpoint without a verdict."""
    for folder in render.scenario_folders(REPO / "examples"):
        render.render(render.load_scenario(folder), tree=True)
    assert fn.MEASUREMENTS.started == 0


# --- carry, context, status merge -----------------------------------------------------------


def test_observed_verdict_is_carried_forward_without_measuring() -> None:
    rsp = response("carried-observed-verdict")
    assert gate(rsp) == OBSERVED_PASS  # a measurement of the closed port would have failed
    assert xp.context(fnv1.RunFunctionRequest(context=rsp.context), contracts.VERDICT_CONTEXT) == (
        OBSERVED_PASS
    )
    cond = condition(rsp)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_TRUE, "Passed")
    assert cond.message.startswith(
        f"canary revision {CANARY} passed the latency gate: "
        "p95 TTFT 131.2 ms (budget 250 ms), p95 TPOT 20.9 ms (budget 40 ms)"
    )
    assert list(rsp.results) == []


def test_verdict_in_the_context_is_honoured() -> None:
    rsp = response("verdict-in-context")
    assert gate(rsp) == CONTEXT_FAIL
    assert condition(rsp).reason == "Failed"


def test_verdict_for_another_revision_is_not_carried(server: FakeServer) -> None:
    stale = OBSERVED_PASS | {"revision": "3333333333", "verdict": "Fail"}
    rsp = measured(request(xr(), canary_at(server.url), context={contracts.VERDICT_CONTEXT: stale}))
    assert gate(rsp)["verdict"] == "Pass"
    assert gate(rsp)["revision"] == CANARY
    assert len(server.requests) == 3


def test_status_the_schedule_step_wrote_is_kept(server: FakeServer) -> None:
    previous = {
        "replicas": {"total": 3, "ready": 3},
        "placements": [{"replica": "qwen3-8b-111111-0", "cluster": "lab-l4"}],
        "revisions": {"stable": STABLE, "canary": CANARY},
        "canary": {"revision": CANARY, "trafficPercent": 25, "replicas": 1},
    }
    rsp = measured(request(xr(), canary_at(server.url), desired_status=copy.deepcopy(previous)))
    out = status(rsp)
    assert {k: v for k, v in out.items() if k != "canary"} == {
        k: v for k, v in previous.items() if k != "canary"
    }
    assert {k: v for k, v in out["canary"].items() if k != "gate"} == previous["canary"]
    assert out["canary"]["gate"]["verdict"] == "Pass"


def test_the_previous_steps_decision_wins_over_observed_status() -> None:
    """The schedule step promoted (no canary in its status): nothing is measured, and the
    condition reports the verdict it acted on."""
    rsp = response("previous-step-promoted")
    assert status(rsp) == PROMOTED
    assert condition(rsp).reason == "Passed"


def test_no_canary_revision_and_no_verdict_is_idle() -> None:
    rsp = response("idle")
    cond = condition(rsp)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_TRUE, "NoCanary")
    assert status(rsp) == {}


# --- the served model name -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "model"),
    [
        (["--model=Qwen/Qwen3-8B", "--max-model-len=32768"], "Qwen/Qwen3-8B"),
        (["--model", "Qwen/Qwen3-8B"], "Qwen/Qwen3-8B"),
        (["vllm", "serve", "/models/qwen", "--served-model-name=qwen3"], "qwen3"),
        (["vllm", "serve", "/models/qwen", "--port=8000"], "/models/qwen"),
        (
            ["trtllm-serve", "meta-llama/Llama-3.1-8B", "--backend=pytorch"],
            "meta-llama/Llama-3.1-8B",
        ),
        (["python3", "-m", "sglang.launch_server", "--model-path=/w", "--port=30000"], "/w"),
        (
            ["text-generation-launcher", "--model-id", "mistralai/Mistral-7B"],
            "mistralai/Mistral-7B",
        ),
        (["--served-model-name", "a", "b", "--model=m"], "a"),
        (["--port=8000"], None),
    ],
)
def test_model_from_args(tokens: list[str], model: str | None) -> None:
    assert canary.model_from_args(tokens) == model


def test_served_model_skips_workers_and_reads_shell_commands() -> None:
    worker = {"role": "Worker", "template": {"spec": {"containers": [{"args": ["--model=w"]}]}}}
    leader = {
        "role": "Leader",
        "template": {
            "spec": {
                "containers": [
                    {"name": "sidecar", "args": ["--port=9000"]},
                    {"command": ["sh", "-c"], "args": ["exec vllm serve org/m --port 8000"]},
                ]
            }
        },
    }
    assert canary.served_model([{"members": [worker, leader]}]) == "org/m"


def test_the_status_is_json_serialisable(server: FakeServer) -> None:
    json.dumps(status(measured(request(xr(), canary_at(server.url)))))


# --- both steps of the ModelDeployment pipeline ------------------------------------------


def as_observed(rendered: render.Rendered) -> list[dict[str, Any]]:
    """What Crossplane would observe once everything rendered is applied, bound by the binder
    (ModelReplicas) and Ready."""
    out = []
    for obj in copy.deepcopy(rendered.composed):
        obj["metadata"].pop("ownerReferences", None)
        if obj["kind"] == "ModelReplica":
            obj["metadata"].setdefault("annotations", {})[binding.BINDING] = binder_annotation(obj)
        obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out.append(obj)
    return out


def next_xr(composite: dict[str, Any], rendered: render.Rendered) -> dict[str, Any]:
    """The XR as the next reconcile observes it: the rendered status applied."""
    out = copy.deepcopy(composite)
    out["status"] = {k: v for k, v in rendered.xr["status"].items() if k != "conditions"}
    return out


def conditions_of(rendered: render.Rendered) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in rendered.xr["status"]["conditions"]}


def test_pipeline_measures_a_ready_canary_and_the_schedule_step_promotes_it() -> None:
    base = render.load_scenario(REPO / "examples" / "deploy-qwen3-8b")

    def reconcile(composite: dict[str, Any], observed: list[dict[str, Any]]) -> render.Rendered:
        return render.render(render.Scenario(composite, base.required, observed, base.path))

    stable = reconcile(base.xr, [])
    changed = next_xr(base.xr, stable)
    container = changed["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] = ["--model=Qwen/Qwen3-8B", "--max-model-len=16384"]
    changed["spec"]["canary"] = {
        "trafficPercent": 10,
        "smokeTest": {"prompts": 3, "maxTokens": 8, **GENEROUS},
    }
    starting = reconcile(changed, as_observed(stable))
    revision = starting.xr["status"]["revisions"]["canary"]
    assert starting.xr["status"]["canary"]["gate"]["state"] == "Waiting"
    assert conditions_of(starting)["CanaryGate"] == ("Unknown", "WaitingForCanary")

    observed = as_observed(starting)
    with serve_in_thread(FAST) as server:
        for obj in observed:
            if obj["kind"] == "ModelEndpoint" and canary.revision_of(obj) == revision:
                obj["spec"]["url"] = server.url
        measuring = reconcile(next_xr(changed, starting), observed)
        assert measuring.xr["status"]["canary"]["gate"]["state"] == "Measuring"
        assert conditions_of(measuring)["CanaryGate"] == ("Unknown", "Measuring")
        assert conditions_of(measuring)["Canary"] == ("False", "AwaitingVerdict")
        assert fn.MEASUREMENTS.wait(timeout=60)
        assert len(server.requests) == 3
        measured = reconcile(next_xr(changed, measuring), observed)
        assert len(server.requests) == 3  # the verdict is collected, not measured again
    gate_status = measured.xr["status"]["canary"]
    assert (gate_status["gate"]["verdict"], gate_status["gate"]["revision"]) == ("Pass", revision)
    assert (gate_status["revision"], gate_status["trafficPercent"]) == (revision, 10)
    assert conditions_of(measured)["Canary"] == ("False", "AwaitingVerdict")
    assert conditions_of(measured)["CanaryGate"] == ("True", "Passed")
    assert measured.context[contracts.VERDICT_CONTEXT] == gate_status["gate"]

    promoted = reconcile(next_xr(changed, measured), observed)  # no server: nothing measured
    assert promoted.xr["status"]["revisions"] == {"stable": revision}
    assert conditions_of(promoted)["Canary"] == ("True", "Promoted")
    assert conditions_of(promoted)["CanaryGate"] == ("True", "Passed")
    replicas = [o for o in promoted.composed if o["kind"] == "ModelReplica"]
    assert {canary.revision_of(o) for o in replicas} == {revision}
    assert len(replicas) == 3


def test_a_first_rollout_is_measured_before_it_takes_any_traffic() -> None:
    """Reconciles of a new ModelDeployment with a canary block, each feeding the last status
    back: Waiting, Measuring (a later call), the verdict, then promotion to stable."""
    base = render.load_scenario(REPO / "examples" / "deploy-qwen3-8b")
    composite = copy.deepcopy(base.xr)
    composite["spec"]["canary"] = {"smokeTest": {"prompts": 3, "maxTokens": 8, **GENEROUS}}

    def reconcile(xr_now: dict[str, Any], observed: list[dict[str, Any]]) -> render.Rendered:
        return render.render(render.Scenario(xr_now, base.required, observed, base.path))

    starting = reconcile(composite, [])
    revision = starting.xr["status"]["revisions"]["canary"]
    assert starting.xr["status"]["revisions"] == {"canary": revision}
    assert starting.xr["status"]["canary"]["trafficPercent"] == 0
    assert starting.xr["status"]["canary"]["replicas"] == 3  # all of them, none serving
    assert conditions_of(starting)["Ready"][0] == "False"
    observed = as_observed(starting)
    with serve_in_thread(FAST) as server:
        for obj in observed:
            if obj["kind"] == "ModelEndpoint":
                obj["spec"]["url"] = server.url
        measuring = reconcile(next_xr(composite, starting), observed)
        assert measuring.xr["status"]["canary"]["gate"]["state"] == "Measuring"
        assert measuring.xr["status"]["canary"]["gate"]["endpoints"] == sorted(
            o["metadata"]["name"] for o in observed if o["kind"] == "ModelEndpoint"
        )
        assert fn.MEASUREMENTS.wait(timeout=60)
        measured = reconcile(next_xr(composite, measuring), observed)
        assert len(server.requests) == 3 * 3  # every endpoint, once
    assert measured.xr["status"]["canary"]["gate"]["verdict"] == "Pass"
    assert conditions_of(measured)["Ready"][0] == "False"  # not until the schedule step acts
    promoted = reconcile(next_xr(composite, measured), observed)
    assert promoted.xr["status"]["revisions"] == {"stable": revision}
    assert conditions_of(promoted)["Canary"] == ("True", "Promoted")
    assert conditions_of(promoted)["Ready"][0] == "True"
    replicas = sorted(
        o["metadata"]["name"] for o in promoted.composed if o["kind"] == "ModelReplica"
    )
    assert replicas == sorted(
        o["metadata"]["name"] for o in starting.composed if o["kind"] == "ModelReplica"
    )  # the tested replicas are the ones that serve


def test_a_first_rollout_that_fails_is_removed_and_never_served(closed_url: str) -> None:
    base = render.load_scenario(REPO / "examples" / "deploy-qwen3-8b")
    composite = copy.deepcopy(base.xr)
    composite["spec"]["canary"] = {"smokeTest": {"prompts": 2, **GENEROUS}}

    def reconcile(xr_now: dict[str, Any], observed: list[dict[str, Any]]) -> render.Rendered:
        return render.render(render.Scenario(xr_now, base.required, observed, base.path))

    starting = reconcile(composite, [])
    observed = as_observed(starting)
    for obj in observed:
        if obj["kind"] == "ModelEndpoint":
            obj["spec"]["url"] = closed_url
    measuring = reconcile(next_xr(composite, starting), observed)
    assert fn.MEASUREMENTS.wait(timeout=60)
    measured = reconcile(next_xr(composite, measuring), observed)
    assert measured.xr["status"]["canary"]["gate"]["verdict"] == "Fail"
    failed = reconcile(next_xr(composite, measured), observed)
    assert failed.composed == []  # its replicas go: nothing was ever serving
    assert failed.xr["status"]["revisions"] == {}
    assert conditions_of(failed)["Canary"] == ("False", "Failed")
    assert conditions_of(failed)["ReplicasScheduled"] == ("False", "GateFailed")
    assert conditions_of(failed)["Ready"][0] == "False"
    message = {c["type"]: c for c in failed.xr["status"]["conditions"]}["Canary"]["message"]
    assert "never took traffic" in message and "connect" in message
    again = reconcile(next_xr(composite, failed), [])  # the verdict is kept: no new attempt
    assert again.composed == []
    assert fn.MEASUREMENTS.started == 1


def test_a_request_without_a_composite_is_invalid_input() -> None:
    rsp = response("no-composite")
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "invalid input: spec: the composite resource has no spec")
    ]


def _until_verdict(stub: grpcv1.FunctionRunnerServiceStub, req: fnv1.RunFunctionRequest):
    """Calls again, as Crossplane does at the response TTL, until the verdict lands (bounded
    in count and time)."""
    for _ in range(300):
        rsp = stub.RunFunction(req, timeout=60)
        if "verdict" in gate(rsp):
            return rsp
        assert gate(rsp)["state"] == "Measuring"
        time.sleep(0.1)
    raise AssertionError("no verdict after 300 calls")


def test_served_over_grpc_concurrent_calls_share_one_measurement(server: FakeServer) -> None:
    """`plnt function function-canary-gate` measures in its own process: concurrent calls for
    one XR, revision and run share a measurement; another XR's runs beside it."""
    slow_budgets = {"ttftBudgetMs": 100, "tpotBudgetMs": 1000}
    with (
        serve_in_thread(Behaviour(ttft_ms=300, tokens=4)) as slow,
        procs.serving("function-canary-gate") as (address, _),
        grpc.insecure_channel(address) as channel,
    ):
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        fast_req = request(xr(), canary_at(server.url))
        other = xr(slow_budgets)
        other["metadata"]["name"] = "qwen3-8b-other"
        slow_req = request(other, canary_at(slow.url))
        calls = [stub.RunFunction.future(fast_req, timeout=60) for _ in range(4)]
        calls.append(stub.RunFunction.future(slow_req, timeout=60))
        first = [call.result() for call in calls]
        assert {gate(r)["state"] for r in first} == {"Measuring"}
        passing, failing = _until_verdict(stub, fast_req), _until_verdict(stub, slow_req)
        # once collected the verdict stays: a lost response does not cause a re-measure
        assert gate(_until_verdict(stub, fast_req)) == gate(passing)
        requests_seen = len(server.requests)
    assert gate(failing)["verdict"] == "Fail"
    assert "> budget 100 ms" in gate(failing)["reason"]
    assert gate(passing)["verdict"] == "Pass"
    assert requests_seen == 3  # four concurrent calls, one smoke test of three prompts


# --- the canary examples ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "verdict", "canary_condition", "gate_condition"),
    [
        ("canary-pass", "Pass", ("True", "Promoted"), ("True", "Passed")),
        ("canary-rollback", "Fail", ("False", "RolledBack"), ("False", "Failed")),
    ],
)
def test_canary_examples_render_through_both_steps(
    example: str, verdict: str, canary_condition: tuple, gate_condition: tuple
) -> None:
    scenario = render.load_scenario(REPO / "examples" / example)
    observed_gate = scenario.xr["status"]["canary"]["gate"]
    revisions = scenario.xr["status"]["revisions"]
    out = render.render(scenario)
    assert out.xr["status"]["canary"]["gate"] == observed_gate  # carried, not re-measured
    assert observed_gate["verdict"] == verdict
    assert out.context[contracts.VERDICT_CONTEXT] == observed_gate
    assert conditions_of(out)["Canary"] == canary_condition
    assert conditions_of(out)["CanaryGate"] == gate_condition
    kept = revisions["canary"] if verdict == "Pass" else revisions["stable"]
    assert out.xr["status"]["revisions"] == {"stable": kept}
    composed = {(o["kind"], canary.revision_of(o)) for o in out.composed}
    assert composed == {("ModelReplica", kept), ("ModelEndpoint", kept)}
    assert len(out.composed) == 2 * scenario.xr["spec"]["replicas"]
    assert render.render(scenario).xr == out.xr  # deterministic
