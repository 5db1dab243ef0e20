"""ModelReplica: one replica of a model rendered onto its pinned InferenceCluster.

Reads the ModelReplica, the InferenceCluster named by ``spec.clusterName`` (required
resource: its ``status.providerConfigRef.name`` reaches the cluster, ``status.gateway.address``
makes the endpoint) and, with ``modelCacheRef``, the ModelCache (its ``status.pvcName``).
Composes provider-kubernetes Objects in the replica's namespace on that cluster:
ResourceClaimTemplates and a Deployment or LeaderWorkerSet per engine (workloads.py), and the
serving surface (serving.py): in both serving modes an InferencePool over the serving pods, its
endpoint picker and an HTTPRoute. What every replica of the namespace shares on the cluster (the
Namespace, the picker's ServiceAccount and RoleBinding) the InferenceCluster composes once; a
replica that has composed nothing waits until its cluster lists its namespace in
``status.namespaces`` (plnt.workload_cluster).

Capacity and tenancy: only a replica the binder has committed composes anything. The function
requires its cluster's ledger (the ConfigMap `plnt-ledger-<cluster>` in plnt-system, which only
the binder writes) and the quota ledgers, and renders only when the ledger holds an entry for
exactly this namespace, name, uid and digest and every quota covering the namespace reserves it
(`plnt.capacity.binding.verify`); the replica's own annotations never bind it. Until then, or when
refused, nothing is composed and the `Bound` condition says why (docs/scheduler.md, "Binding");
a binding annotation the ledger does not back is named forged, replayed or stale, with a Warning
(docs/tenancy.md). That is what makes the binder's ledger, not each reconcile's snapshot or
what a tenant writes, decide what runs. A ledger that cannot be read decides nothing: `Bound` is
Unknown naming the ConfigMap and what is wrong with it (with a Warning), a replica that has
composed resources keeps every one exactly as observed (Crossplane deletes what a function stops
returning), and one that never rendered stays unrendered (docs/model-replica.md).

Choices: until the cluster is known and has a ProviderConfig nothing is composed (an Object
without a reachable cluster could never be deleted); a workload Object is ready only when
its observed status shows every copy available, and ``WorkloadsReady`` says which engine
waits for what; with a ModelCache that is not Ready yet, workloads wait (unless they already
run) so engines never start on half-staged weights. Without a cache, a member whose template
annotations name weights (``plnt.work/weights-uri``) stages them with an init container
(staging.py). An observed Deployment or LeaderWorkerSet cannot tell a pod the kube-scheduler
cannot place from a downloading init container or an engine still loading (all are "not
available"), so while an engine's workload has pods and fewer available copies than wanted, an
ObservedObjectCollection watches its pods (pods.py): ``WorkloadsReady`` is False with reason
``Unschedulable`` and the scheduler's message while a pod cannot be scheduled (with a Warning);
else, for an engine that stages weights and has no available copy, reason ``PullingWeights``
until every pod's weights init container has finished; then reason ``Starting`` while the
engine loads (an engine that stages nothing is ``Starting`` once its pods are on nodes).
Reason ``Waiting`` is left for an engine that has no pods yet or waits for its ModelCache: so
the WorkflowRun above tells the weights' staging (PullingWeights) from the engines' start
(Deploying). The pods' Objects are required resources, and a change to one does not call the
function (a composed resource's does), so while any engine's pods are watched it asks to be
called again within ``PODS_TTL_S`` rather than the SDK's 60 s: a pod that turns unschedulable
(its node gone, say) is reported within seconds, and its deployment's failover clock starts
then (docs/scheduler.md, "Capacity follows the nodes"). At rest (every copy available, everything
Ready, an endpoint) it asks for ``REST_TTL_S`` instead: what changes a serving replica (its
composed resources, the binder's annotations, a cluster's health nudge) calls it regardless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import pods, serving, staging, workloads
from functions.model_replica.replica import (
    OBJECT_API_VERSION,
    Replica,
    kubernetes_object,
    observed_manifest,
)
from plnt import conditions, contracts, labels, pod_policy, weights, workload_cluster, xp
from plnt.capacity import binding, ledger, ledger_parse
from plnt.models.model_replica import ModelReplicaSpec, ReplicaEngine, check_engines

CACHE_REQUIREMENT = "model-cache"
LEDGER_REQUIREMENT = "ledger"
NOTHING_COMPOSED = "nothing is composed"


@dataclass(frozen=True)
class Inputs:
    """What the replica renders from: the XR, its cluster, cache and ledgers, what it composed."""

    xr: dict[str, Any]
    spec: ModelReplicaSpec
    namespace: str
    cluster: dict[str, Any] | None  # None: no such InferenceCluster
    cache: dict[str, Any] | None  # the ModelCache of modelCacheRef, if any
    ledgers: list[dict[str, Any]]  # its cluster's ledger (none or one)
    quota_ledgers: list[dict[str, Any]]
    observed: dict[str, Any]  # its composed resources as observed


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Inputs, then the decisions (pod policy, binding, cluster), then the desired resources,
    then status."""
    rsp = xp.respond(req)
    xr = xp.composite(req)
    spec = xp.parse(ModelReplicaSpec, xr.get("spec") or {}, "spec")
    check_engines(spec.engines, spec.serving)
    serving.check_ports(spec)
    staging.check(spec)
    refused = pod_policy.refusal(spec.engines, spec.serving)
    if refused:  # whoever wrote the replica, and whatever the binder committed
        hold(rsp, spec, f"{refused}; {NOTHING_COMPOSED}", reason=conditions.TEMPLATE_NOT_PERMITTED)
        xp.warning(rsp, f"{conditions.TEMPLATE_NOT_PERMITTED}: {refused}")
        return rsp
    inputs = read_inputs(req, rsp, xr, spec)
    if inputs is None:
        return rsp  # Crossplane calls again with the required resources
    if not renders(rsp, inputs):
        return rsp
    missing = cluster_problem(spec.cluster_name, inputs.cluster)
    if missing:
        hold(rsp, spec, missing)
        return rsp
    assert inputs.cluster is not None
    unprepared = namespace_problem(inputs)
    if unprepared:
        hold(rsp, spec, unprepared)
        rsp.meta.ttl.FromMilliseconds(int(NAMESPACE_TTL_S * 1000))
        return rsp
    replica, cache_wait = replica_of(rsp, inputs, inputs.cluster.get("status") or {})
    progress = compose_all(req, rsp, replica, inputs.observed, cache_wait)
    write_status(rsp, replica, inputs.cluster.get("status") or {}, progress)
    if at_rest(rsp, progress):
        rsp.meta.ttl.FromMilliseconds(int(REST_TTL_S * 1000))
    return rsp


