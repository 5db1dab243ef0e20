"""ModelDeployment: place replicas on the fleet, compose a ModelReplica and a ModelEndpoint each.

Reads: the XR (spec; `status.revisions` and `status.canary.gate` as observed), the composed
ModelReplicas it made before (their pins), every InferenceClass, the deployment's Namespace
(its labels, for fences) and the quota ledgers, and the fleet (`reading.snapshot`): the
binder's fleet view (the parts the clusterSelector's matchLabels select: per cluster its pools
and what the ledgers commit on them), plus by name the InferenceClusters of its replicas the
selected parts leave out and those a fence matters for (those of its replicas not bound yet
and those it is about to place new ones on: a placement on a cluster not read yet waits for the
next call), so a fence is the object's, as the binder reads it, not a view's that may predate
it. Until the binder has written a view, or when a part
of it does not read, the whole fleet is required instead: every InferenceCluster and every
ModelReplica of all namespaces (an empty label selector and no namespace), so capacity used by
every deployment is counted. Everything is read through `reading` (only the fields the
scheduler uses), which keeps a 1,000-cluster request well under the 0.5 s budget.

Composes: per placed replica a ModelReplica named `<md>-<revision[:6]>-<index>` (stable across
reconciles: pins are read back from the observed ModelReplicas), labelled with the
deployment, revision and cluster; per replica on a Ready cluster with a gateway address a
ModelEndpoint (`modelplane.ai/api: OpenAI`) with the gateway URL for the replica. A replica on a
degraded cluster keeps its pin but gets no endpoint, so routing drops it until the cluster is
back.

Decisions: `revisions.plan` says which revisions run with how many replicas (first rollout,
canary, re-test in place, promotion, rollback); `scheduling.schedule` keeps pins and places the
rest (see its docstring for the exact order). Status: `replicas.{total,ready}` (of the stable
revision, or in a first rollout of the revision being brought up), `placements[]`,
`revisions.{stable,canary}`, `canary` (with `run`, the spec's `canary.runId`), and the
conditions ReplicasScheduled, ReplicasReady and, with `spec.canary`, Canary. ReplicasReady is
False with reason Unschedulable while a replica it counts that is not ready reports
WorkloadsReady reason Unschedulable (the kube-scheduler cannot place one of its pods: the
message names the first replicas with their WorkloadsReady messages, and a Warning says it),
else with reason PullingWeights while such a replica reports WorkloadsReady reason
PullingWeights, else with reason Starting when every such replica reports Starting (its
weights, if any, are staged and its engines start), else Waiting. `status.canary` adds
`readyReplicas` and `readiness` (Available or the same reasons) of the revision under test, so
a parent tells a canary's weights staging from its engines starting. The XR is not Ready while
no revision has passed the gate: nothing serves yet.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import failover, revisions
from functions.model_deployment import replicas as rep
from plnt import conditions, contracts, pod_policy, xp
from plnt.capacity import binding, fleet_view, reading, scheduling
from plnt.capacity import offer as fleet_model
from plnt.capacity.tenant import Tenant
from plnt.models import model_deployment
from plnt.models.model_deployment import ModelDeploymentSpec
from plnt.revision import revision

GATE_FAILED = "GateFailed"  # ReplicasScheduled: a first rollout failed, nothing is placed
# status.canary.mode of each way a revision is tested
MODES = {
    revisions.FIRST_ROLLOUT: contracts.FIRST_ROLLOUT,
    revisions.BESIDE_STABLE: contracts.BESIDE_STABLE,
    revisions.IN_PLACE: contracts.IN_PLACE,
}


DEFAULT_TTL_S = 60.0  # the SDK's: what the function asks for when nothing is due sooner
# ... once every wanted replica of a stable revision is Ready and bound, no canary is in flight
# and no grace period runs: what changes a serving deployment calls it anyway (its composed
# replicas and endpoints, the binder's commits and health nudges on them, a spec or scale
# edit), so the reconcile that only re-applies an unchanged desired state comes rarely
REST_TTL_S = 300.0
clock = time.time  # the failover grace periods' clock (tests set their own)


def unreserved(
    tenant: Tenant, own: dict[str, dict[str, Any]], namespace: str
) -> tuple[list[dict[str, int]], dict[str, str]]:
    """The deployment's replicas some covering quota does not reserve yet, taken oldest first
    as the binder reserves them: what those that still fit ask, and, by name, those not bound
    that no longer fit, with why (the quota was lowered, or another deployment reserved the
    room first). A bound one stays, counted (a quota evicts nothing already committed)."""
    pending: list[dict[str, int]] = []
    over: dict[str, str] = {}
    waiting = []
    for obj in own.values():
        meta = obj["metadata"]
        key = f"{namespace}/{meta.get('name', '')}"
        state = binding.state_of(obj).state
        if state != binding.REFUSED_STATE and any(
            key not in q.entries for q in tenant.quota_ledgers
        ):
            waiting.append((str(meta.get("creationTimestamp") or ""), key, obj, state))
    for _created, _key, obj, state in sorted(waiting, key=lambda w: (w[0], w[1])):
        asks = binding.devices_of(obj)
        why = tenant.exceeds(asks, pending)
        if why and state != binding.BOUND:
            over[obj["metadata"].get("name", "")] = why
            continue
        pending.append(asks)
    return pending, over


def within_quotas(
    sched: scheduling.Schedule,
    tenant: Tenant,
    own: dict[str, dict[str, Any]],
    *,
    namespace: str,
    deployment: str,
    rev: str,
    raw_spec: dict[str, Any],
) -> scheduling.Schedule:
    """The schedule with the quotas covering the namespace applied: replicas not bound that no
    longer fit are released (`unreserved`), and the new replicas no quota has room for left out,
    the shortfall naming the quota. Room: hard less what the quota ledger reserves less what
    this deployment's replicas it does not reserve yet ask (they are proposals it will weigh
    first)."""
    if not tenant.quota_ledgers:
        return sched
    pending, over = unreserved(tenant, own, namespace)
    kept = [r for r in sched.kept if r.name not in over]
    released = [*sched.released, *(r for r in sched.kept if r.name in over)]
    placed: list[scheduling.Placement] = []
    why = ""
    for placement in sched.placed:
        obj = rep.model_replica(
            name="probe", namespace=namespace, deployment=deployment, revision=rev,
            spec=raw_spec, placement=placement,
        )  # fmt: skip
        asks = binding.devices_of(obj)
        why = tenant.exceeds(asks, pending)
        if why:
            break
        placed.append(placement)
        pending.append(asks)
    if len(kept) == len(sched.kept) and len(placed) == len(sched.placed):
        return sched
    held = [r for r in sched.held if r.name not in over]
    total = len(kept) - len(held) + len(placed)
    said = [f"{r.name} released ({over[r.name]})" for r in sched.kept if r.name in over]
    said += [why] if why else []
    rest = sched.message.removeprefix(scheduling.summary(sched.count, sched.wanted))
    return dataclasses.replace(
        sched,
        kept=kept,
        released=released,
        placed=placed,
        held=held,
        reason=scheduling.INSUFFICIENT_QUOTA,
        message=f"{scheduling.summary(total, sched.wanted)}{rest}; " + "; ".join(said),
    )


def template_refused(
    sched: scheduling.Schedule, refused: pod_policy.Refusal
) -> scheduling.Schedule:
    """The schedule of a revision whose pod templates ask for what plnt does not let onto a
    workload cluster: nothing new is placed (its pins, if any, are kept) and the condition names
    the field."""
    total = len(sched.kept) - len(sched.held)
    rest = sched.message.removeprefix(scheduling.summary(total, sched.wanted))
    return dataclasses.replace(
        sched,
        placed=[],
        reason=scheduling.TEMPLATE_NOT_PERMITTED,
        message=f"{scheduling.summary(total, sched.wanted)}{rest}; {refused}",
    )


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a decision reads, read once: the XR, its own replicas, the fleet, the tenant."""

    name: str
    namespace: str
    raw_spec: dict[str, Any]
    spec: ModelDeploymentSpec
    refused: pod_policy.Refusal | None  # what its pod templates ask that plnt does not allow
    observed_status: dict[str, Any]
    observed: dict[str, dict[str, Any]]  # every resource it composed, observed, by resource name
    verdicts: Any  # the canary gate's verdicts from the pipeline's context, or None
    classes: list[dict[str, Any]]
    own: dict[str, dict[str, Any]]  # its observed ModelReplicas by name
    own_placed: list[scheduling.PlacedReplica]
    snapshot: reading.Snapshot
    tenant: Tenant
    # what the scheduler charges besides its own replicas, and those of them the view counts
    fleet: list[scheduling.PlacedReplica]
    counted: frozenset[tuple[str, str]]

    @functools.cached_property
    def clusters(self) -> dict[str, fleet_model.Cluster]:
        return {c.name: c for c in self.snapshot.clusters}


