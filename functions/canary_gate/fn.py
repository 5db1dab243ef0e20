"""Canary latency gate: the second step of the ModelDeployment pipeline (after `schedule`).

Reads: the ModelDeployment's `spec.canary` (`trafficPercent`, `smokeTest`, `runId`); the
revision under test from `status.revisions.canary` (the previous step's desired status, else
the observed one): a canary beside the stable revision, a first rollout, or the stable revision
re-tested in place; an earlier verdict on that revision in this run from the pipeline context
key `plnt.work/canary-verdict` or from `status.canary.gate` (observed, else desired); the
canary's observed ModelReplicas and ModelEndpoints (label `modelplane.ai/revision` = the
revision under test); and, as a required resource, the Secret named by a canary endpoint's
`spec.auth.secretRef` (its key is the bearer token; it goes into the Authorization header and
nowhere else).

Composes nothing and passes the previous step's desired resources through untouched. Decides
one of:
- skip: no `spec.canary` -> the request's desired state goes on unchanged;
- idle: no revision awaits a verdict -> the CanaryGate condition reports the last verdict (or
  NoCanary);
- carry: a verdict for this revision and run already exists (context first, then the observed
  status, then the previous step's) -> it is written again as it was, nothing is measured, so
  renders with the verdict in observed state or `--context-values` are deterministic;
- wait: a canary ModelReplica is not Ready, or there is no canary endpoint yet ->
  `status.canary.gate.state: Waiting` and a response TTL of WAIT_TTL_S so Crossplane calls
  again soon;
- measure: `smokeTest.prompts` streaming chat completions to every canary endpoint
  (`functions.canary_gate.measure`), bounded in time; a failure of any kind fails closed. The
  measurement runs in the background of the function process (`inflight`: one per XR,
  revision and run, shared by every call): the call that starts it, and every call while it
  runs, answers `state: Measuring` with a response TTL of MEASURE_TTL_S; the first call after
  it finished writes the verdict. So the smoke test spans reconciles, and the XR's status shows
  it running (a WorkflowRun's phase SmokeTesting) before the verdict lands. Each call renews the
  measurement's lease; once Crossplane stops calling (the XR is deleted: it calls no function
  for an XR being deleted) the measurement is abandoned within ``inflight.LEASE_S`` and sends
  nothing more (docs/canary-gate.md, "Delete").

Writes: the verdict (`Verdict.to_status()` plus `revision`, `run`, `endpoints`,
`state: Measured`) into the desired `status.canary.gate`, merged into the status the previous
step wrote (its other `status.canary.*` and `status.*` fields stay); the same dict in the
context key `plnt.work/canary-verdict` for any later step; the condition CanaryGate (True
Passed, False Failed with the p95 figures against the budgets, Unknown WaitingForCanary or
Measuring).

The served model name (the OpenAI `model` field): the endpoint's `spec.model` if set, else
read from the canary revision's engine command line (`canary.served_model`:
`--served-model-name`, else `--model`/`--model-path`/`--model-id`, else the argument of
`vllm serve M`). A canary whose model name cannot be told fails the gate at once (it could never
be measured). A referenced API key Secret that does not exist, or lacks the key, is waited for.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import pydantic
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.canary_gate import canary, inflight, measure
from plnt import conditions, contracts, xp
from plnt.gate import client
from plnt.gate.verdict import Budgets, Verdict
from plnt.models.model_deployment import Canary
from plnt.models.model_endpoint import ModelEndpointSpec

# Measurements run in the background of the serving process and are shared by its calls
# (inflight.py): the runtime must not spread this function over worker processes.
KEEPS_STATE = True
WAIT_TTL_S = 15.0  # how soon Crossplane calls again while the canary comes up
MEASURE_TTL_S = 3.0  # ... while the smoke test runs, and after a verdict (to act on it soon)
# This process's smoke tests (one per XR, revision and run), running or finished.
MEASUREMENTS = inflight.Measurements()


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    xr = xp.composite(req)
    if (xr.get("metadata") or {}).get("deletionTimestamp"):
        MEASUREMENTS.cancel(xr_id(xr))  # delete cancels: no prompt is sent after this
        return xp.respond(req)
    spec = xr.get("spec")
    if not isinstance(spec, dict):  # every ModelDeployment has one (engines are required)
        raise xp.InvalidInput("spec", "the composite resource has no spec")
    if spec.get("canary") is None:
        return xp.respond(req)  # skip: nothing to gate

    # --- inputs ---------------------------------------------------------------------------
    rsp = xp.respond(req)
    canary_spec = xp.parse(Canary, spec["canary"], "spec.canary")
    run = canary_spec.run_id
    desired_xr = xp.to_dict(req.desired.composite.resource)
    observed = xp.observed_resources(req)
    desired = xp.desired_resources(req)
    revision = canary.canary_revision(xr, desired_xr)

    # --- decisions ------------------------------------------------------------------------
    if revision is None:
        _report_idle(rsp, xr, canary.last_gate(xr, desired_xr))
        return rsp
    key = inflight.Key(xr_id(xr), revision, run)
    observed_gate, desired_gate = contracts.gate_in(xr), contracts.gate_in(desired_xr)
    context_gate = xp.context(req, contracts.VERDICT_CONTEXT)
    # context first (e.g. `crossplane render --context-values`), then observed, then desired
    known = contracts.verdict_on(revision, run, context_gate, observed_gate, desired_gate)
    if known is not None:
        if contracts.verdict_on(revision, run, observed_gate) is not None:
            MEASUREMENTS.recorded(key)  # the XR's status holds it now
        _write_verdict(rsp, known)
        return rsp
    replicas = canary.canary_replicas(revision, observed, desired)
    endpoints = canary.canary_endpoints(revision, observed, desired)
    waiting_for = _waiting_for(replicas, endpoints)
    if waiting_for:
        _wait(rsp, revision, run, waiting_for, conditions.WAITING_FOR_CANARY)
        return rsp
    test = smoke_test(canary_spec)
    engines = canary.replica_engines(revision, observed, spec)
    targets = _targets(req, rsp, endpoints, canary.served_model(engines), test.budgets)
    if isinstance(targets, _Pending):
        _wait(rsp, revision, run, targets.message, targets.reason)
        return rsp
    if isinstance(targets, Verdict):  # fails closed without measuring
        _report_verdict(rsp, gate_status(targets, revision, run, [e.name for e in endpoints]))
        return rsp
    gate = MEASUREMENTS.poll(
        key,
        lambda: _measure(targets, test, revision, run),
        lambda reason: gate_status(
            measure.failed(reason, test.budgets), revision, run, [t.endpoint for t in targets]
        ),
    )

    # --- status and context ---------------------------------------------------------------
    if gate is None:
        _measuring(rsp, revision, run, test, [t.endpoint for t in targets])
    else:
        _report_verdict(rsp, gate)
    return rsp


def xr_id(xr: Mapping[str, Any]) -> str:
    """The XR's uid; its namespace/name where it has none (a render)."""
    meta = xr.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


