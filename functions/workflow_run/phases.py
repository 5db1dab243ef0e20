"""The WorkflowRun phase: a target derived from what is observed, and one forward walk to it.

**The target** is a pure function of the run id, whether the run stages weights
(`model.storageUri`) and the observed ModelDeployment (its conditions, revisions and
`status.canary`: the run it took up, the gate, how the revision is tested (`mode`) and the
revision under test's `readiness`) and ModelService (URL, readiness, Routed). First match wins:

| target         | observed                                                                   |
|----------------|----------------------------------------------------------------------------|
| Failed         | (invalid spec: decided by the caller) the ModelDeployment cannot be        |
|                | reconciled (Synced False); or the revision under test failed the gate with |
|                | nothing to roll back to (Canary reason Failed: a first rollout, which      |
|                | never took traffic, or a re-test in place of unchanged pods)               |
| Validating     | no ModelDeployment observed yet, or it has not taken up this run yet       |
|                | (`status.canary.run` is not the run id), or it has not reported a schedule |
| RolledBack     | the Canary condition's reason is RolledBack: the stable revision kept 100% |
| Pending        | ReplicasScheduled is False: no cluster can place the replicas yet          |
| PullingWeights | the revision coming up (the one under test, else the serving one) is not   |
|                | ready and its readiness is PullingWeights (an init container stages the    |
|                | weights); or, in a run that stages weights, Waiting or Unschedulable       |
|                | (nothing has started: the weights stage first)                             |
| Deploying      | its readiness is Starting (weights staged, the engines start), or Waiting  |
|                | or Unschedulable with nothing to stage; or it is ready and the gate has    |
|                | not begun measuring it (`status.canary.gate.state` Waiting)                |
| SmokeTesting   | the gate measures the revision under test (state Measuring), or has a      |
|                | verdict the schedule step has not acted on yet; a re-test in place from    |
|                | the moment it is taken up (nothing of it starts)                           |
| Promoting      | the gate passed (Canary Promoted) and the promoted revision is not fully   |
|                | ready or routed yet, or replicas are ready but the ModelService does not   |
|                | route to them yet (no URL, not Ready, Routed not True, or its weights not  |
|                | computed from the deployment's revisions now; a re-test in place moves no  |
|                | traffic, so routing at all is enough)                                      |
| Ready          | replicas ready and the ModelService routes to them with a URL              |

**The walk.** The phase written is not the target itself: it advances from the phase last
written (the WorkflowRun's own `status.phase`, read back, so a restart changes nothing) by at
most one step along the seed's order Validating, PullingWeights, Deploying, SmokeTesting,
Promoting, Ready toward the target, passing over only the steps that do not apply to this run,
and asks to be called again at once (``Phase.trailing``) while it trails the target. Every
interleaving of the children's reports between two reconciles so shows every step in order:

- Which steps apply. PullingWeights only when the run brings up a new revision (a first
  rollout, or a canary beside the stable revision: `status.canary.mode`) that stages weights;
  Deploying and Promoting only when it brings up a new revision (a re-test in place starts
  nothing and moves no traffic); SmokeTesting always (every run is tested).
- A step written on the way carries what is already observed further along (SmokeTesting's
  message gives the verdict and its figures).
- It never steps back within a run: a child that reports an earlier state again (a pod
  restarted, a replica added, a status lagging a reconcile) is told in the message under the
  step reached; after Ready, under Ready until the next run (the run is complete).
- Where it starts. A fresh run (the written `workflowRunId` is another run's: the spec was
  updated) starts before Validating, so Validating is always written first. Pending is written
  whenever observed, from any step; Failed because the ModelDeployment cannot be reconciled
  too, except after Ready in the same run (the complete run still serves: it is said under
  Ready). The walk resumes after them as after Validating, or, when the deployment has settled
  meanwhile (no revision under test, nothing just promoted, rolled back or failed: a scale-up
  that could not be placed after Ready), goes to the target at once. RolledBack, and Failed by
  the gate, come after SmokeTesting: the walk shows the steps up to the smoke test first.

``url`` is the ModelService URL once a stable revision serves behind it, so it stays set
through a later update's canary, re-test, promotion or rollback, and is never set before
Promoting in a first rollout; the WorkflowRun's in-cluster ``endpoint`` follows it (fn.py).
Routed includes the ModelService's in-cluster endpoint where it has a Service: Ready is
written only once ``status.endpoint`` can be.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
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
# the seed's order: the walk's steps
ORDER = (VALIDATING, PULLING_WEIGHTS, DEPLOYING, SMOKE_TESTING, PROMOTING, READY)
_HOLD = {
    PULLING_WEIGHTS: "the weights are staging; ",
    DEPLOYING: "the engines are starting; ",
    SMOKE_TESTING: "the latency gate has measured or measures this revision; ",
    PROMOTING: "the revision passed the latency gate; ",
    READY: "the run is complete and its endpoint serves; now: ",
}

# the message of a rollout whose ReplicasReady reason is Unschedulable, before ReplicasReady's
UNSCHEDULABLE_PREFIX = "the kube-scheduler cannot place the engines' pods: "


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    message: str
    url: str | None = None
    # written on the way: the target is further along, and the next step is due at once
    trailing: bool = False


def _status(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


def _cond(obj: Mapping[str, Any] | None, typ: str) -> dict[str, Any]:
    return dict(xp.condition_of(obj, typ) or {})


def serving(deployment: Mapping[str, Any] | None) -> bool:
    """A revision has passed the gate and its replicas are all ready, or, while some are on a
    degraded cluster (out of the routes, failing over), at least one serves."""
    stable = contracts.Revisions.of(deployment).stable
    ready = _cond(deployment, conditions.REPLICAS_READY)
    if ready.get("status") == "True":
        return bool(stable)
    replicas = _status(deployment).get("replicas")
    serves = isinstance(replicas, Mapping) and _count(replicas.get("ready")) > 0
    return bool(stable) and ready.get("reason") == conditions.CLUSTER_DEGRADED and serves


def _count(value: Any) -> int:
    return value if type(value) is int else 0


def routed(service: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None = None) -> bool:
    """The ModelService has a URL (and its in-cluster endpoint, where it has a Service), is
    Ready, sends traffic to at least one endpoint and, given the ModelDeployment, computed its
    weights from the revisions the deployment reports now (so a promotion or rollback counts as
    routed only once traffic has followed it)."""
    if not _routes(service):
        return False
    return deployment is None or _follows(service, deployment)


def _routes(service: Mapping[str, Any] | None) -> bool:
    """The ModelService has its URL (and endpoint, with a Service), is Ready and Routed."""
    wants_endpoint = bool(((service or {}).get("spec") or {}).get("service"))
    return bool(
        _status(service).get("url")
        and (_status(service).get("endpoint") or not wants_endpoint)
        and xp.is_ready(service)
        and _cond(service, conditions.ROUTED).get("status") == "True"
    )


def _follows(service: Mapping[str, Any] | None, deployment: Mapping[str, Any]) -> bool:
    """The ModelService's weights come from the revisions the deployment reports now."""
    name = (deployment.get("metadata") or {}).get("name")
    revisions = _status(deployment).get("revisions") or {}
    want = {k: revisions[k] for k in ("stable", "canary") if revisions.get(k)}
    for seen in _status(service).get("deployments") or []:
        if isinstance(seen, Mapping) and seen.get("name") == name:
            return {k: seen[k] for k in ("stable", "canary") if seen.get(k)} == want
    return False