def read_inputs(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    xr: dict[str, Any],
    spec: ModelReplicaSpec,
) -> Inputs | None:
    """Requires the cluster, the ModelCache (with modelCacheRef) and the ledgers; None until
    Crossplane has answered every requirement."""
    namespace = (xr.get("metadata") or {}).get("namespace") or "default"
    clusters = workload_cluster.pinned_cluster(req, rsp, spec.cluster_name)
    caches: list[dict[str, Any]] | None = []
    if spec.model_cache_ref:
        caches = xp.require(
            req,
            rsp,
            CACHE_REQUIREMENT,
            contracts.MODELPLANE_API_VERSION,
            "ModelCache",
            match_name=spec.model_cache_ref.name,
            namespace=namespace,
        )
    ledgers = xp.require(
        req,
        rsp,
        LEDGER_REQUIREMENT,
        "v1",
        "ConfigMap",
        match_name=ledger.ledger_name(spec.cluster_name),
        namespace=ledger.LEDGER_NAMESPACE,
    )
    quota_ledgers = ledger_parse.require_quota_ledgers(req, rsp)
    if clusters is None or caches is None or ledgers is None or quota_ledgers is None:
        return None
    return Inputs(
        xr=xr,
        spec=spec,
        namespace=namespace,
        cluster=clusters[0] if clusters else None,
        cache=caches[0] if caches else None,
        ledgers=ledgers,
        quota_ledgers=quota_ledgers,
        observed=xp.observed_resources(req),
    )


