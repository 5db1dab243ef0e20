"""Which revisions run, and how many replicas of each: the canary state machine. Pure.

The revision of the spec (`plnt.revision.revision`) is the *current* one. The *stable* revision,
the one that serves traffic, is remembered in the XR's `status.revisions.stable`. A status
without `revisions` (an XR restored without its status) falls back to the revision most observed
ModelReplicas carry, but never to the current revision when the deployment is gated: an
unremembered current revision is tested again rather than trusted.

Without `spec.canary` nothing is gated: the current revision runs `spec.replicas` and is
stable at once; every other revision's replicas go.

With `spec.canary` every rollout is smoke-tested by the canary-gate step before it takes
traffic. The gate's verdict (`status.canary.gate`, or the pipeline context) counts only for the
current revision *and* `spec.canary.runId` (the run; absent for a ModelDeployment nobody gave
one, when each revision is tested once). The revision under test is `status.revisions.canary`:

- first rollout (no stable revision, or none of its replicas runs any more): the current
  revision runs `spec.replicas` replicas and is under test; it takes no traffic (a ModelService
  holds the endpoints of a deployment without a stable revision). Pass: PROMOTED, it becomes
  stable. Fail: FAILED, its replicas go and nothing serves until the spec changes.
- canary (the current revision differs from a running stable one): the stable revision keeps
  the replicas it has, the current one runs ceil(replicas x trafficPercent / 100) (at least 1)
  and takes `trafficPercent` of the traffic. Pass: PROMOTED, it becomes stable at
  `spec.replicas` and the old replicas go. Fail: ROLLED_BACK, its replicas go and the stable
  revision keeps all traffic.
- re-test in place (the current revision is stable but has not passed in this run: a spec
  change that left the pods as they are): it keeps serving all traffic, under test
  (`revisions.canary` = `revisions.stable`). Pass: PROMOTED (in place). Fail: FAILED, and it
  keeps serving: the pods did not change, so there is nothing to roll back to.
- steady (the current revision is stable and passed in this run, or there is no run): it runs
  `spec.replicas`, nothing is under test.

A non-current revision is never placed anew (its engines are no longer in the spec), and the
replicas of any third revision (a superseded canary) go. A verdict stays in status, so a failed
revision is not tried again in the same run, and a passed one is not measured again.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from plnt import conditions, contracts
from plnt.models.model_deployment import ModelDeploymentSpec

# how the revision under test runs (status.canary.trafficPercent says the same in numbers)
FIRST_ROLLOUT = "first rollout"
BESIDE_STABLE = "canary"
IN_PLACE = "in place"


@dataclasses.dataclass(frozen=True)
class Plan:
    current: str
    stable: str | None  # serves traffic; None until a first revision passes the gate
    canary: str | None  # the revision under test (may equal stable: re-tested in place)
    targets: Mapping[str, int]  # revision -> replicas wanted; absent revisions go
    outcome: str | None  # a Canary reason (plnt.contracts) or None (steady)
    verdict: Mapping[str, Any] | None  # the gate's verdict on the current revision in this run
    run: str | None = None
    mode: str | None = None  # FIRST_ROLLOUT, BESIDE_STABLE or IN_PLACE: how the test runs

    def placed_anew(self, revision: str) -> bool:
        """Only the current revision's engines are in the spec, so only it gets new replicas."""
        return revision == self.current

    @property
    def serving(self) -> str | None:
        """The revision whose replicas ReplicasReady counts: the stable one, or in a first
        rollout the one being brought up."""
        if self.stable is not None:
            return self.stable
        return self.current if self.current in self.targets else None


def remembered_stable(
    status: Mapping[str, Any], observed_revisions: Counter[str], current: str, gated: bool
) -> str | None:
    revisions = status.get("revisions")
    if isinstance(revisions, Mapping):
        return revisions.get("stable") or None
    # An XR without status: the revision the fleet runs, but a gated deployment never takes
    # its current revision as stable without a verdict.
    running = {
        r: n for r, n in observed_revisions.items() if n > 0 and not (gated and r == current)
    }
    if not running:
        return None
    # most replicas first, then the lexically smallest: deterministic
    return min(running.items(), key=lambda kv: (-kv[1], kv[0]))[0]


@dataclasses.dataclass(frozen=True)
class _Test:
    """The current revision under the gate in this run: its verdict, if any, and what every
    replica of it means."""

    current: str
    run: str | None
    verdict: Mapping[str, Any] | None
    replicas: int

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict["verdict"] == contracts.PASS

    @property
    def failed(self) -> bool:
        return self.verdict is not None and not self.passed

    @property
    def every(self) -> dict[str, int]:
        return {self.current: self.replicas}