@dataclasses.dataclass(frozen=True)
class Decisions:
    """Failover's state, the revision plan and one schedule per revision it runs."""

    now: float
    degraded: list[failover.Degraded]
    failed: frozenset[str]
    serving: frozenset[str]
    plan: revisions.Plan
    schedules: dict[str, scheduling.Schedule]


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Inputs, then decisions, then the desired replicas and endpoints, then status."""
    rsp = xp.respond(req)
    inputs = read_inputs(req, rsp)
    if inputs is None:
        xp.set_conditions(
            rsp, conditions.waiting(conditions.REPLICAS_SCHEDULED, "reading the fleet")
        )
        return rsp
    decided = decide(inputs)
    # A new replica goes only where the cluster's own fence admits it, read as the binder
    # reads it: a view written before the fence was set must not propose one there.
    placed_on = {p.cluster for s in decided.schedules.values() for p in s.placed}
    unread = sorted(placed_on - inputs.snapshot.read)
    if unread:
        reading.clusters_by_name(req, rsp, unread)  # the next call holds them
        xp.set_conditions(
            rsp,
            conditions.waiting(
                conditions.REPLICAS_SCHEDULED,
                f"reading the fences of clusters {', '.join(unread)}",
            ),
        )
        return rsp
    out = compose(rsp, inputs, decided)
    write_status(rsp, inputs, decided, out)
    return rsp


def read_inputs(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> Inputs | None:
    """The XR, its replicas, the classes, the fleet and the tenant; None until Crossplane has
    answered every requirement."""
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    namespace = meta.get("namespace", "")
    raw_spec = xr.get("spec") or {}
    spec = xp.parse(ModelDeploymentSpec, raw_spec, "spec")
    model_deployment.check(spec)
    classes = reading.require_all(
        req,
        rsp,
        "inference-classes",
        contracts.MODELPLANE_API_VERSION,
        "InferenceClass",
        shape=reading.CLASS,
    )
    observed = xp.observed_resources(req)
    own = _own_replicas(observed)
    own_placed = [scheduling.placed_replica(o) for o in own.values()]
    snapshot = reading.snapshot(
        req,
        rsp,
        spec.cluster_selector.match_labels,
        {r.cluster for r in own_placed},
        fenced={r.cluster for r in own_placed if r.state != binding.BOUND},
    )
    tenant = reading.tenant(req, rsp, namespace)
    if classes is None or snapshot is None or tenant is None:
        return None
    if snapshot.unreadable:
        xp.warning(
            rsp,
            f"fleet view parts {', '.join(snapshot.unreadable)} in {fleet_view.NAMESPACE} do not "
            "read as a fleet view; scheduled on the whole fleet instead",
        )
    counted, fleet = snapshot.charged(own.values(), own_placed)
    return Inputs(
        name=meta.get("name", ""),
        namespace=namespace,
        raw_spec=raw_spec,
        spec=spec,
        refused=pod_policy.refusal(spec.engines, spec.serving),
        observed_status=xr.get("status") or {},
        observed=observed,
        verdicts=xp.context(req, contracts.VERDICT_CONTEXT),
        classes=classes,
        own=own,
        own_placed=own_placed,
        snapshot=snapshot,
        tenant=tenant,
        fleet=fleet,
        counted=counted,
    )


def _own_replicas(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ModelReplicas it composed before, observed, by name."""
    return {
        (o["metadata"].get("name") or ""): o
        for o in observed.values()
        if o.get("kind") == rep.MODEL_REPLICA
    }