async def _measure(
    targets: list[measure.Target], test: measure.SmokeTest, revision: str, run: str | None
) -> dict[str, Any]:
    # a nonce per revision and run: a re-test of the same revision in a new run must not be
    # flattered by the engine's prefix cache from the last one
    nonce = f"{revision}-{run}" if run else revision
    verdict = await measure.smoke_test(targets, test, nonce=nonce)
    return gate_status(verdict, revision, run, [t.endpoint for t in targets])


def gate_status(
    verdict: Verdict, revision: str, run: str | None, endpoints: list[str]
) -> dict[str, Any]:
    """What `status.canary.gate` holds once a revision is measured."""
    gate = verdict.to_status() | {
        "revision": revision,
        "endpoints": endpoints,
        "state": contracts.MEASURED,
    }
    if run is not None:
        gate["run"] = run
    return gate


def smoke_test(spec: Canary) -> measure.SmokeTest:
    """The smoke test `spec.canary.smokeTest` asks for; the seed's defaults without one."""
    st = spec.smoke_test
    if st is None:
        budgets = Budgets(client.DEFAULT_TTFT_BUDGET_MS, client.DEFAULT_TPOT_BUDGET_MS)
        return measure.SmokeTest(prompts=client.DEFAULT_PROMPTS, budgets=budgets)
    return measure.SmokeTest(
        prompts=st.prompts,
        budgets=Budgets(st.ttft_budget_ms, st.tpot_budget_ms),
        max_tokens=st.max_tokens or client.DEFAULT_MAX_TOKENS,
    )