def plan(
    spec: ModelDeploymentSpec,
    current: str,
    status: Mapping[str, Any],
    observed_revisions: Counter[str],
    context_verdict: Mapping[str, Any] | None = None,
) -> Plan:
    """Which revisions run with how many replicas: without `spec.canary` the current one alone;
    else by how the current revision is tested (`_in_place`, `_first_rollout`,
    `_beside_stable`) and the gate's verdict on it."""
    replicas = spec.replicas
    if spec.canary is None:
        return Plan(current, current, None, {current: replicas}, None, None)
    run = spec.canary.run_id
    stable = remembered_stable(status, observed_revisions, current, gated=True)
    # the pipeline context first (this reconcile's verdict), then the observed status
    verdict = contracts.verdict_on(current, run, context_verdict, contracts.gate_at(status))
    test = _Test(current, run, verdict, replicas)
    if stable == current:
        return _in_place(test)
    if stable is None or observed_revisions.get(stable, 0) == 0:
        return _first_rollout(test)
    return _beside_stable(test, stable, spec.canary.replicas(replicas))


def _in_place(test: _Test) -> Plan:
    """The stable revision re-tested where it serves: nothing new runs."""
    current, run, every = test.current, test.run, test.every
    if test.passed or (test.verdict is None and run is None):
        return Plan(current, current, None, every, None, test.verdict, run)
    if test.failed:
        return Plan(current, current, None, every, conditions.FAILED, test.verdict, run, IN_PLACE)
    return Plan(current, current, current, every, conditions.AWAITING_VERDICT, None, run, IN_PLACE)


def _first_rollout(test: _Test) -> Plan:
    """No revision serves yet: the first one takes no traffic until it passes."""
    current, run, every = test.current, test.run, test.every
    if test.passed:
        return Plan(
            current, current, None, every, conditions.PROMOTED, test.verdict, run, FIRST_ROLLOUT
        )
    if test.failed:
        return Plan(current, None, None, {}, conditions.FAILED, test.verdict, run, FIRST_ROLLOUT)
    return Plan(
        current, None, current, every, conditions.AWAITING_VERDICT, None, run, FIRST_ROLLOUT
    )


def _beside_stable(test: _Test, stable: str, canary_replicas: int) -> Plan:
    """A canary beside the stable revision: promoted, rolled back, or measured."""
    current, run = test.current, test.run
    if test.passed:
        return Plan(
            current, current, None, test.every, conditions.PROMOTED, test.verdict, run,
            BESIDE_STABLE,
        )  # fmt: skip
    if test.failed:
        targets = {stable: test.replicas}
        return Plan(current, stable, None, targets, conditions.ROLLED_BACK, test.verdict, run)
    targets = {stable: test.replicas, current: canary_replicas}
    return Plan(
        current, stable, current, targets, conditions.AWAITING_VERDICT, None, run, BESIDE_STABLE
    )


def traffic_percent(plan: Plan, spec: ModelDeploymentSpec) -> int:
    """The share of the traffic the revision under test takes while it is measured."""
    if plan.mode == FIRST_ROLLOUT:
        return 0
    if plan.mode == IN_PLACE:
        return 100
    return spec.canary.traffic_percent if spec.canary else 100


def _verdict_message(head: str, verdict: Mapping[str, Any]) -> str:
    parts = [head]
    if verdict.get("reason"):
        parts.append(str(verdict["reason"]))
    if contracts.figures(verdict):
        parts.append(contracts.figures(verdict))
    return "; ".join(parts)


def rollback_message(verdict: Mapping[str, Any]) -> str:
    """The measured figures against the budgets, for the RolledBack condition."""
    return _verdict_message(
        f"canary revision {verdict.get('revision')} failed the latency gate", verdict
    )


def failed_message(plan: Plan) -> str:
    """Why the revision under test failed with nothing to roll back to, and what serves now."""
    verdict = plan.verdict or {}
    run = f" in run {plan.run}" if plan.run else ""
    if plan.mode == IN_PLACE:
        head = (
            f"revision {plan.current} failed the latency gate{run} and keeps serving: the pods did "
            "not change, so there is nothing to roll back to"
        )
    else:
        head = (
            f"revision {plan.current} failed the latency gate{run} and never took traffic; there "
            "is no earlier revision to keep, so nothing serves until the spec changes"
        )
    return _verdict_message(head, verdict)