def decide(inputs: Inputs) -> Decisions:
    """Failover (failover.py): replicas on degraded clusters or with pods that stay
    unschedulable, those past the grace period, and those that serve (a replacement releases a
    held replica only once it does); the revision plan; then each revision's schedule, the
    current one last, within the pod policy and the quotas."""
    clusters = inputs.clusters
    now = clock()
    stuck = {n: s for n, obj in inputs.own.items() if (s := failover.stuck(obj)) is not None}
    degraded = failover.degraded(
        ((r.name, r.cluster) for r in inputs.own_placed),
        clusters,
        inputs.spec.failover.after_seconds,
        stuck,
    )
    serving = frozenset(
        n
        for n, obj in inputs.own.items()
        if _serves(inputs, n, obj, clusters.get(_cluster_of(obj)))
    )
    plan = revisions.plan(
        inputs.spec,
        revision(inputs.raw_spec),
        inputs.observed_status,
        Counter(r.revision for r in inputs.own_placed),
        inputs.verdicts,
    )
    decided = Decisions(now, degraded, failover.failed(degraded, now), serving, plan, {})
    for rev in sorted(plan.targets, key=lambda r: r == plan.current):  # current last
        decided.schedules[rev] = schedule_revision(inputs, decided, rev)
    return decided


def schedule_revision(inputs: Inputs, decided: Decisions, rev: str) -> scheduling.Schedule:
    """One revision's schedule: its pins kept and new replicas placed beside the revisions
    scheduled before it, nothing new where the pod policy refuses its templates, then the
    quotas covering the namespace applied."""
    plan, spec = decided.plan, inputs.spec
    place_new = plan.placed_anew(rev)
    sched = scheduling.schedule(
        scheduling.Ask(
            scheduling.engines_from(spec.engines),
            plan.targets[rev],
            spec.cluster_selector.matches,
            place_new=place_new and not inputs.refused,
        ),
        scheduling.FleetState(
            inputs.snapshot.clusters,
            inputs.classes,
            inputs.fleet,
            inputs.snapshot.used,
            inputs.counted,
            inputs.snapshot.size,
        ),
        scheduling.Owner(
            own=[r for r in inputs.own_placed if r.revision == rev],
            siblings=[r for other in decided.schedules.values() for r in other.kept],
            namespace=inputs.namespace,
            labels=inputs.tenant.labels,
            serving=decided.serving,
            failed=decided.failed,
        ),
    )
    if inputs.refused and place_new:
        sched = template_refused(sched, inputs.refused)
    return within_quotas(
        sched,
        inputs.tenant,
        inputs.own,
        namespace=inputs.namespace,
        deployment=inputs.name,
        rev=rev,
        raw_spec=inputs.raw_spec,
    )