def renders(rsp: fnv1.RunFunctionResponse, inputs: Inputs) -> bool:
    """Whether the binder's ledger binds this replica (`plnt.capacity.binding.verify`), said as the
    Bound condition. Unbound, nothing is composed; bound unknown (a ledger that does not
    read), what it composed before is kept exactly as observed."""
    spec = inputs.spec
    rendered = own_composed(inputs.observed)
    quotas, unreadable_quotas = ledger_parse.quota_ledgers_in(inputs.quota_ledgers)
    bound = binding.verify(
        inputs.xr,
        cluster_ledger(inputs.ledgers, spec.cluster_name, rendered=bool(rendered)),
        quotas,
        unreadable_quotas,
    )
    condition = bound_condition(bound, spec.cluster_name, kept=bool(rendered))
    xp.set_conditions(rsp, condition)
    if bound.state == binding.UNBACKED:
        xp.warning(rsp, f"binding not honoured ({bound.reason}): {bound.message}")
    if bound.state == binding.UNKNOWN:
        xp.warning(rsp, f"binding unknown ({bound.reason}): {condition.message}")
        if rendered:
            keep_as_observed(rsp, spec, inputs.xr, rendered)
            return False
    if bound.state != binding.BOUND:
        hold(rsp, spec, condition.message, reason=binding_reason(bound))
        return False
    return True


def replica_of(
    rsp: fnv1.RunFunctionResponse, inputs: Inputs, cluster_status: dict[str, Any]
) -> tuple[Replica, str | None]:
    """The replica as its builders see it, and what its ModelCache keeps waiting, if anything;
    warns of pools the cluster does not report and of cache settings the spec overrides."""
    spec, meta = inputs.spec, inputs.xr.get("metadata") or {}
    pvc_name, cache_wait = model_cache(spec, inputs.cache, inputs.namespace)
    replica = Replica(
        name=meta["name"],
        namespace=inputs.namespace,
        spec=spec,
        provider_config=cluster_status["providerConfigRef"]["name"],
        deployment=(meta.get("labels") or {}).get(labels.DEPLOYMENT),
        pvc_name=pvc_name,
    )
    for warning in [*unknown_pools(spec, cluster_status), *cache_overrides(spec)]:
        xp.warning(rsp, warning)
    return replica, cache_wait


def compose_all(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    replica: Replica,
    observed: dict[str, Any],
    cache_wait: str | None,
) -> list[EngineProgress]:
    """Desired resources: every engine's workload, the serving surface."""
    progress = [
        compose_engine(req, rsp, replica, observed, engine, cache_wait=cache_wait)
        for engine in replica.spec.engines
    ]
    for key, manifest in serving.surface(replica).items():
        compose(rsp, replica, observed, f"serving-{key}", manifest)
    if any(pods.resource_name(e) in rsp.desired.resources for e in replica.spec.engines):
        rsp.meta.ttl.FromMilliseconds(int(PODS_TTL_S * 1000))  # the pods' Objects, read again
    return progress


def write_status(
    rsp: fnv1.RunFunctionResponse,
    replica: Replica,
    cluster_status: dict[str, Any],
    progress: list[EngineProgress],
) -> None:
    """The endpoint, each engine's status, WorkloadsReady, and a Warning per engine whose pods
    cannot be scheduled (Crossplane makes a Warning result an event on the XR)."""
    xp.set_status(
        rsp,
        {
            "endpoint": serving.endpoint(
                replica, (cluster_status.get("gateway") or {}).get("address")
            ),
            "engines": [p.status for p in progress],
        },
    )
    xp.set_conditions(rsp, workloads_condition(progress))
    for p in progress:
        if p.unschedulable and p.wait:
            xp.warning(rsp, p.wait)


