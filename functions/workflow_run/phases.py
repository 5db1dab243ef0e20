"""The WorkflowRun phase, derived on every reconcile from what is observed.

Nothing is remembered between reconciles: the phase is a pure function of the observed
ModelDeployment (its conditions, revisions and canary gate) and ModelService (its URL and
readiness). The rules, first match wins:

| phase          | observed                                                                   |
|----------------|----------------------------------------------------------------------------|
| Failed         | (invalid spec: decided by the caller) the ModelDeployment cannot be        |
|                | reconciled (Synced False), or a gate failed with no stable revision to keep |
| RolledBack     | the Canary condition's reason is RolledBack: the stable revision kept 100% |
| Validating     | no ModelDeployment observed yet, or it has not reported a schedule         |
| Pending        | ReplicasScheduled is False: no cluster can place the replicas yet          |
| SmokeTesting   | a canary revision awaits the gate's verdict (Canary AwaitingVerdict or     |
|                | SmokeTesting) and the gate is measuring (Deploying while the gate still    |
|                | waits for the canary's replicas: CanaryGate WaitingForCanary)              |
| Promoting      | the gate passed (Canary Promoted) and the promoted revision is not fully   |
|                | ready or routed yet, or replicas are ready but the ModelService does not   |
|                | route to them yet (no URL, not Ready)                                      |
| PullingWeights | replicas are not ready and ReplicasReady's reason is PullingWeights        |
| Deploying      | replicas are not ready for any other reason                                |
| Ready          | replicas ready and the ModelService routes to them with a URL              |

``endpoint`` is the ModelService URL once a stable revision serves behind it, so it stays
set through a later update's canary, promotion or rollback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from plnt import conditions, xp

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
CANARY_WAITING = frozenset({"AwaitingVerdict", "SmokeTesting"})
CANARY_PROMOTED = "Promoted"
CANARY_ROLLED_BACK = "RolledBack"


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    message: str
    endpoint: str | None = None


def _status(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


def _cond(obj: Mapping[str, Any] | None, typ: str) -> dict[str, Any]:
    return dict(xp.condition_of(obj, typ) or {})


def derive(deployment: Mapping[str, Any] | None, service: Mapping[str, Any] | None) -> Phase:
    """The phase for a valid spec (Failed on invalid input is decided by the caller)."""
    if deployment is None:
        return Phase(VALIDATING, "spec is valid; the ModelDeployment is being created")
    status = _status(deployment)
    revisions = status.get("revisions") or {}
    stable, canary = revisions.get("stable"), revisions.get("canary")
    gate = (status.get("canary") or {}).get("gate") or {}
    canary_cond = _cond(deployment, CANARY)
    scheduled = _cond(deployment, conditions.REPLICAS_SCHEDULED)
    ready = _cond(deployment, conditions.REPLICAS_READY)
    synced = _cond(deployment, "Synced")
    url = _status(service).get("url")
    serving = url if (stable and url) else None

    if synced.get("status") == "False":
        why = synced.get("message") or synced.get("reason") or "no reason given"
        return Phase(FAILED, f"the ModelDeployment cannot be reconciled: {why}")
    if gate.get("verdict") == "Fail" and not stable:
        return Phase(
            FAILED, f"the smoke test failed and no stable revision exists: {gate.get('reason', '')}"
        )
    if canary_cond.get("reason") == CANARY_ROLLED_BACK:
        return Phase(
            ROLLED_BACK, canary_cond.get("message") or "the canary was rolled back", serving
        )
    if not scheduled:
        return Phase(VALIDATING, "the ModelDeployment has not reported a schedule yet")
    if scheduled.get("status") == "False":
        why = scheduled.get("message") or scheduled.get("reason") or ""
        return Phase(PENDING, f"replicas are not scheduled yet: {why}".rstrip(": "), serving)
    if canary and canary_cond.get("reason") in CANARY_WAITING:
        gate_cond = _cond(deployment, conditions.CANARY_GATE)
        if (
            gate.get("state") == "Waiting"
            or gate_cond.get("reason") == conditions.WAITING_FOR_CANARY
        ):
            why = gate.get("message") or gate_cond.get("message") or "its replicas are not ready"
            return Phase(DEPLOYING, f"starting canary revision {canary}: {why}", serving)
        return Phase(
            SMOKE_TESTING, f"the latency gate is measuring canary revision {canary}", serving
        )
    routed = bool(url) and xp.is_ready(service)
    replicas_ready = ready.get("status") == "True"
    if canary_cond.get("reason") == CANARY_PROMOTED and not (replicas_ready and routed):
        return Phase(
            PROMOTING, f"revision {stable} passed the gate; shifting traffic to it", serving
        )
    if not replicas_ready:
        counts = ready.get("message") or "replicas not ready"
        if ready.get("reason") == conditions.PULLING_WEIGHTS:
            return Phase(PULLING_WEIGHTS, f"staging model weights: {counts}", serving)
        return Phase(DEPLOYING, f"starting engines: {counts}", serving)
    if not routed:
        return Phase(
            PROMOTING, "replicas are ready; the ModelService does not route to them yet", serving
        )
    return Phase(READY, f"serving at {url}", url)