@dataclasses.dataclass(frozen=True)
class _Run:
    """What the observed ModelDeployment says of this run, for the walk."""

    new: bool  # it brings up a new revision (a first rollout, or a canary beside the stable)
    settled: bool  # nothing of it is left to show but readiness and routing
    revision: str | None  # the revision it tests (or tested)
    verdict: contracts.Gate | None  # the gate's verdict in this run, once in

    @classmethod
    def of(cls, deployment: Mapping[str, Any] | None, run: str | None, first: bool) -> _Run:
        revisions = contracts.Revisions.of(deployment)
        canary = contracts.CanaryStatus.of(deployment)
        this_run = run is None or canary.run == run
        outcome = _cond(deployment, CANARY).get("reason")
        promoted = this_run and outcome == conditions.PROMOTED
        if this_run and canary.mode is not None:
            new = canary.mode != contracts.IN_PLACE
        else:
            new = promoted or (
                revisions.canary is not None and revisions.canary != revisions.stable
            )
        gate = canary.gate
        decided = gate.decided and (run is None or gate.run == run)
        return cls(
            new=new or first,
            settled=not revisions.canary
            and outcome not in (conditions.PROMOTED, conditions.ROLLED_BACK, conditions.FAILED),
            revision=revisions.canary or gate.revision or revisions.stable,
            verdict=gate if decided else None,
        )


