"""Which revisions run, and how many replicas of each: the canary state machine. Pure.

The revision of the spec (`plnt.revision.revision`) is the *current* one. The *stable*
revision is remembered in the XR's `status.revisions.stable`; before the XR has a status it is
the revision label most observed ModelReplicas carry. Then:

- no stable revision running (first rollout, or its replicas are gone), or the current one is
  stable: the current revision runs `spec.replicas`, every other revision's replicas go;
- the current revision differs and there is no `spec.canary`: it rolls straight through
  (becomes stable at `spec.replicas`, the old revision's replicas go at once);
- the current revision differs and `spec.canary` is set: the current revision is the canary
  with ceil(replicas x trafficPercent / 100) (at least 1) replicas beside the stable ones, which
  keep the replicas they have (a non-current revision is never placed anew: its engines are no
  longer in the spec). Replicas of any third revision (a superseded canary) go. The verdict the
  canary gate wrote to `status.canary.gate` for *this* revision decides: Pass promotes (it
  becomes stable at `spec.replicas`, the old replicas go), Fail rolls back (its replicas go, the
  stable revision keeps all traffic; the verdict is kept in status so it is not retried).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from plnt.models.model_deployment import ModelDeploymentSpec

PASS = "Pass"  # noqa: S105 (a verdict, not a password)
FAIL = "Fail"

# reasons of the Canary condition
PROMOTED = "Promoted"
ROLLED_BACK = "RolledBack"
AWAITING_VERDICT = "AwaitingVerdict"


@dataclasses.dataclass(frozen=True)
class Plan:
    current: str
    stable: str
    canary: str | None
    targets: Mapping[str, int]  # revision -> replicas wanted; absent revisions go
    outcome: str | None  # PROMOTED, ROLLED_BACK, AWAITING_VERDICT or None (no canary)
    verdict: Mapping[str, Any] | None  # the gate's verdict on the current revision

    def placed_anew(self, revision: str) -> bool:
        """Only the current revision's engines are in the spec, so only it gets new replicas."""
        return revision == self.current


def remembered_stable(status: Mapping[str, Any], observed_revisions: Counter[str]) -> str | None:
    stable = (status.get("revisions") or {}).get("stable")
    if stable:
        return stable
    if not observed_revisions:
        return None
    # most replicas first, then the lexically smallest: deterministic
    return min(observed_revisions.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def gate_verdict(
    status: Mapping[str, Any], context_verdict: Mapping[str, Any] | None, revision: str
) -> Mapping[str, Any] | None:
    """The gate's verdict for `revision`, from the pipeline context or the observed XR status."""
    for verdict in (context_verdict, (status.get("canary") or {}).get("gate")):
        if (
            isinstance(verdict, Mapping)
            and verdict.get("revision") == revision
            and verdict.get("verdict") in (PASS, FAIL)
        ):
            return verdict
    return None


def plan(
    spec: ModelDeploymentSpec,
    current: str,
    status: Mapping[str, Any],
    observed_revisions: Counter[str],
    context_verdict: Mapping[str, Any] | None = None,
) -> Plan:
    stable = remembered_stable(status, observed_revisions)
    stable_running = stable is not None and observed_revisions.get(stable, 0) > 0
    if stable is None or stable == current or not stable_running or spec.canary is None:
        return Plan(current, current, None, {current: spec.replicas}, None, None)
    verdict = gate_verdict(status, context_verdict, current)
    if verdict is not None and verdict["verdict"] == PASS:
        return Plan(current, current, None, {current: spec.replicas}, PROMOTED, verdict)
    if verdict is not None:
        return Plan(current, stable, None, {stable: spec.replicas}, ROLLED_BACK, verdict)
    targets = {stable: spec.replicas, current: spec.canary.replicas(spec.replicas)}
    return Plan(current, stable, current, targets, AWAITING_VERDICT, None)


def rollback_message(verdict: Mapping[str, Any]) -> str:
    """The measured figures against the budgets, for the RolledBack condition."""
    parts = [f"canary revision {verdict.get('revision')} failed the latency gate"]
    if verdict.get("reason"):
        parts.append(str(verdict["reason"]))
    budgets = verdict.get("budgets") or {}
    for metric in ("ttftMs", "tpotMs"):
        figures = verdict.get(metric) or {}
        if figures:
            text = f"{metric[:4].upper()} p50 {figures.get('p50')} ms, p95 {figures.get('p95')} ms"
            budget = budgets.get(metric, budgets.get(metric.replace("Ms", "BudgetMs")))
            if budget is not None:
                text += f" (budget {budget} ms)"
            parts.append(text)
    return "; ".join(parts)