# How soon the function asks to be called again while it watches an engine's pods
PODS_TTL_S = 10.0
# ... and once everything it composed is Ready and it has an endpoint: what changes then calls it
# anyway (its composed resources, the binder's annotations on it, a cluster's health nudge), so
# the reconcile that only re-applies an unchanged desired state comes rarely
REST_TTL_S = 300.0


def at_rest(rsp: fnv1.RunFunctionResponse, progress: list[EngineProgress]) -> bool:
    """Every engine's copies available, every composed resource Ready, an endpoint."""
    status = xp.to_dict(rsp.desired.composite.resource).get("status") or {}
    return (
        bool(status.get("endpoint"))
        and not any(p.wait for p in progress)
        and all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())
    )


@dataclass(frozen=True)
class EngineProgress:
    """Where one engine stands: its status entry and, while not every copy is available, what
    it waits for (downloading its weights: `pulling`; its pods exist and, weights staged, the
    engine starts: `starting`; a pod the kube-scheduler cannot place: `unschedulable`)."""

    status: dict[str, Any]
    wait: str | None = None
    pulling: bool = False
    starting: bool = False
    unschedulable: bool = False


def compose_engine(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    replica: Replica,
    observed: dict[str, Any],
    engine: ReplicaEngine,
    *,
    cache_wait: str | None,
) -> EngineProgress:
    """One engine's ResourceClaimTemplates and workload (and, while it has pods but not every
    copy available, the collection that watches its pods); what it waits for."""
    for member in engine.members:
        rct = workloads.resource_claim_template(replica, engine, member)
        if rct:
            compose(rsp, replica, observed, f"rct-{engine.name}-{member.role.lower()}", rct)
    name = f"workload-{engine.name}"
    seen = observed_manifest(observed.get(name))
    available = workloads.available_copies(seen)
    status = {"name": engine.name, "copies": engine.copies, "availableCopies": available}
    if cache_wait and name not in observed:
        return EngineProgress(status, f"engine {engine.name} waits for {cache_wait}")
    workload = workloads.workload(replica, engine)
    compose(rsp, replica, observed, name, workload)
    stage = staging.stages(replica.spec, engine)
    members: list[dict[str, Any]] | None = None
    if available < engine.copies and workloads.created_copies(seen) > 0:
        # ready as composed: it only observes, and goes once every copy is available
        collection = pods.collection(replica, engine)
        xp.compose(rsp, pods.resource_name(engine), collection, ready=True)
        members = xp.require(
            req,
            rsp,
            pods.resource_name(engine),
            OBJECT_API_VERSION,
            "Object",
            match_labels={pods.MEMBERSHIP_LABEL: pods.collection_name(replica, engine)},
            namespace=replica.namespace,
        )
        stuck = pods.unschedulable(members)
        if stuck:
            return EngineProgress(
                status,
                f"engine {engine.name}: pod {stuck.pod} cannot be scheduled: {stuck.message}",
                unschedulable=True,
            )
    created = workloads.created_copies(seen) > 0
    if stage and available == 0 and created:
        staged = pods.weights_staged(members)
        return EngineProgress(
            status,
            staging_wait(engine, workload, stage, staged),
            pulling=not staged,
            starting=staged,
        )
    if available < engine.copies:
        where = f"its {workload['kind']} {workload['metadata']['name']}"
        copies = f"{available}/{engine.copies} copies available"
        if created and pods.placed(members):
            # placed pods with nothing to stage (or a ModelCache's weights): the engine starts
            return EngineProgress(
                status,
                f"engine {engine.name} is starting: {where} has pods on nodes, {copies}",
                starting=True,
            )
        return EngineProgress(status, f"engine {engine.name} waits for {where}: {copies}")
    return EngineProgress(status)


def cache_overrides(spec: ModelReplicaSpec) -> list[str]:
    """A warning when a ModelCache makes engines' weights annotations moot."""
    overridden = [e.name for e in spec.engines if any(staging.of(e, m) for m in e.members)]
    if not (spec.model_cache_ref and overridden):
        return []
    return [
        f"modelCacheRef wins over the {labels.WEIGHTS_URI} annotation of engine(s) "
        f"{', '.join(overridden)}: no weights init container; the cache's PVC is mounted "
        f"at {workloads.MODEL_CACHE_MOUNT}"
    ]