def derive(
    deployment: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
    run: str | None = None,
    written: Mapping[str, Any] | None = None,
    stages_weights: bool = False,
) -> Phase:
    """The phase to write for a valid spec (Failed on invalid input is decided by the caller):
    the target derived from what is observed, reached by the walk from ``written`` (the
    WorkflowRun's own observed status: phase, workflowRunId, url). Without a written phase
    (a new object, or a preview) it is the target itself."""
    target = _derive(deployment, service, run, stages_weights)
    last = written or {}
    previous = last.get("phase")
    if previous not in PHASES or previous == target.name:
        return target
    goal = _goal(target, deployment)
    reached = _reached(previous, last, run)
    first_rollout = not (last.get("url") or last.get("endpoint"))
    if goal is None or goal <= reached:
        return _standing(target, goal, reached, last, first_rollout)
    this = _Run.of(deployment, run, first_rollout)
    if this.settled and previous not in ORDER and not first_rollout:
        return target  # after Pending (or Failed) of a settled deployment: nothing to show
    steps = ORDER[reached + 1 : goal]
    return _next_step(target, steps, this, run, stages_weights, first_rollout)


def _standing(
    target: Phase, goal: int | None, reached: int, last: Mapping[str, Any], first_rollout: bool
) -> Phase:
    """No step to walk toward the goal: the target itself, or the target told under the step
    reached when the goal lies behind it."""
    if goal is None and target.name == FAILED and reached == ORDER.index(READY):
        # a complete run serves on while its deployment cannot be reconciled (a function
        # revision activating during an upgrade fails a reconcile or two): said under Ready
        return _held(target, READY, last, first_rollout)
    if goal is None or goal == reached:
        return target  # no goal: Pending, or Failed as the deployment cannot be reconciled
    return _held(target, ORDER[reached], last, first_rollout)


def _next_step(
    target: Phase,
    steps: Sequence[str],
    this: _Run,
    run: str | None,
    stages_weights: bool,
    first_rollout: bool,
) -> Phase:
    """The first of `steps` (those between the step reached and the goal) that applies to this
    run, written while it trails the target; the target when none applies."""
    for step in steps:
        if _applies(step, this, stages_weights):
            message = _on_the_way(step, target, this, run)
            return Phase(step, message, _url(target, step, first_rollout), trailing=True)
    return target


def _goal(target: Phase, deployment: Mapping[str, Any] | None) -> int | None:
    """The step of ORDER the walk goes toward; None for a target written from any step."""
    if target.name == ROLLED_BACK or (target.name == FAILED and _gate_failed(deployment)):
        return ORDER.index(PROMOTING)  # the steps up to the smoke test come first
    if target.name in (PENDING, FAILED):
        return None
    return ORDER.index(target.name)