def compose(rsp: fnv1.RunFunctionResponse, inputs: Inputs, decided: Decisions) -> Composed:
    """Desired resources: per revision, its kept replicas as they are and its new ones, each
    with its endpoint where its cluster routes (`_compose_replica`)."""
    out = Composed()
    for rev, sched in decided.schedules.items():
        new_names = rep.fresh_names(inputs.name, rev, inputs.own, len(sched.placed))
        replicas = [(r.name, rep.pinned_replica(inputs.own[r.name])) for r in sched.kept]
        replicas += [
            (
                replica,
                rep.model_replica(
                    name=replica,
                    namespace=inputs.namespace,
                    deployment=inputs.name,
                    revision=rev,
                    spec=inputs.raw_spec,
                    placement=p,
                ),
            )
            for replica, p in zip(new_names, sched.placed, strict=True)
        ]
        _mark_replacements(sched, inputs.own, replicas[len(sched.kept) :])
        for _, obj in sorted(replicas, key=lambda r: r[0]):
            _compose_replica(rsp, out, inputs, obj=obj, rev=rev)
    return out


def write_status(
    rsp: fnv1.RunFunctionResponse, inputs: Inputs, decided: Decisions, out: Composed
) -> None:
    """Status, conditions, warnings and events (`report`), and when to be called again: when
    the next failover grace period ends, not a poll later; after REST_TTL_S at rest."""
    schedules = decided.schedules
    said = report(inputs.spec, decided.plan, schedules, out, inputs.observed_status)
    health = _failover_condition(
        schedules,
        out,
        decided.degraded,
        failed=decided.failed,
        now=decided.now,
        after=inputs.spec.failover.after_seconds,
        serving=decided.serving,
    )
    xp.set_status(rsp, said.status)
    xp.set_conditions(rsp, *said.conditions, health)
    for message in said.warnings:
        xp.warning(rsp, message)
    if not health.status:
        xp.warning(rsp, f"{health.reason}: {health.message}")
    for r in (r for s in schedules.values() for r in s.released if r.name in decided.failed):
        xp.normal(rsp, f"FailedOver: {r.name} on {r.cluster} released; its replacement serves")
    due = failover.next_due(decided.degraded, decided.now)
    if due is not None:
        rsp.meta.ttl.FromMilliseconds(int(min(due + 0.5, DEFAULT_TTL_S) * 1000))
    elif at_rest(said, health, decided.plan):
        rsp.meta.ttl.FromMilliseconds(int(REST_TTL_S * 1000))
    if not said.ready:
        xp.set_composite_ready(rsp, False)


def at_rest(said: Report, health: xp.Condition, plan: revisions.Plan) -> bool:
    """Ready with every condition True, nothing to warn of and no canary under test."""
    return (
        said.ready
        and health.status is True
        and all(c.status is True for c in said.conditions)
        and not said.warnings
        and plan.canary is None
    )


@dataclasses.dataclass(frozen=True)
class Report:
    """What the XR says of a plan and what composing it found: its status, its conditions and
    warnings in order, and whether the XR itself may read Ready."""

    status: dict[str, Any]
    conditions: list[xp.Condition]
    warnings: list[str]
    ready: bool


def report(
    spec: ModelDeploymentSpec,
    plan: revisions.Plan,
    schedules: dict[str, scheduling.Schedule],
    out: Composed,
    observed_status: dict[str, Any],
) -> Report:
    """Status and conditions from the plan, the schedules and the composed replicas. Pure."""
    serving = plan.serving
    ready = out.ready[serving] if serving else 0
    status = _report_status(spec, plan, schedules, out, observed_status)
    warnings: list[str] = []
    scheduled_cond = _scheduled_condition(spec, plan, schedules)
    if not scheduled_cond.status:
        warnings.append(f"{scheduled_cond.reason}: {scheduled_cond.message}")
    # Ready only once every wanted replica is, and a revision has passed the gate
    xr_ready = ready >= spec.replicas and plan.stable is not None
    ready_cond = _ready_condition(spec, ready, out, serving)
    conds = [scheduled_cond, ready_cond]
    if ready_cond.reason == conditions.UNSCHEDULABLE:
        warnings.append(f"{ready_cond.reason}: {ready_cond.message}")
    warnings += _unschedulable_elsewhere(out, serving)
    if spec.canary is not None or plan.outcome is not None:
        conds.append(_canary_condition(plan))
    bound_cond = _bound_condition(schedules)
    conds.append(bound_cond)
    if not bound_cond.status:
        xr_ready = False
        if bound_cond.reason != binding.AWAITING_BINDING:
            warnings.append(f"{bound_cond.reason}: {bound_cond.message}")
    return Report(status, conds, warnings, xr_ready)