def staging_wait(
    engine: ReplicaEngine, workload: dict[str, Any], stage: staging.Staging, staged: bool
) -> str:
    """Why an engine whose pods exist has no available copy while its weights are staged:
    still downloading (not `staged`), or loading what its init container staged."""
    where = f"its {workload['kind']} {workload['metadata']['name']} has pods"
    if staged:
        return (
            f"engine {engine.name} is loading its weights (staged into {stage.path}): "
            f"{where}, 0/{engine.copies} copies available"
        )
    return (
        f"engine {engine.name} stages its weights from {weights.display(stage.uri)} "
        f"into {stage.path} before it starts: {where}, 0/{engine.copies} copies available"
    )


def workloads_condition(progress: list[EngineProgress]) -> xp.Condition:
    """WorkloadsReady: every copy available, else what each engine waits for (Unschedulable
    while the kube-scheduler cannot place a pod, else PullingWeights while any downloads its
    weights, else Starting when every engine that waits has pods whose engine starts, else
    Waiting: an engine has no pods yet, or waits for its ModelCache)."""
    waits = [p.wait for p in progress if p.wait]
    if waits:
        reason = conditions.WAITING
        if any(p.unschedulable for p in progress):
            reason = conditions.UNSCHEDULABLE
        elif any(p.pulling for p in progress):
            reason = conditions.PULLING_WEIGHTS
        elif all(p.starting for p in progress if p.wait):
            reason = conditions.STARTING
        return conditions.waiting(conditions.WORKLOADS_READY, "; ".join(waits), reason=reason)
    return conditions.available(
        conditions.WORKLOADS_READY, f"every copy of {len(progress)} engine(s) is available"
    )


def cluster_ledger(
    configmaps: list[dict[str, Any]], cluster: str, *, rendered: bool
) -> ledger.Ledger | ledger_parse.UnreadableLedgerError | None:
    """Its cluster's ledger, or why it cannot be read. None when there is none and the replica
    never rendered: a cluster the binder has committed nothing to has no ledger yet. Once the
    replica rendered, a commit existed, and a missing ledger is lost state, not an empty one."""
    try:
        return ledger_parse.cluster_ledger_of(configmaps, cluster)
    except ledger_parse.UnreadableLedgerError as err:
        if err.reason == ledger_parse.LEDGER_MISSING and not rendered:
            return None
        return err


# How soon the function asks to be called again while its cluster prepares its namespace (the
# InferenceCluster's status changing does not call it)
NAMESPACE_TTL_S = 5.0


def namespace_problem(inputs: Inputs) -> str | None:
    """What a replica that has composed nothing yet waits for while its cluster has not put its
    namespace's shared objects in place (`plnt.workload_cluster`); None once it has, and always
    for a replica that already composed: a status that lags never takes a replica down."""
    assert inputs.cluster is not None
    status = inputs.cluster.get("status") or {}
    if own_composed(inputs.observed):
        return None
    if inputs.namespace in workload_cluster.prepared_namespaces(status):
        return None
    return (
        f"namespace {inputs.namespace} is not prepared on InferenceCluster "
        f"{inputs.spec.cluster_name} yet (the endpoint picker's ServiceAccount and RoleBinding)"
    )


def cluster_problem(name: str, cluster: dict[str, Any] | None) -> str | None:
    """Why the pinned cluster cannot be reached yet, or None when it can."""
    if cluster is None:
        return f"InferenceCluster {name} not found"
    ref = ((cluster.get("status") or {}).get("providerConfigRef") or {}).get("name")
    if not ref:
        return f"InferenceCluster {name} has no providerConfigRef yet"
    return None


def binding_reason(state: binding.State) -> str:
    if state.state in (binding.UNBACKED, binding.UNKNOWN):
        return state.reason
    if state.state == binding.REFUSED_STATE:
        return binding.BINDING_REFUSED
    return binding.AWAITING_BINDING if state.state == binding.PENDING else binding.BOUND