def _waiting_for(replicas: list[canary.Replica], endpoints: list[canary.Endpoint]) -> str:
    """What the canary still lacks before it can be measured; empty when it is ready."""
    if not replicas:
        return "no canary ModelReplica yet"
    unready = [r.name for r in replicas if not r.ready]
    if unready:
        return f"{len(replicas) - len(unready)} of {len(replicas)} canary ModelReplicas ready"
    if not endpoints:
        return "no canary ModelEndpoint yet"
    return ""


class _Pending:
    """Targets cannot be built yet (a Secret is being read or is missing)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message


def _targets(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    endpoints: list[canary.Endpoint],
    engines_model: str | None,
    budgets: Budgets,
) -> list[measure.Target] | _Pending | Verdict:
    """One target per canary endpoint, with its model name and API key.

    Every Secret requirement is declared before any answer is used, so Crossplane sees the
    same requirements on the call that measures as on the call before it."""
    specs: dict[str, ModelEndpointSpec] = {}
    keys: dict[str, list[dict[str, Any]] | None] = {}
    for endpoint in endpoints:
        try:
            specs[endpoint.name] = ModelEndpointSpec.model_validate(endpoint.spec)
        except pydantic.ValidationError as err:
            problem = err.errors()[0]
            where = xp.join_path("spec", problem["loc"])
            reason = f"canary endpoint {endpoint.name}: {where}: {problem['msg']}"
            return measure.failed(reason, budgets)
        auth = specs[endpoint.name].auth
        if auth is not None:
            keys[endpoint.name] = xp.require(
                req,
                rsp,
                f"api-key-{endpoint.name}",
                "v1",
                "Secret",
                match_name=auth.secret_ref.name,
                namespace=endpoint.namespace,
            )
    if any(found is None for found in keys.values()):
        return _Pending(conditions.MEASURING, "reading the canary endpoints' API key Secrets")
    targets = []
    for endpoint in endpoints:
        endpoint_spec = specs[endpoint.name]
        model = endpoint_spec.model or engines_model
        if not model:
            reason = (
                f"cannot tell the model name canary endpoint {endpoint.name} serves: set its "
                "spec.model, or --served-model-name or --model in the engine's args"
            )
            return measure.failed(reason, budgets)
        api_key = None
        if endpoint_spec.auth is not None:
            ref = endpoint_spec.auth.secret_ref
            api_key = _secret_value(keys[endpoint.name] or [], ref.key)
            if api_key is None:
                secret = f"{endpoint.namespace}/{ref.name}"
                message = f"Secret {secret} with key {ref.key} (API key of {endpoint.name})"
                return _Pending(conditions.WAITING_FOR_CANARY, f"no {message}")
        targets.append(
            measure.Target(
                endpoint=endpoint.name, base_url=endpoint_spec.url, model=model, api_key=api_key
            )
        )
    return targets


def _secret_value(found: list[dict[str, Any]], key: str) -> str | None:
    """The Secret's value under `key` (data is base64), or None if absent or empty."""
    for secret in found:
        encoded = (secret.get("data") or {}).get(key)
        if encoded:
            try:
                value = base64.b64decode(encoded, validate=True).decode().strip()
            except (binascii.Error, UnicodeDecodeError):
                return None
            return value or None
        plain = (secret.get("stringData") or {}).get(key)
        if plain:
            return str(plain).strip() or None
    return None


# --- writing the response ----------------------------------------------------------------


def _set_gate_status(rsp: fnv1.RunFunctionResponse, gate: Mapping[str, Any]) -> None:
    """Replace `status.canary.gate`, keeping every other field the previous step wrote."""
    status = xp.to_dict(rsp.desired.composite.resource).get("status") or {}
    canary_status = dict(status.get("canary") or {})
    canary_status["gate"] = dict(gate)
    xp.set_status(rsp, {"canary": canary_status})


def _write_verdict(rsp: fnv1.RunFunctionResponse, gate: Mapping[str, Any]) -> None:
    _set_gate_status(rsp, gate)
    xp.set_context(rsp, contracts.VERDICT_CONTEXT, dict(gate))
    xp.set_conditions(rsp, verdict_condition(gate))