def _report_status(
    spec: ModelDeploymentSpec,
    plan: revisions.Plan,
    schedules: dict[str, scheduling.Schedule],
    out: Composed,
    observed_status: dict[str, Any],
) -> dict[str, Any]:
    """`status`: the serving revision's replicas, the placements, the revisions and `canary`."""
    serving = plan.serving
    serving_sched = schedules.get(serving) if serving else None
    total = serving_sched.count if serving_sched else 0
    ready = out.ready[serving] if serving else 0
    status: dict[str, Any] = {
        "replicas": {"total": total, "ready": ready},
        "placements": sorted(out.placements, key=lambda p: p["replica"]),
        "revisions": {k: v for k, v in (("stable", plan.stable), ("canary", plan.canary)) if v},
    }
    canary_status = _canary_status(spec, plan, schedules, observed_status)
    canary_status |= _under_test_readiness(plan, schedules, out)
    if canary_status:
        status["canary"] = canary_status
    return status


def _unschedulable_elsewhere(out: Composed, serving: str | None) -> list[str]:
    """A canary's replicas ReplicasReady does not count: what cannot be scheduled of them is
    still said, as a warning per revision."""
    return [
        f"{conditions.UNSCHEDULABLE}: revision {rev}: {_unschedulable(out.unschedulable[rev])}"
        for rev in sorted(r for r in out.unschedulable if r != serving and out.unschedulable[r])
    ]


def _ready_condition(
    spec: ModelDeploymentSpec, ready: int, out: Composed, serving: str | None
) -> xp.Condition:
    ready_message = f"{ready} of {spec.replicas} replicas ready"
    if out.degraded:
        ready_message += "; no endpoint while the cluster is degraded: " + ", ".join(out.degraded)
    if ready >= spec.replicas and not out.degraded:
        return conditions.available(conditions.REPLICAS_READY, ready_message)
    if out.degraded:
        return conditions.waiting(
            conditions.REPLICAS_READY, ready_message, conditions.CLUSTER_DEGRADED
        )
    if ready >= spec.replicas or serving is None:
        return conditions.waiting(conditions.REPLICAS_READY, ready_message)
    reason, why = _readiness(out, serving)
    return conditions.waiting(
        conditions.REPLICAS_READY, f"{ready_message}{'; ' if why else ''}{why}", reason=reason
    )


def _mark_replacements(
    sched: scheduling.Schedule,
    own: Mapping[str, dict[str, Any]],
    new: list[tuple[str, dict[str, Any]]],
) -> None:
    """The new replicas that replace held ones (those no replica replaces yet, lowest index
    first) carry `plnt.work/replaces`, so every later reconcile says where each failed over."""
    replaced = {_replaces(own[r.name]) for r in sched.kept if r.name in own}
    unreplaced = [r.name for r in sched.held if r.name not in replaced]
    for held, (_, obj) in zip(unreplaced, new, strict=False):
        obj["metadata"].setdefault("annotations", {})[rep.REPLACES] = held


def _replaces(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(rep.REPLACES) or "")


def _failover_condition(
    schedules: dict[str, scheduling.Schedule],
    out: Composed,
    degraded: list[failover.Degraded],
    *,
    failed: frozenset[str],
    now: float,
    after: float,
    serving: frozenset[str],
) -> xp.Condition:
    """ClustersHealthy: the replicas on degraded clusters, each cluster and why, and where their
    failover stands (failover.describe); else as `_health_condition`."""
    held = {r.name for s in schedules.values() for r in s.held}
    released = {r.name for s in schedules.values() for r in s.released if r.name in failed}
    replacements = {
        of: f"{name} on {cluster} ({'serving' if name in serving else 'starting'})"
        for name, cluster, of in out.replacing
    }
    reason, message = failover.describe(
        degraded, now, held=held, released=released, replacements=replacements, after=after
    )
    if not reason:
        return _health_condition(out)
    # failed over: what served on the degraded cluster serves elsewhere now
    return xp.Condition(
        conditions.CLUSTERS_HEALTHY, reason == failover.FAILED_OVER, reason, message
    )


def _health_condition(out: Composed) -> xp.Condition:
    """ClustersHealthy: which clusters the deployment's replicas are on are degraded, and why."""
    if not out.clusters_degraded:
        return xp.Condition(
            conditions.CLUSTERS_HEALTHY, True, conditions.HEALTHY,
            "every cluster the replicas are on answers and is Ready",
        )  # fmt: skip
    said = "; ".join(f"cluster {c}: {why}" for c, why in sorted(out.clusters_degraded.items()))
    return xp.Condition(
        conditions.CLUSTERS_HEALTHY, False, conditions.CLUSTER_DEGRADED,
        f"replicas {', '.join(out.degraded)} have no endpoint; {said}",
    )  # fmt: skip