def _reached(previous: str, last: Mapping[str, Any], run: str | None) -> int:
    """The step of ORDER the walk last wrote: -1 in a fresh run (an updated spec: its walk
    starts again, with Validating); after Pending, Failed or RolledBack, as after Validating."""
    if run is not None and last.get("workflowRunId") not in (None, run):
        return -1
    return ORDER.index(previous) if previous in ORDER else 0


def _held(target: Phase, here: str, last: Mapping[str, Any], first_rollout: bool) -> Phase:
    """A run's phase only moves forward: what reports an earlier state again (a pod
    restarted, a replica added, a child's status lags a reconcile) is told under the step
    reached; after Ready, under Ready, until the next run."""
    url = _url(target, here, first_rollout) or (last.get("url") if here == READY else None)
    return Phase(here, _HOLD[here] + target.message, url)


def _gate_failed(deployment: Mapping[str, Any] | None) -> bool:
    """The run failed its smoke test (not: its ModelDeployment cannot be reconciled)."""
    if _cond(deployment, "Synced").get("status") == "False":
        return False
    return _cond(deployment, CANARY).get("reason") == conditions.FAILED or (
        contracts.CanaryStatus.of(deployment).gate.verdict == contracts.FAIL
    )


def _applies(step: str, this: _Run, stages_weights: bool) -> bool:
    if step == PULLING_WEIGHTS:
        return this.new and stages_weights
    if step in (DEPLOYING, PROMOTING):
        return this.new
    return True  # Validating, and SmokeTesting: every run is tested


def _url(target: Phase, step: str, first_rollout: bool) -> str | None:
    """Nothing serves a first rollout before it is promoted."""
    if first_rollout and ORDER.index(step) < ORDER.index(PROMOTING):
        return None
    return target.url


def _on_the_way(step: str, target: Phase, this: _Run, run: str | None) -> str:
    """A step written while the target is further along: what it names happened, and what
    is observed already."""
    rev = this.revision or "?"
    if step == SMOKE_TESTING:
        verdict = this.verdict
        if verdict is None and target.name in (ROLLED_BACK, FAILED):
            return f"the latency gate measured revision {rev}; {target.message}"
        if verdict is None:
            return f"revision {rev} passed the latency gate; " + (
                "promoting it" if this.new else "it serves on"
            )
        figures = contracts.figures(verdict.raw)
        said = f"the latency gate measured revision {rev}: {verdict.verdict}"
        said += f" ({figures})" if figures else ""
        if not verdict.passed:
            return f"{said}: {verdict.reason}" if verdict.reason else said
        return f"{said}; " + ("promoting it" if this.new else "it serves on")
    if step == PROMOTING:
        return f"revision {rev} passed the latency gate and its traffic has followed; Ready next"
    further = f"; further along already: {target.message}"
    if step == VALIDATING:
        return f"the ModelDeployment has taken up run {run}{further}"
    if step == PULLING_WEIGHTS:
        return f"revision {rev} staged its model weights{further}"
    return f"the engines of revision {rev} started{further}"


@dataclasses.dataclass(frozen=True)
class _Observed:
    """What the target is derived from: the observed children, read once."""

    deployment: Mapping[str, Any]
    service: Mapping[str, Any] | None
    run: str | None
    stages_weights: bool
    stable: str | None
    canary: str | None
    gate: contracts.Gate
    outcome: str | None  # the Canary condition's reason
    canary_message: str | None
    scheduled: dict[str, Any]  # ReplicasScheduled
    ready: dict[str, Any]  # ReplicasReady
    url: str | None  # the ModelService's URL once a stable revision serves behind it

    @classmethod
    def of(
        cls,
        deployment: Mapping[str, Any],
        service: Mapping[str, Any] | None,
        run: str | None,
        stages_weights: bool,
    ) -> _Observed:
        status = _status(deployment)
        revisions = status.get("revisions") or {}
        stable = revisions.get("stable")
        canary_cond = _cond(deployment, CANARY)
        routed_at = _status(service).get("url")
        return cls(
            deployment=deployment,
            service=service,
            run=run,
            stages_weights=stages_weights,
            stable=stable,
            canary=revisions.get("canary"),
            gate=contracts.Gate.of(contracts.gate_at(status)),
            outcome=canary_cond.get("reason"),
            canary_message=canary_cond.get("message"),
            scheduled=_cond(deployment, conditions.REPLICAS_SCHEDULED),
            ready=_cond(deployment, conditions.REPLICAS_READY),
            url=routed_at if (stable and routed_at) else None,
        )