def bound_condition(state: binding.State, cluster: str, *, kept: bool = False) -> xp.Condition:
    """Bound: True, False with the binder's or the ledger's answer, or Unknown while a ledger
    cannot be read (`kept`: the replica's composed resources are kept as they are meanwhile)."""
    if state.state == binding.UNKNOWN:
        meanwhile = (
            "every composed resource is kept as it is until it can be read"
            if kept
            else "nothing is composed until it can be read"
        )
        return xp.Condition(
            conditions.BOUND,
            None,
            state.reason,
            f"cannot tell whether its devices are committed on cluster {cluster}: "
            f"{state.message}; {meanwhile}",
        )
    if state.state == binding.BOUND:
        message = f"its devices are committed on cluster {cluster}"
        if state.over_committed:
            message += f"; over-committed since: {state.over_committed}"
        return xp.Condition(conditions.BOUND, True, binding.BOUND, message)
    if state.state == binding.REFUSED_STATE:
        return xp.Condition(
            conditions.BOUND,
            False,
            binding.BINDING_REFUSED,
            f"the binder refused it: {state.message}",
        )
    if state.state == binding.UNBACKED:
        return xp.Condition(
            conditions.BOUND,
            False,
            state.reason,
            f"not bound: {state.message}; only the binder's ledger binds a replica",
        )
    return xp.Condition(
        conditions.BOUND,
        False,
        binding.AWAITING_BINDING,
        state.message or "awaiting the binder (plnt reconcile --bind) to commit its devices",
    )


def hold(
    rsp: fnv1.RunFunctionResponse,
    spec: ModelReplicaSpec,
    why: str,
    reason: str = conditions.MISSING_DEPENDENCY,
) -> None:
    """Composes nothing, keeps the replica not Ready, and says why (`why` ending in "nothing is
    composed" is said as it is; anything else is something awaited)."""
    xp.set_status(
        rsp,
        {
            "endpoint": "",
            "engines": [
                {"name": e.name, "copies": e.copies, "availableCopies": 0} for e in spec.engines
            ],
        },
    )
    xp.set_conditions(
        rsp,
        conditions.waiting(
            conditions.WORKLOADS_READY,
            why if why.endswith(NOTHING_COMPOSED) else f"{why}: {NOTHING_COMPOSED} until it is",
            reason=reason,
        ),
    )
    xp.set_composite_ready(rsp, False)


COMPOSED_KINDS = {(OBJECT_API_VERSION, "Object"), (OBJECT_API_VERSION, "ObservedObjectCollection")}