def _readiness(out: Composed, rev: str) -> tuple[str, str]:
    """Why the not-ready replicas of a revision are not ready, from their WorkloadsReady
    reasons: Unschedulable (more urgent than PullingWeights: a pod that cannot be placed never
    stages anything), else PullingWeights while any stages its weights, else Starting when
    every one of them starts its engines, else Waiting; and what the message adds."""
    if out.unschedulable[rev]:
        return conditions.UNSCHEDULABLE, _unschedulable(out.unschedulable[rev])
    if out.pulling[rev]:
        return conditions.PULLING_WEIGHTS, "pulling weights: " + ", ".join(sorted(out.pulling[rev]))
    not_ready = out.composed[rev] - out.ready[rev]
    if not_ready > 0 and len(out.starting[rev]) == not_ready:
        return conditions.STARTING, "engines starting: " + ", ".join(sorted(out.starting[rev]))
    return conditions.WAITING, ""


def _under_test_readiness(
    plan: revisions.Plan, schedules: dict[str, scheduling.Schedule], out: Composed
) -> dict[str, Any]:
    """`status.canary.readyReplicas` and `.readiness` of the revision under test: what
    ReplicasReady says of the serving revision, for the one the gate waits for (a canary
    beside a stable revision, which ReplicasReady does not count)."""
    if plan.canary is None or plan.canary not in schedules:
        return {}
    sched = schedules[plan.canary]
    wanted = sched.count
    ready = out.ready[plan.canary]
    reason = conditions.AVAILABLE if ready >= wanted > 0 else _readiness(out, plan.canary)[0]
    return {"readyReplicas": ready, "readiness": reason}


# at most this many unschedulable replicas' messages in ReplicasReady; the rest are counted
UNSCHEDULABLE_SHOWN = 2


def _unschedulable(stuck: list[tuple[str, str]]) -> str:
    """The first replicas (by name) whose pods cannot be scheduled, each with its
    WorkloadsReady message, then how many more."""
    stuck = sorted(stuck)
    said = "; ".join(f"replica {r}: {m}" for r, m in stuck[:UNSCHEDULABLE_SHOWN])
    more = len(stuck) - UNSCHEDULABLE_SHOWN
    return f"{said}; and {more} more replica(s) cannot be scheduled" if more > 0 else said


def _bound_condition(schedules: dict[str, scheduling.Schedule]) -> xp.Condition:
    """ReplicasBound: has the binder committed every replica, and do they all still fit? New
    replicas are proposals until it has (docs/scheduling.md, "Binding")."""
    kept = sorted((r for s in schedules.values() for r in s.kept), key=lambda r: r.name)
    new = sum(len(s.placed) for s in schedules.values())
    refused = _refused(schedules)
    bound = [r for r in kept if r.state == binding.BOUND]
    waiting = [r.name for r in kept if r.state != binding.BOUND]
    total = len(kept) + new
    head = f"bound {len(bound)} of {total} replicas"
    over = _over_committed(head, bound)
    if over is not None:
        return over
    if refused:
        lost = "; ".join(f"{r.name} on {r.cluster}: {r.message}" for r in refused)
        return xp.Condition(
            binding.REPLICAS_BOUND,
            False,
            binding.BINDING_REFUSED,
            f"{head}; the binder refused (released, placed again where it fits): {lost}",
        )
    if waiting or new:
        names = ", ".join(waiting + ([f"{new} new"] if new else []))
        return xp.Condition(
            binding.REPLICAS_BOUND,
            False,
            binding.AWAITING_BINDING,
            f"{head}; awaiting the binder: {names}",
        )
    return xp.Condition(binding.REPLICAS_BOUND, True, binding.BOUND, head)


def _over_committed(head: str, bound: list[scheduling.PlacedReplica]) -> xp.Condition | None:
    """ReplicasBound False while a bound replica no longer fits its pool, else None."""
    over = [f"{r.name}: {r.over_committed}" for r in bound if r.over_committed]
    if not over:
        return None
    return xp.Condition(
        binding.REPLICAS_BOUND,
        False,
        binding.OVER_COMMITTED_REASON,
        f"{head}; over-committed (the pool shrank after they were bound): " + "; ".join(over),
    )


def _refused(schedules: dict[str, scheduling.Schedule]) -> list[scheduling.PlacedReplica]:
    """The replicas released because the binder refused them, by name."""
    released = (r for s in schedules.values() for r in s.released)
    return sorted((r for r in released if r.state == binding.REFUSED_STATE), key=lambda r: r.name)