def _report_verdict(rsp: fnv1.RunFunctionResponse, gate: Mapping[str, Any]) -> None:
    """A verdict just measured: into status, context and condition, with an event."""
    _write_verdict(rsp, gate)
    summary = f"canary revision {gate.get('revision')}: {gate.get('verdict')}: {gate.get('reason')}"
    (xp.normal if contracts.Gate.of(gate).passed else xp.warning)(rsp, summary)
    _set_ttl(rsp, MEASURE_TTL_S)  # the schedule step promotes or rolls back on the next call


def _in_run(gate: dict[str, Any], run: str | None) -> dict[str, Any]:
    return gate | {"run": run} if run is not None else gate


def _wait(
    rsp: fnv1.RunFunctionResponse, revision: str, run: str | None, message: str, reason: str
) -> None:
    _set_gate_status(
        rsp, _in_run({"revision": revision, "state": contracts.WAITING, "message": message}, run)
    )
    text = f"canary revision {revision}: {message}"
    xp.set_conditions(rsp, xp.Condition(conditions.CANARY_GATE, None, reason, text))
    _set_ttl(rsp, WAIT_TTL_S)


def _measuring(
    rsp: fnv1.RunFunctionResponse,
    revision: str,
    run: str | None,
    test: measure.SmokeTest,
    endpoints: list[str],
) -> None:
    message = (
        f"sending {test.prompts} smoke-test prompts to each of {len(endpoints)} canary "
        f"endpoint(s): {', '.join(endpoints)}"
    )
    gate = {
        "revision": revision,
        "state": contracts.MEASURING,
        "message": message,
        "endpoints": endpoints,
    }
    _set_gate_status(rsp, _in_run(gate, run))
    text = f"canary revision {revision}: {message}"
    xp.set_conditions(rsp, xp.Condition(conditions.CANARY_GATE, None, conditions.MEASURING, text))
    _set_ttl(rsp, MEASURE_TTL_S)


def _report_idle(
    rsp: fnv1.RunFunctionResponse, xr: Mapping[str, Any], last: Mapping[str, Any]
) -> None:
    if contracts.Gate.of(last).decided:
        if isinstance(last.get("revision"), str):
            MEASUREMENTS.recorded(inflight.Key(xr_id(xr), last["revision"], last.get("run")))
        xp.set_context(rsp, contracts.VERDICT_CONTEXT, dict(last))
        xp.set_conditions(rsp, verdict_condition(last))
        return
    message = "no revision awaits a verdict"
    idle = xp.Condition(conditions.CANARY_GATE, True, conditions.NO_CANARY, message)
    xp.set_conditions(rsp, idle)


def _set_ttl(rsp: fnv1.RunFunctionResponse, seconds: float) -> None:
    rsp.meta.ttl.FromMilliseconds(int(seconds * 1000))


def verdict_condition(gate: Mapping[str, Any]) -> xp.Condition:
    """CanaryGate from a verdict dict: the p95 figures against the budgets (and, on a Fail,
    the reason, which names failed prompts)."""
    passed = contracts.Gate.of(gate).passed
    word = "passed" if passed else "failed"
    text = f"canary revision {gate.get('revision')} {word} the latency gate: {figures(gate)}"
    if not passed and gate.get("reason"):
        text += f"; {gate['reason']}"  # which prompts failed, and why
    reason = conditions.PASSED if passed else conditions.FAILED
    return xp.Condition(conditions.CANARY_GATE, passed, reason, text)


def figures(gate: Mapping[str, Any]) -> str:
    """`p95 TTFT 131.2 ms (budget 250 ms), p95 TPOT 20.4 ms (budget 40 ms)`."""
    budgets = gate.get("budgets") or {}
    parts = []
    for label, key in (("TTFT", "ttftMs"), ("TPOT", "tpotMs")):
        p95 = (gate.get(key) or {}).get("p95")
        measured = f"{p95:g} ms" if isinstance(p95, int | float) else "not measured"
        budget = budgets.get(key)
        suffix = f" (budget {budget:g} ms)" if isinstance(budget, int | float) else ""
        parts.append(f"p95 {label} {measured}{suffix}")
    return ", ".join(parts)