def _unreconcilable(seen: _Observed) -> Phase | None:
    synced = _cond(seen.deployment, "Synced")
    if synced.get("status") != "False":
        return None
    why = synced.get("message") or synced.get("reason") or "no reason given"
    return Phase(FAILED, f"the ModelDeployment cannot be reconciled: {why}", seen.url)


def _not_taken_up(seen: _Observed) -> Phase | None:
    if seen.run is None or contracts.CanaryStatus.of(seen.deployment).run == seen.run:
        return None
    return Phase(VALIDATING, f"the ModelDeployment has not taken up run {seen.run} yet", seen.url)


def _failed(seen: _Observed) -> Phase | None:
    if seen.outcome == conditions.FAILED:
        return Phase(FAILED, seen.canary_message or "the smoke test failed", seen.url)
    if seen.gate.verdict == contracts.FAIL and not seen.stable:
        why = seen.gate.reason or ""
        return Phase(FAILED, f"the smoke test failed and no stable revision exists: {why}")
    return None


def _rolled_back(seen: _Observed) -> Phase | None:
    if seen.outcome != conditions.ROLLED_BACK:
        return None
    return Phase(ROLLED_BACK, seen.canary_message or "the canary was rolled back", seen.url)


def _unscheduled(seen: _Observed) -> Phase | None:
    if not seen.scheduled:
        return Phase(VALIDATING, "the ModelDeployment has not reported a schedule yet")
    if seen.scheduled.get("status") != "False":
        return None
    why = seen.scheduled.get("message") or seen.scheduled.get("reason") or ""
    return Phase(PENDING, f"replicas are not scheduled yet: {why}".rstrip(": "), seen.url)


def _under_test(seen: _Observed) -> Phase | None:
    if not (seen.canary and seen.outcome == conditions.AWAITING_VERDICT):
        return None
    return _testing(seen, seen.canary)


def _serving(seen: _Observed) -> Phase:
    """Nothing under test: promoting, coming up, waiting for routes, or Ready."""
    replicas_ready = seen.ready.get("status") == "True"
    in_place = contracts.CanaryStatus.of(seen.deployment).mode == contracts.IN_PLACE
    # a re-test in place moves no traffic: the service routing at all is enough
    is_routed = routed(seen.service, None if in_place else seen.deployment)
    if seen.outcome == conditions.PROMOTED and not (replicas_ready and is_routed):
        said = f"revision {seen.stable} passed the gate; shifting traffic to it"
        return Phase(PROMOTING, said, seen.url)
    if not replicas_ready:
        counts = seen.ready.get("message") or "replicas not ready"
        return _coming_up(seen.ready.get("reason"), None, counts, seen.stages_weights, seen.url)
    if not is_routed:
        why = _cond(seen.service, conditions.ROUTED).get("message")
        why = why or "it has no URL or is not Ready"
        said = f"replicas are ready; the ModelService does not route to them yet: {why}"
        return Phase(PROMOTING, said, seen.url)
    routed_at = _status(seen.service).get("url")
    inside = _status(seen.service).get("endpoint")
    where = f"{inside} (outside the cluster: {routed_at})" if inside else routed_at
    return Phase(READY, f"serving at {where}", routed_at)


