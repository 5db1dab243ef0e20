"""The WorkflowRun phase, derived on every reconcile from what is observed.

Nothing is remembered between reconciles: the phase is a pure function of the run id and the
observed ModelDeployment (its conditions, revisions and canary gate) and ModelService (its URL,
readiness and Routed condition). The rules, first match wins:

| phase          | observed                                                                   |
|----------------|----------------------------------------------------------------------------|
| Failed         | (invalid spec: decided by the caller) the ModelDeployment cannot be        |
|                | reconciled (Synced False); or the revision under test failed the gate with |
|                | nothing to roll back to (Canary reason Failed: a first rollout, which      |
|                | never took traffic, or a re-test in place of unchanged pods)               |
| Validating     | no ModelDeployment observed yet, or it has not taken up this run yet       |
|                | (`status.canary.run` is not the run id), or it has not reported a schedule |
| RolledBack     | the Canary condition's reason is RolledBack: the stable revision kept 100% |
| Pending        | ReplicasScheduled is False: no cluster can place the replicas yet          |
| PullingWeights | a first rollout's replicas are not ready and ReplicasReady's reason is     |
|                | PullingWeights (or, with no revision under test, any rollout's)            |
| Deploying      | the revision under test is not ready to be measured (the gate waits:       |
|                | `status.canary.gate.state` Waiting), or replicas are not ready otherwise   |
| SmokeTesting   | the gate measures the revision under test (state Measuring), or has a      |
|                | verdict the schedule step has not acted on yet                             |
| Promoting      | the gate passed (Canary Promoted) and the promoted revision is not fully   |
|                | ready or routed yet, or replicas are ready but the ModelService does not   |
|                | route to them yet (no URL, not Ready, or Routed not True)                  |
| Ready          | replicas ready and the ModelService routes to them with a URL              |

Deploying, SmokeTesting and Promoting are each written at least once in a rollout that
passed the gate, even when the engine start, the measurement, the verdict and the traffic
shift land between two reconciles of the WorkflowRun (a fast engine is measured in well under
a second, and Crossplane may hold back a busy XR's watch events). The phase last written (the
WorkflowRun's own observed status) decides: in a first rollout (the WorkflowRun has never
reported an endpoint), coming from Validating or Pending to any phase past PullingWeights, the
phase is PullingWeights for one reconcile (replicas that exist but are not staging yet stage
their weights next: nothing but Validating or Pending is ever shown before PullingWeights),
and it stays PullingWeights until the replicas are ready (a replica not staging yet and one
loading what it staged report alike);
coming from PullingWeights to a phase past
Deploying, the phase is Deploying for one reconcile; coming from Deploying to a phase past the
smoke test while the gate holds this run's Pass verdict (or in a first rollout, whose
revision takes no traffic before it passed), it is SmokeTesting for one reconcile, and so it is
coming from Validating or Pending in an update whose canary passed before the run's next
reconcile
(its message gives the verdict); coming from SmokeTesting to Ready, it is Promoting for one
reconcile. Until a rollout is Ready its phase never steps back along PullingWeights,
Deploying, SmokeTesting, Promoting: a replica that reports not ready again after a later step
was written (its pod restarted, or a child's status lags) stays under the step reached, and
the message says what it waits for. The function asks to be called again in a second
each time. `kubectl get workflowrun -w` so always shows the seed's sequence; a restart changes
nothing, since the last phase is read back from the object.

``endpoint`` is the ModelService URL once a stable revision serves behind it, so it stays
set through a later update's canary, re-test, promotion or rollback, and is never set while a
first rollout is tested.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from plnt import conditions, contracts, xp

PENDING = "Pending"
VALIDATING = "Validating"
PULLING_WEIGHTS = "PullingWeights"
DEPLOYING = "Deploying"
SMOKE_TESTING = "SmokeTesting"
PROMOTING = "Promoting"
READY = "Ready"
ROLLED_BACK = "RolledBack"
FAILED = "Failed"
PHASES = (
    PENDING,
    VALIDATING,
    PULLING_WEIGHTS,
    DEPLOYING,
    SMOKE_TESTING,
    PROMOTING,
    READY,
    ROLLED_BACK,
    FAILED,
)

CANARY = conditions.CANARY
_PAST_PULLING = (DEPLOYING, SMOKE_TESTING, PROMOTING, READY)
# the seed's steps of a first rollout, in order
_STEPS = (PULLING_WEIGHTS, DEPLOYING, SMOKE_TESTING, PROMOTING)
_HOLD = {
    DEPLOYING: "the engines are starting; ",
    SMOKE_TESTING: "the latency gate has measured or measures this revision; ",
    PROMOTING: "the revision passed the latency gate; ",
}

# the message of a rollout whose ReplicasReady reason is Unschedulable, before ReplicasReady's
UNSCHEDULABLE_PREFIX = "the kube-scheduler cannot place the engines' pods: "


def _step(phase: str | None) -> int:
    """1-based position among a first rollout's steps; 0 for any other phase."""
    return _STEPS.index(phase) + 1 if phase in _STEPS else 0


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    message: str
    endpoint: str | None = None