def own_composed(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The observed composed resources of the kinds this function composes: evidence that the
    replica rendered, and all it may keep while its ledger cannot be read (an object of any
    other kind under a composed name is not one it made, and is never applied again)."""
    return {
        name: seen
        for name, seen in observed.items()
        if (seen.get("apiVersion"), seen.get("kind")) in COMPOSED_KINDS
    }


def keep_as_observed(
    rsp: fnv1.RunFunctionResponse,
    spec: ModelReplicaSpec,
    xr: dict[str, Any],
    observed: dict[str, dict[str, Any]],
) -> None:
    """Desires every observed composed resource again exactly as it is (what the function owns
    of it: apiVersion, kind, name and spec; never rebuilt from the current spec, which may ask
    for what nothing committed), ready as observed. Crossplane deletes what a function stops
    returning: a ledger that cannot be read must not take down what serves. The status keeps
    the endpoint and reports the copies the observed workloads have available."""
    for name, seen in observed.items():
        xp.compose(rsp, name, kept(seen), ready=kept_ready(seen))
    engines = []
    waits = []
    for engine in spec.engines:
        seen = observed_manifest(observed.get(f"workload-{engine.name}"))
        available = workloads.available_copies(seen)
        engines.append({"name": engine.name, "copies": engine.copies, "availableCopies": available})
        if available < engine.copies:
            waits.append(f"engine {engine.name}: {available}/{engine.copies} copies available")
    xp.set_status(
        rsp,
        {"endpoint": (xr.get("status") or {}).get("endpoint") or "", "engines": engines},
    )
    if waits:
        xp.set_conditions(
            rsp,
            conditions.waiting(
                conditions.WORKLOADS_READY,
                f"{'; '.join(waits)} (kept as they are while its ledger cannot be read)",
            ),
        )
    else:
        xp.set_conditions(
            rsp,
            conditions.available(
                conditions.WORKLOADS_READY,
                f"every copy of {len(spec.engines)} engine(s) is available",
            ),
        )


def kept(seen: dict[str, Any]) -> dict[str, Any]:
    """An observed composed resource as the function desires it to stay: unchanged."""
    out: dict[str, Any] = {"apiVersion": seen.get("apiVersion"), "kind": seen.get("kind")}
    name = (seen.get("metadata") or {}).get("name")
    if name:
        out["metadata"] = {"name": name}
    out["spec"] = seen.get("spec") or {}
    return out


def kept_ready(seen: dict[str, Any]) -> bool:
    """Ready as when it was composed: an Object by its manifest's kind (workloads by their
    available copies), anything else (the pods' ObservedObjectCollection) ready as composed."""
    if seen.get("kind") != "Object":
        return True
    return object_ready(
        ((seen.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}, seen
    )


def model_cache(
    spec: ModelReplicaSpec, cache: dict[str, Any] | None, namespace: str
) -> tuple[str | None, str | None]:
    """(PVC to mount, what workloads wait for) for the replica's modelCacheRef."""
    if spec.model_cache_ref is None:
        return None, None
    name = spec.model_cache_ref.name
    if cache is None:
        return None, f"ModelCache {name} (not found in namespace {namespace})"
    cache_cluster = (cache.get("spec") or {}).get("clusterName")
    if cache_cluster != spec.cluster_name:
        return (
            None,
            f"ModelCache {name} (it stages onto cluster {cache_cluster}, not {spec.cluster_name})",
        )
    pvc = (cache.get("status") or {}).get("pvcName")
    if not pvc:
        return None, f"ModelCache {name} (no PVC yet)"
    if not xp.is_ready(cache):
        return pvc, f"ModelCache {name} (weights still staging)"
    return pvc, None


def unknown_pools(spec: ModelReplicaSpec, cluster_status: dict[str, Any]) -> list[str]:
    pools = {p.get("name") for p in cluster_status.get("pools") or []}
    if not pools:
        return []
    return [
        f"engine {engine.name}: node pool {member.node_pool_name} is not among the cluster's pools"
        for engine in spec.engines
        for member in engine.members
        if member.node_pool_name not in pools
    ]


def compose(
    rsp: fnv1.RunFunctionResponse,
    replica: Replica,
    observed: dict[str, dict[str, Any]],
    name: str,
    manifest: dict[str, Any],
    *,
    management_policies: list[str] | None = None,
) -> None:
    """Composes ``manifest`` as an Object, ready only when the cluster shows it ready. A
    workload's Object watches it (`spec.watch`): its status says when copies become available,
    and provider-kubernetes, started with --enable-watches, reads it back on each change rather
    than at its next poll. Other Objects are ready once applied and are only polled."""
    obj = kubernetes_object(replica, manifest)
    if manifest.get("kind") in workloads.AVAILABLE_COPIES:
        obj["spec"]["watch"] = True
    if management_policies:
        obj["spec"]["managementPolicies"] = management_policies
    xp.compose(rsp, name, obj, ready=object_ready(manifest, observed.get(name)))


def object_ready(manifest: dict[str, Any], seen: dict[str, Any] | None) -> bool:
    """Workloads: every copy available in the observed status; anything else: Object Ready."""
    if manifest.get("kind") in workloads.AVAILABLE_COPIES:
        wanted = int((manifest.get("spec") or {}).get("replicas", 1))
        return seen is not None and workloads.available_copies(observed_manifest(seen)) >= wanted
    return xp.is_ready(seen)