@dataclasses.dataclass
class Composed:
    """What composing the replicas found: their placements, readiness, degraded ones."""

    placements: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    ready: Counter[str] = dataclasses.field(default_factory=Counter)  # by revision
    degraded: list[str] = dataclasses.field(default_factory=list)
    # the clusters of degraded replicas, with why each is degraded
    clusters_degraded: dict[str, str] = dataclasses.field(default_factory=dict)
    # (replica, its cluster, the degraded replica it replaces) of each failover replacement
    replacing: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    composed: Counter[str] = dataclasses.field(default_factory=Counter)  # by revision
    # by revision: not-ready replicas whose WorkloadsReady reason is PullingWeights
    pulling: defaultdict[str, list[str]] = dataclasses.field(
        default_factory=lambda: defaultdict(list)
    )
    # by revision: not-ready replicas whose WorkloadsReady reason is Starting
    starting: defaultdict[str, list[str]] = dataclasses.field(
        default_factory=lambda: defaultdict(list)
    )
    # by revision: (replica, its WorkloadsReady message) of not-ready replicas whose
    # WorkloadsReady reason is Unschedulable
    unschedulable: defaultdict[str, list[tuple[str, str]]] = dataclasses.field(
        default_factory=lambda: defaultdict(list)
    )

    def count(self, rev: str, replica: str, seen: dict[str, Any] | None, *, ready: bool) -> None:
        """Counts one composed replica of `rev`, and why it is not ready if it is not."""
        self.ready[rev] += ready
        self.composed[rev] += 1
        if ready:
            return
        workloads = xp.condition_of(seen, conditions.WORKLOADS_READY) or {}
        reason = workloads.get("reason")
        if reason == conditions.PULLING_WEIGHTS:
            self.pulling[rev].append(replica)
        elif reason == conditions.STARTING:
            self.starting[rev].append(replica)
        elif reason == conditions.UNSCHEDULABLE:
            self.unschedulable[rev].append((replica, str(workloads.get("message") or "")))


def _compose_replica(
    rsp: fnv1.RunFunctionResponse,
    out: Composed,
    inputs: Inputs,
    *,
    obj: dict[str, Any],
    rev: str,
) -> None:
    """One replica's ModelReplica and, on a Ready cluster with a gateway address, endpoint."""
    meta = obj["metadata"]
    seen = inputs.own.get(meta["name"])
    clusters, deployment, namespace = inputs.clusters, inputs.name, inputs.namespace
    replica, cluster_name = meta["name"], obj["spec"].get("clusterName", "")
    if _replaces(obj):
        out.replacing.append((replica, cluster_name, _replaces(obj)))
    cluster = clusters.get(cluster_name)
    routable = _routable(cluster)
    address = scheduling.url_host(cluster.gateway) if cluster and routable else None
    # a replica on a degraded cluster does not serve: its endpoint leaves the routes, and what
    # its ModelReplica last reported (provider-kubernetes' last look) is not counted
    out.count(rev, replica, seen, ready=xp.is_ready(seen) and routable)
    xp.compose(rsp, rep.resource_name(replica), obj, ready=xp.is_ready(seen))
    seen_endpoint = inputs.observed.get(rep.endpoint_resource_name(replica))
    # a failover replacement joins the routes once it is Ready (or already has its endpoint):
    # callers are not sent to a replica still staging weights while the held one is kept
    joining = bool(_replaces(obj)) and not xp.is_ready(seen) and seen_endpoint is None
    if routable and cluster is not None and address is not None:
        if not joining:
            endpoint = rep.model_endpoint(
                replica=replica,
                namespace=namespace,
                deployment=deployment,
                revision=rev,
                cluster=cluster_name,
                address=address,
            )
            xp.compose(
                rsp,
                rep.endpoint_resource_name(replica),
                endpoint,
                ready=xp.is_ready(seen_endpoint),
            )
    else:
        out.degraded.append(f"{replica} on {cluster_name}")
        out.clusters_degraded[cluster_name] = _why_degraded(cluster)
    out.placements.append(
        {
            "replica": replica,
            "cluster": cluster_name,
            "revision": rev,
            "engines": [{"name": e, "pool": pool} for e, pool in _engine_pools(obj)],
        }
    )