def _status(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


def _cond(obj: Mapping[str, Any] | None, typ: str) -> dict[str, Any]:
    return dict(xp.condition_of(obj, typ) or {})


def serving(deployment: Mapping[str, Any] | None) -> bool:
    """A revision has passed the gate and its replicas are all ready."""
    stable = contracts.Revisions.of(deployment).stable
    return bool(stable) and _cond(deployment, conditions.REPLICAS_READY).get("status") == "True"


def routed(service: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None = None) -> bool:
    """The ModelService has a URL, is Ready, sends traffic to at least one endpoint and, given
    the ModelDeployment, computed its weights from the revisions the deployment reports now (so
    a promotion or rollback counts as routed only once traffic has followed it)."""
    if not (
        _status(service).get("url")
        and xp.is_ready(service)
        and _cond(service, conditions.ROUTED).get("status") == "True"
    ):
        return False
    if deployment is None:
        return True
    name = (deployment.get("metadata") or {}).get("name")
    revisions = _status(deployment).get("revisions") or {}
    want = {k: revisions[k] for k in ("stable", "canary") if revisions.get(k)}
    for seen in _status(service).get("deployments") or []:
        if isinstance(seen, Mapping) and seen.get("name") == name:
            return {k: seen[k] for k in ("stable", "canary") if seen.get(k)} == want
    return False


def derive(
    deployment: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
    run: str | None = None,
    previous: str | None = None,
    first_rollout: bool = False,
) -> Phase:
    """The phase for a valid spec (Failed on invalid input is decided by the caller), given the
    phase last written (``previous``) and whether this is the run's first rollout (nothing
    has served yet: the WorkflowRun never reported an endpoint)."""
    phase = _derive(deployment, service, run)
    gate = contracts.Gate.of(contracts.gate_at(_status(deployment)))
    # this run's revision passed: the gate says so, or (its verdict acted on and cleared) the
    # Canary condition says Promoted
    promoted = _cond(deployment, CANARY).get("reason") == conditions.PROMOTED
    passed = (gate.passed or promoted) and (
        run is None or contracts.CanaryStatus.of(deployment).run == run
    )
    measured = gate.revision or (_status(deployment).get("revisions") or {}).get("stable")
    # a first revision takes no traffic until it passed, so reaching Promoting is a pass
    passed = passed or first_rollout
    # a phase held back in a first rollout reports no endpoint: nothing serves before Promoting
    held = None if first_rollout else phase.endpoint
    ready = _cond(deployment, conditions.REPLICAS_READY)
    # pods the kube-scheduler cannot place: its message, whatever phase the rules below hold
    unschedulable = ready.get("reason") == conditions.UNSCHEDULABLE
    if first_rollout and previous in (VALIDATING, PENDING) and phase.name in _PAST_PULLING:
        return Phase(
            PULLING_WEIGHTS,
            phase.message
            if unschedulable
            else "the replicas are created; their weights are staged before the engines start",
            held,
        )
    if (
        first_rollout
        and previous == PULLING_WEIGHTS
        and phase.name == DEPLOYING
        and ready.get("status") != "True"
    ):
        # replicas that are not staging (not created yet, or loading what was staged) read
        # alike: a first rollout stays PullingWeights until its replicas are ready
        counts = ready.get("message") or "replicas not ready"
        message = phase.message if unschedulable else f"staging and loading model weights: {counts}"
        return Phase(PULLING_WEIGHTS, message, held)
    if phase.name in (SMOKE_TESTING, PROMOTING, READY) and previous == PULLING_WEIGHTS:
        return Phase(
            DEPLOYING,
            "the weights are staged and the engine has started; the latency gate measures it",
            held,
        )
    if phase.name in (PROMOTING, READY) and previous in (VALIDATING, PENDING, DEPLOYING) and passed:
        # an update's canary may be measured and promoted before this run's next reconcile
        return Phase(
            SMOKE_TESTING,
            f"the latency gate measured revision {measured}: Pass; promoting it",
            held,
        )
    reached = previous or ""
    if reached in _HOLD and _step(reached) > _step(phase.name) > 0:
        # a rollout only moves forward along the seed's steps until it is Ready: a replica
        # that reports not ready again (its pod restarted, or a child's status lags a
        # reconcile) is told in the message, under the step already reached
        return Phase(reached, _HOLD[reached] + phase.message, held)
    if phase.name == READY and previous == SMOKE_TESTING:
        stable = (_status(deployment).get("revisions") or {}).get("stable")
        return Phase(
            PROMOTING,
            f"revision {stable} passed the gate and its traffic has followed; Ready next",
            phase.endpoint,
        )
    return phase


def _derive(
    deployment: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
    run: str | None,
) -> Phase:
    if deployment is None:
        return Phase(VALIDATING, "spec is valid; the ModelDeployment is being created")
    status = _status(deployment)
    revisions = status.get("revisions") or {}
    stable, canary = revisions.get("stable"), revisions.get("canary")
    gate = contracts.Gate.of(contracts.gate_at(status))
    canary_cond = _cond(deployment, CANARY)
    scheduled = _cond(deployment, conditions.REPLICAS_SCHEDULED)
    ready = _cond(deployment, conditions.REPLICAS_READY)
    synced = _cond(deployment, "Synced")
    url = _status(service).get("url")
    endpoint = url if (stable and url) else None

    if synced.get("status") == "False":
        why = synced.get("message") or synced.get("reason") or "no reason given"
        return Phase(FAILED, f"the ModelDeployment cannot be reconciled: {why}", endpoint)
    if run is not None and contracts.CanaryStatus.of(deployment).run != run:
        return Phase(VALIDATING, f"the ModelDeployment has not taken up run {run} yet", endpoint)
    if canary_cond.get("reason") == conditions.FAILED:
        return Phase(FAILED, canary_cond.get("message") or "the smoke test failed", endpoint)
    if gate.verdict == contracts.FAIL and not stable:
        why = gate.reason or ""
        return Phase(FAILED, f"the smoke test failed and no stable revision exists: {why}")
    if canary_cond.get("reason") == conditions.ROLLED_BACK:
        return Phase(
            ROLLED_BACK, canary_cond.get("message") or "the canary was rolled back", endpoint
        )
    if not scheduled:
        return Phase(VALIDATING, "the ModelDeployment has not reported a schedule yet")
    if scheduled.get("status") == "False":
        why = scheduled.get("message") or scheduled.get("reason") or ""
        return Phase(PENDING, f"replicas are not scheduled yet: {why}".rstrip(": "), endpoint)
    if canary and canary_cond.get("reason") == conditions.AWAITING_VERDICT:
        return _testing(deployment, canary, stable, endpoint)
    replicas_ready = ready.get("status") == "True"
    is_routed = routed(service, deployment)
    if canary_cond.get("reason") == conditions.PROMOTED and not (replicas_ready and is_routed):
        return Phase(
            PROMOTING, f"revision {stable} passed the gate; shifting traffic to it", endpoint
        )
    if not replicas_ready:
        counts = ready.get("message") or "replicas not ready"
        if ready.get("reason") == conditions.PULLING_WEIGHTS:
            return Phase(PULLING_WEIGHTS, f"staging model weights: {counts}", endpoint)
        if ready.get("reason") == conditions.UNSCHEDULABLE:
            return Phase(DEPLOYING, f"{UNSCHEDULABLE_PREFIX}{counts}", endpoint)
        return Phase(DEPLOYING, f"starting engines: {counts}", endpoint)
    if not is_routed:
        why = _cond(service, conditions.ROUTED).get("message") or "it has no URL or is not Ready"
        return Phase(
            PROMOTING,
            f"replicas are ready; the ModelService does not route to them yet: {why}",
            endpoint,
        )
    return Phase(READY, f"serving at {url}", url)


def _testing(
    deployment: Mapping[str, Any], canary: str, stable: str | None, endpoint: str | None
) -> Phase:
    """A revision awaits the gate: it is coming up (PullingWeights, Deploying) or measured."""
    gate = contracts.Gate.of(contracts.gate_at(_status(deployment)))
    ready = _cond(deployment, conditions.REPLICAS_READY)
    gate_cond = _cond(deployment, conditions.CANARY_GATE)
    measuring = gate.state not in (None, contracts.WAITING) or (
        not gate.raw and gate_cond.get("reason") in (conditions.MEASURING, conditions.PASSED)
    )
    if gate.revision not in (None, canary) or not measuring:
        why = gate.message or gate_cond.get("message") or "its replicas are not ready"
        if not stable and ready.get("reason") == conditions.PULLING_WEIGHTS:
            counts = ready.get("message") or "replicas not ready"
            return Phase(PULLING_WEIGHTS, f"staging model weights: {counts}", endpoint)
        if not stable and ready.get("reason") == conditions.UNSCHEDULABLE:
            why = UNSCHEDULABLE_PREFIX + (ready.get("message") or "replicas not ready")
        what = "first revision" if not stable else "canary revision"
        if stable == canary:
            what = "revision"
        return Phase(DEPLOYING, f"starting {what} {canary}: {why}", endpoint)
    if stable == canary:
        what = f"re-testing revision {canary} in place (its traffic unchanged)"
    elif stable:
        what = f"measuring canary revision {canary}"
    else:
        what = f"measuring first revision {canary}; it takes no traffic until it passes"
    return Phase(SMOKE_TESTING, f"the latency gate is {what}", endpoint)