# The target's rules in the order of the module docstring's table: the first that answers wins.
_RULES: tuple[Callable[[_Observed], Phase | None], ...] = (
    _unreconcilable,
    _not_taken_up,
    _failed,
    _rolled_back,
    _unscheduled,
    _under_test,
)


def _derive(
    deployment: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
    run: str | None,
    stages_weights: bool = False,
) -> Phase:
    """The target: the first of `_RULES` that answers, else what serving says."""
    if deployment is None:
        return Phase(VALIDATING, "spec is valid; the ModelDeployment is being created")
    seen = _Observed.of(deployment, service, run, stages_weights)
    for rule in _RULES:
        phase = rule(seen)
        if phase is not None:
            return phase
    return _serving(seen)


def _coming_up(
    readiness: str | None,
    revision: str | None,
    why: str,
    stages_weights: bool,
    url: str | None,
) -> Phase:
    """Replicas that are not ready, by the reason their parent reports (ReplicasReady's, or
    the revision under test's readiness): staging weights, or starting their engines.
    ``revision`` names the revision under test (None: the serving one)."""
    what = revision or "engines"
    if readiness == conditions.PULLING_WEIGHTS:
        of = f" of {revision}" if revision else ""
        return Phase(PULLING_WEIGHTS, f"staging the model weights{of}: {why}", url)
    if readiness == conditions.UNSCHEDULABLE:
        # nothing has started: with weights to stage, staging is what comes next
        name = PULLING_WEIGHTS if stages_weights else DEPLOYING
        said = UNSCHEDULABLE_PREFIX + why
        return Phase(name, f"starting {revision}: {said}" if revision else said, url)
    if readiness in (conditions.STARTING, conditions.AVAILABLE) or not stages_weights:
        return Phase(DEPLOYING, f"starting {what}: {why}", url)
    return Phase(
        PULLING_WEIGHTS,
        f"{what}: the replicas are placed; their weights stage before the engines start: {why}",
        url,
    )


def _testing(seen: _Observed, canary: str) -> Phase:
    """A revision awaits the gate: it is coming up (PullingWeights, Deploying) or measured."""
    gate, stable = seen.gate, seen.stable
    gate_cond = _cond(seen.deployment, conditions.CANARY_GATE)
    measuring = gate.state not in (None, contracts.WAITING) or (
        not gate.raw and gate_cond.get("reason") in (conditions.MEASURING, conditions.PASSED)
    )
    if gate.revision not in (None, canary) or not measuring:
        why = gate.message or gate_cond.get("message") or "its replicas are not ready"
        if stable == canary:
            # nothing starts: the serving pods are measured as soon as the gate gets to them
            return Phase(
                SMOKE_TESTING,
                f"the latency gate is about to re-test revision {canary} in place (its traffic "
                f"unchanged): {why}",
                seen.url,
            )
        return _canary_coming_up(seen, canary, why)
    if stable == canary:
        what = f"re-testing revision {canary} in place (its traffic unchanged)"
    elif stable:
        what = f"measuring canary revision {canary}"
    else:
        what = f"measuring first revision {canary}; it takes no traffic until it passes"
    return Phase(SMOKE_TESTING, f"the latency gate is {what}", seen.url)


def _canary_coming_up(seen: _Observed, canary: str, why: str) -> Phase:
    """A new revision under test not measured yet, by its readiness; a first revision's is
    ReplicasReady's too."""
    readiness = contracts.CanaryStatus.of(seen.deployment).readiness
    if readiness is None and not seen.stable:
        readiness = seen.ready.get("reason")
    if readiness == conditions.UNSCHEDULABLE and not seen.stable:
        why = seen.ready.get("message") or why
    what = f"first revision {canary}" if not seen.stable else f"canary revision {canary}"
    return _coming_up(readiness, what, why, seen.stages_weights, seen.url)