def _cluster_of(obj: dict[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("clusterName") or "")


def _routable(cluster: fleet_model.Cluster | None) -> bool:
    """Its replicas get an endpoint: the cluster is Ready and its gateway has an address."""
    return (
        cluster is not None
        and cluster.ready
        and bool(cluster.gateway)
        and scheduling.url_host(cluster.gateway) is not None
    )


def _serves(
    inputs: Inputs,
    replica: str,
    obj: dict[str, Any],
    cluster: fleet_model.Cluster | None,
) -> bool:
    """Ready and routed: its ModelReplica Ready, its cluster routable, its endpoint Ready."""
    endpoint = inputs.observed.get(rep.endpoint_resource_name(replica))
    return xp.is_ready(obj) and _routable(cluster) and xp.is_ready(endpoint)


def _why_degraded(cluster: fleet_model.Cluster | None) -> str:
    if cluster is None:
        return "not an InferenceCluster"
    if cluster.degraded is not None:
        return cluster.degraded.describe()
    return "not Ready" if not cluster.ready else "its gateway has no address"


def _engine_pools(obj: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for engine in (obj.get("spec") or {}).get("engines") or []:
        pools = [m.get("nodePoolName", "") for m in engine.get("members") or []]
        out.append((engine.get("name", ""), next((p for p in pools if p), "")))
    return out


def _canary_status(
    spec: ModelDeploymentSpec,
    plan: revisions.Plan,
    schedules: dict[str, scheduling.Schedule],
    observed_status: dict[str, Any],
) -> dict[str, Any]:
    """The run, the test in progress, and the gate's record for the current revision in this run
    (a verdict is kept so a rolled back revision is not tested again, nor a passed one)."""
    out: dict[str, Any] = {}
    if plan.run is not None:
        out["run"] = plan.run
    if plan.canary is not None and spec.canary is not None:
        sched = schedules[plan.canary]
        out |= {
            "revision": plan.canary,
            "trafficPercent": revisions.traffic_percent(plan, spec),
            "replicas": sched.count,
        }
    if plan.mode is not None:
        out["mode"] = MODES[plan.mode]
    gate = contracts.gate_at(observed_status)
    if plan.verdict is not None:
        out["gate"] = dict(plan.verdict)
        out.setdefault("revision", plan.verdict.get("revision"))
        # how the verdict's revision was tested, kept beside it once it is steady: a parent
        # tells a promoted new revision from one re-tested in place
        seen = observed_status.get("canary")
        if (
            "mode" not in out
            and isinstance(seen, dict)
            and seen.get("run") == plan.run
            and seen.get("revision") == out["revision"]
            and seen.get("mode") in contracts.MODES
        ):
            out["mode"] = seen["mode"]
    elif (
        isinstance(gate, dict)
        and gate.get("revision") == plan.current
        and gate.get("run") == plan.run
    ):
        out["gate"] = gate
    return out


def _scheduled_condition(
    spec: ModelDeploymentSpec, plan: revisions.Plan, schedules: dict[str, scheduling.Schedule]
) -> xp.Condition:
    """ReplicasScheduled for the revision being placed (the current one, else the stable one)."""
    if not schedules:  # a first rollout failed the gate: nothing runs
        return xp.Condition(
            conditions.REPLICAS_SCHEDULED,
            spec.replicas == 0,
            GATE_FAILED,
            f"nothing is placed: revision {plan.current} failed the latency gate and there is no "
            "earlier revision to run; a spec change starts a new rollout",
        )
    scheduled = schedules[plan.current if plan.current in schedules else plan.stable or ""]
    message = scheduled.message
    if plan.mode == revisions.BESIDE_STABLE and plan.canary is not None and plan.stable:
        stable_kept = len(schedules[plan.stable].kept)
        message = f"canary: {message}; stable: {stable_kept} of {spec.replicas} kept"
    return xp.Condition(
        conditions.REPLICAS_SCHEDULED, scheduled.scheduled, scheduled.reason, message
    )


def _canary_condition(plan: revisions.Plan) -> xp.Condition:
    run = f" in run {plan.run}" if plan.run else ""
    if plan.outcome == conditions.ROLLED_BACK and plan.verdict is not None:
        return xp.Condition(
            conditions.CANARY,
            False,
            conditions.ROLLED_BACK,
            revisions.rollback_message(plan.verdict),
        )
    if plan.outcome == conditions.FAILED:
        return xp.Condition(
            conditions.CANARY, False, conditions.FAILED, revisions.failed_message(plan)
        )
    if plan.outcome == conditions.PROMOTED:
        how = {
            revisions.FIRST_ROLLOUT: f"passed the latency gate{run}; it takes all traffic",
            revisions.BESIDE_STABLE: f"passed the latency gate{run} and is promoted",
            revisions.IN_PLACE: f"passed the latency gate{run} in place; it serves on",
        }[plan.mode or revisions.BESIDE_STABLE]
        return xp.Condition(
            conditions.CANARY, True, conditions.PROMOTED, f"revision {plan.current} {how}"
        )
    if plan.outcome == conditions.AWAITING_VERDICT:
        waiting = {
            revisions.FIRST_ROLLOUT: (
                f"first revision {plan.canary} takes no traffic until the latency gate passes it"
            ),
            revisions.IN_PLACE: (
                f"revision {plan.canary} serves unchanged while the latency gate re-tests it{run}"
            ),
        }.get(
            plan.mode or "",
            f"canary revision {plan.canary} beside stable {plan.stable}; awaiting the latency gate",
        )
        return xp.Condition(conditions.CANARY, False, conditions.AWAITING_VERDICT, waiting)
    return xp.Condition(
        conditions.CANARY, True, conditions.STABLE, f"revision {plan.stable} serves all traffic"
    )
