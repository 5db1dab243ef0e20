"""ModelService (modelplane.ai/v1alpha1): one stable, weighted route over ModelEndpoints.

Reads the ModelService, the ModelEndpoints in its namespace that each ``spec.endpoints[]``
selector matches, and the ModelDeployments those endpoints belong to (label
``modelplane.ai/deployment``), for their canary revision and ``canary.trafficPercent``.
Composes, in its own namespace, one Gateway API HTTPRoute on the control-plane Gateway
(``spec.gatewayRef``, default ``plnt-system/plnt-gateway``) that matches the path prefix
``spec.path`` (default ``/<namespace>/<name>``) and splits traffic by weight over one
backend per endpoint (backends.py says how endpoints outside the cluster are reached).

Design choices:
- Weights are integers summing to 1000 per ModelService, by largest remainder (weights.py),
  so ``status.weights`` and the route agree exactly and nothing flaps between reconciles.
- An endpoint of a degraded replica is simply absent: ModelDeployment drops it, the
  selector no longer matches it, and its share goes to the others.
- Endpoints of a ModelDeployment without a stable revision get no traffic: its first
  revision takes none until the canary gate passes it.
- ``status.url`` is ``http://<host><path>``, the host being ``spec.hostnames[0]`` or the
  Gateway's first status address.
- An endpoint with a malformed spec, or whose target the platform's gateway may not be sent to
  (plnt.targets, the check ModelEndpoint makes too: inside the platform, or another
  namespace's replicas without an InferenceGrant), gets no traffic and a warning instead of
  failing the service.
- The route is a claim on the shared Gateway's traffic, so it is composed only when the
  platform granted it (plnt.routes: a path under ``/<namespace>/`` or a granted prefix, granted
  hostnames, the default or a granted Gateway; InferenceGrants are required) and no HTTPRoute
  of another namespace (every HTTPRoute is required) owns traffic it overlaps. Otherwise
  nothing is composed and ``Routed`` is False with reason PathNotPermitted,
  HostnameNotPermitted, GatewayNotPermitted or RouteConflict, naming what is in the way.
- With ``spec.service`` it also composes the in-cluster endpoint (in_cluster.py): a Service on
  port 8000 whose EndpointSlice holds the Gateway's address, and a route matching the Service's
  in-cluster names with the same backends; ``status.endpoint`` is
  ``<service>.<namespace>.svc.cluster.local:8000``.
- The control-plane Gateway is a prerequisite plnt does not create (it is shared by every
  ModelService, and its class is the platform's choice). While it is missing, or does not
  accept the route, ``Routed`` is False and names it, so whoever waits on the service (a
  WorkflowRun at Promoting) can say what is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_service import backends, in_cluster, weights
from plnt import conditions, contracts, grants, labels, routes, xp
from plnt import targets as plnt_targets
from plnt.models.model_endpoint import ModelEndpointSpec
from plnt.models.model_service import ModelServiceSpec

ROUTE = "route"
# While a deployment routed here rolls out (it has a canary revision, or a canary run in its spec
# it has not taken up yet), its endpoints come and go (the canary's appear, the gate promotes or
# rolls it back) and all of it is read here as required resources, which Crossplane does not
# watch: ask to be called again this soon, so the canary takes its share while it is
# smoke-tested, not a 60 s TTL later (by then a fast gate has already promoted it, and it never
# took traffic as a canary; seen on a live Crossplane).
CANARY_TTL_S = 1.0
NOT_ACCEPTED = "NotAccepted"  # Routed reason: the Gateway refuses the route
ENDPOINTS_REFUSED = "EndpointsRefused"  # Routed reason: endpoints exist, none may get traffic
ROUTES_REQUIREMENT = "httproutes"  # every HTTPRoute, for overlaps with other namespaces' routes


Existing = tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]


@dataclass(frozen=True)
class Inputs:
    """What the route is made of: the XR, the grant, the endpoints that may take traffic, the
    deployments they belong to, the Gateway."""

    meta: dict[str, Any]
    spec: ModelServiceSpec
    gateway: dict[str, str]  # the Gateway's name and namespace
    grant: grants.Grant
    selected: list[list[dict[str, Any]]]  # per spec.endpoints[] group, its endpoints
    targets: dict[str, tuple[str, str | None]]  # (URL, rewrite) per endpoint name
    refused: dict[str, str]  # why each refused endpoint was refused
    endpoints: dict[str, dict[str, Any]]  # those that may take traffic, by name
    deployments: dict[str, dict[str, Any]]
    held: list[str]  # endpoints of revisions the canary gate has not passed yet
    gateways: list[dict[str, Any]] | None

    @property
    def name(self) -> str:
        return str(self.meta.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace", ""))


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Inputs, then the decisions (the weights, whether the platform grants the route), then
    the desired resources, then status."""
    rsp = xp.respond(req)
    inputs = read_inputs(req, rsp)
    spec, namespace, name = inputs.spec, inputs.namespace, inputs.name
    integers = decide_weights(rsp, inputs)
    path = spec.route_path(namespace, name)
    seen = xp.observed_resources(req)
    existing = in_cluster.require(req, rsp, spec.service.name, namespace) if spec.service else None
    refusal = claim_refusal(
        req, rsp, spec, namespace=namespace, name=name, path=path, grant=inputs.grant,
        observed_route=seen.get(ROUTE),
    )  # fmt: skip
    if refusal is not None:
        return not_composed(rsp, refusal, path)
    refs = compose_route(rsp, inputs, integers, path, seen)
    endpoint = None
    if spec.service is not None and existing is not None:
        endpoint = compose_in_cluster(req, rsp, inputs, refs, existing=existing, seen=seen)
    write_status(rsp, inputs, integers, path, endpoint)
    xp.set_conditions(
        rsp,
        routed_condition(
            inputs.gateway, inputs.gateways, seen.get(ROUTE), integers,
            held=inputs.held, refused=inputs.refused,
        ),
    )  # fmt: skip
    return rsp


def read_inputs(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> Inputs:
    """What the platform grants the namespace; the endpoints per selector that may take
    traffic, the deployments they belong to; the Gateway."""
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    namespace = meta.get("namespace", "")
    spec = xp.parse(ModelServiceSpec, xr.get("spec") or {}, "spec")
    gateway = {"name": spec.gateway_ref.name, "namespace": spec.gateway_ref.namespace}
    grant = grants.require_grant(req, rsp, namespace)
    selected, targets, refused = selected_endpoints(req, rsp, spec, namespace, grant)
    endpoints = {ep["metadata"]["name"]: ep for found in selected for ep in found}
    deployments = deployments_of(req, rsp, endpoints.values(), namespace)
    # A deployment's first revision takes no traffic until the canary gate passes it.
    held = sorted(n for n, ep in endpoints.items() if _untested(ep, deployments))
    # A revision promoted away or rolled back keeps its endpoints while its replicas go; it
    # takes no share once an endpoint of a revision its deployment reports can take it.
    left_out = {*held, *_retired(endpoints, deployments)}
    if left_out:
        selected = [
            [ep for ep in found if ep["metadata"]["name"] not in left_out] for found in selected
        ]
        endpoints = {n: ep for n, ep in endpoints.items() if n not in left_out}
    gateways = xp.require(
        req,
        rsp,
        "gateway",
        backends.GATEWAY_API,
        "Gateway",
        match_name=gateway["name"],
        namespace=gateway["namespace"],
    )
    return Inputs(
        meta, spec, gateway, grant, selected, targets, refused, endpoints, deployments, held,
        gateways,
    )  # fmt: skip


def decide_weights(rsp: fnv1.RunFunctionResponse, inputs: Inputs) -> dict[str, int]:
    """Who gets how much: the integer weight of every endpoint (weights.py). While a
    deployment rolls out, asks to be called again within CANARY_TTL_S."""
    deployments = inputs.deployments
    groups = [
        weights.Group(group.weight, tuple(_endpoint(ep, deployments) for ep in _sorted(found)))
        for group, found in zip(inputs.spec.endpoints, inputs.selected, strict=True)
    ]
    canary_percent = {d: _canary_percent(obj) for d, obj in deployments.items()}
    if any(_rolling_out(obj) for obj in deployments.values()):
        rsp.meta.ttl.FromMilliseconds(int(CANARY_TTL_S * 1000))
    return weights.integer_weights(weights.shares(groups, canary_percent))


def compose_route(
    rsp: fnv1.RunFunctionResponse,
    inputs: Inputs,
    integers: dict[str, int],
    path: str,
    seen: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """A backend per endpoint and one route over them; the route's backend refs."""
    refs = []
    for ep_name in sorted(inputs.endpoints):
        url, rewrite = inputs.targets[ep_name]
        backend = backends.backend_name(inputs.name, ep_name)
        for suffix, obj in backends.backend_objects(backend, url, rewrite):
            key = f"{backend}-{suffix}"
            xp.compose(rsp, key, obj, ready=key in seen)
        refs.append(backends.backend_ref(backend, url, rewrite, integers[ep_name]))
    route = backends.http_route(inputs.name, inputs.gateway, inputs.spec.hostnames, path, refs)
    xp.compose(rsp, ROUTE, route, ready=_accepted(seen.get(ROUTE)))
    return refs


def compose_in_cluster(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    inputs: Inputs,
    refs: list[dict[str, Any]],
    *,
    existing: Existing,
    seen: dict[str, dict[str, Any]],
) -> str | None:
    """The in-cluster endpoint's objects and its condition; its address, once it has one."""
    assert inputs.spec.service is not None
    plan = in_cluster_plan(
        req, rsp, inputs, refs=refs, existing=existing, seen=seen
    )  # fmt: skip
    for key, obj in plan.objects.items():
        ready = _accepted(seen.get(key)) if key == in_cluster.ROUTE else key in seen
        xp.compose(rsp, key, obj, ready=ready)
    xp.set_conditions(rsp, plan.condition)
    return plan.endpoint


def write_status(
    rsp: fnv1.RunFunctionResponse,
    inputs: Inputs,
    integers: dict[str, int],
    path: str,
    endpoint: str | None,
) -> None:
    """The weights, the path, the deployments' revisions, the URL and in-cluster endpoint."""
    spec = inputs.spec
    host = spec.hostnames[0] if spec.hostnames else _gateway_address(inputs.gateways)
    status: dict[str, Any] = {
        "weights": [
            {"endpoint": n, "weight": integers[n], "percent": _percent(integers[n])}
            for n in sorted(integers)
        ],
        "path": path,
        "deployments": [
            {"name": dep, **_revisions(obj)} for dep, obj in sorted(inputs.deployments.items())
        ],
    }
    if host:
        status["url"] = f"http://{host}{path}"
    if endpoint:
        status["endpoint"] = endpoint
    xp.set_status(rsp, status)


def in_cluster_plan(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    inputs: Inputs,
    *,
    refs: list[dict[str, Any]],
    existing: Existing,
    seen: dict[str, dict[str, Any]],
) -> in_cluster.Plan:
    """The in-cluster endpoint, checked against every object of its names that exists."""
    assert inputs.spec.service is not None
    service, namespace = inputs.spec.service.name, inputs.namespace
    services, slices = existing
    httproutes = xp.require(
        req, rsp, ROUTES_REQUIREMENT, backends.GATEWAY_API, "HTTPRoute", match_labels={}
    )
    route = in_cluster.route_name(service)
    candidates = [(in_cluster.SERVICE, obj) for obj in services or []]
    candidates += [(in_cluster.SLICE, obj) for obj in slices or []]
    candidates += [
        (in_cluster.ROUTE, obj)
        for obj in httproutes or []
        if (obj.get("metadata") or {}).get("namespace") == namespace
        and (obj.get("metadata") or {}).get("name") == route
    ]
    return in_cluster.plan(
        name=service,
        namespace=namespace,
        uid=str(inputs.meta.get("uid") or ""),
        gateway=in_cluster.Gateway(inputs.gateway, inputs.gateways),
        backend_refs=refs,
        existing=candidates,
        httproutes=httproutes or [],
        seen=seen,
    )


def claim_refusal(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    spec: ModelServiceSpec,
    *,
    namespace: str,
    name: str,
    path: str,
    grant: grants.Grant,
    observed_route: dict[str, Any] | None,
) -> routes.Refusal | None:
    """Why the route may not be composed: a path, hostname or Gateway the platform did not grant
    the namespace, or an overlap with another namespace's HTTPRoute that owns the traffic."""
    gateway = (spec.gateway_ref.namespace, spec.gateway_ref.name)
    refusal = routes.permission_refusal(namespace, path, spec.hostnames, gateway, grant)
    httproutes = xp.require(
        req, rsp, ROUTES_REQUIREMENT, backends.GATEWAY_API, "HTTPRoute", match_labels={}
    )
    if refusal is not None:
        return refusal
    if httproutes is None:  # not read yet: Crossplane calls again with them
        return routes.Refusal(routes.ROUTE_CONFLICT, "the Gateway's HTTPRoutes are not read yet")
    created = ((observed_route or {}).get("metadata") or {}).get("creationTimestamp")
    ours = routes.Route(
        namespace,
        name,
        tuple(spec.hostnames),
        (path,),
        created if isinstance(created, str) and created else routes.NEWEST,
    )
    owner = routes.owner(ours, path, routes.routes_on(gateway, httproutes))
    if owner is not None:
        return routes.Refusal(routes.ROUTE_CONFLICT, routes.conflict_message(path, owner, gateway))
    return None


def not_composed(
    rsp: fnv1.RunFunctionResponse, refusal: routes.Refusal, path: str
) -> fnv1.RunFunctionResponse:
    """Nothing is composed (a route composed before is removed): no traffic reaches the claim."""
    xp.warning(rsp, refusal.message)
    xp.set_status(rsp, {"weights": [], "path": path})
    xp.set_conditions(rsp, conditions.waiting(conditions.ROUTED, refusal.message, refusal.reason))
    xp.set_composite_ready(rsp, False)
    return rsp


def routed_condition(
    gateway: dict[str, str],
    gateways: list[dict[str, Any]] | None,
    route: dict[str, Any] | None,
    integers: dict[str, int],
    *,
    held: list[str],
    refused: dict[str, str],
) -> xp.Condition:
    """Whether traffic flows, and if not, the first thing in its way: the Gateway, then the
    Gateway's verdict on the route, then the endpoints (a first rollout's wait for the gate,
    endpoints refused)."""
    where = f"{gateway['namespace']}/{gateway['name']}"
    if gateways is not None and not gateways:
        return conditions.waiting(
            conditions.ROUTED,
            f"Gateway {where} not found: the route has no Gateway to attach to. plnt does not "
            "create the control-plane Gateway: create it (docs/model-service.md) or set "
            "spec.gatewayRef to one that exists",
            conditions.MISSING_DEPENDENCY,
        )
    refusal = _refusal(route, gateway)
    if refusal is not None:
        return conditions.waiting(
            conditions.ROUTED, f"Gateway {where} does not accept the route: {refusal}", NOT_ACCEPTED
        )
    receiving = sum(1 for w in integers.values() if w)
    if not receiving and held:
        return conditions.waiting(
            conditions.ROUTED,
            f"{len(held)} endpoint(s) of a first rollout wait for the latency gate "
            f"({', '.join(held)}); the route answers 503",
            conditions.NO_ENDPOINTS,
        )
    if not receiving and refused:
        why = "; ".join(f"{name} {problem}" for name, problem in sorted(refused.items()))
        return conditions.waiting(
            conditions.ROUTED,
            f"every selected ModelEndpoint was refused ({why}); the route answers 503",
            ENDPOINTS_REFUSED,
        )
    if not receiving:
        return conditions.waiting(
            conditions.ROUTED,
            "no selected ModelEndpoint exists yet; the route answers 503",
            conditions.NO_ENDPOINTS,
        )
    return conditions.available(conditions.ROUTED, f"{receiving} endpoint(s) receive traffic")


def _refusal(route: dict[str, Any] | None, gateway: dict[str, str]) -> str | None:
    """The reason and message of the Gateway's Accepted: False on the route, if it says so."""
    for parent in ((route or {}).get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gateway["name"]:
            continue
        if ref.get("namespace", gateway["namespace"]) != gateway["namespace"]:
            continue
        for cond in parent.get("conditions") or []:
            if cond.get("type") == "Accepted" and cond.get("status") == "False":
                return ": ".join(str(x) for x in (cond.get("reason"), cond.get("message")) if x)
    return None


def selected_endpoints(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    spec: ModelServiceSpec,
    namespace: str,
    grant: grants.Grant,
) -> tuple[list[list[dict[str, Any]]], dict[str, tuple[str, str | None]], dict[str, str]]:
    """Per group, the usable ModelEndpoints it selects; (URL, rewrite) per endpoint name; and
    why each refused endpoint was refused.

    An endpoint with a malformed spec or a refused target is left out with a warning.
    """
    found_per_group = [
        xp.require(
            req,
            rsp,
            f"endpoints-{i}",
            contracts.MODELPLANE_API_VERSION,
            "ModelEndpoint",
            match_labels=group.selector.match_labels,
            namespace=namespace,
        )
        or []
        for i, group in enumerate(spec.endpoints)
    ]
    every = {ep["metadata"]["name"]: ep for found in found_per_group for ep in found}
    parsed = {ep_name: _parsed(ep) for ep_name, ep in every.items()}
    urls = [p.url for p in parsed.values() if p is not None]
    policy = grants.require_policy(req, rsp, namespace, grant, urls)
    targets, refused = {}, {}
    for ep_name, _ep in sorted(every.items()):
        target, problem = _target(parsed[ep_name], policy)
        if problem:
            xp.warning(rsp, f"ModelEndpoint {ep_name} {problem}; it gets no traffic")
            refused[ep_name] = problem
        else:
            targets[ep_name] = target
    usable = [
        [ep for ep in found if ep["metadata"]["name"] in targets] for found in found_per_group
    ]
    return usable, targets, refused


def deployments_of(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    endpoints: Iterable[dict[str, Any]],
    namespace: str,
) -> dict[str, dict[str, Any]]:
    """The ModelDeployments the endpoints' ``modelplane.ai/deployment`` labels name."""
    names = {deployment_of(ep) for ep in endpoints}
    out = {}
    for dep in sorted(n for n in names if n):
        found = xp.require(
            req,
            rsp,
            f"deployment-{dep}",
            contracts.MODELPLANE_API_VERSION,
            "ModelDeployment",
            match_name=dep,
            namespace=namespace,
        )
        if found:
            out[dep] = found[0]
    return out


def deployment_of(endpoint: dict[str, Any]) -> str | None:
    """The ModelDeployment an endpoint belongs to: the full name from the annotation where the
    label value had to be shortened (a name over 63 characters), else the label."""
    meta = endpoint["metadata"]
    full = (meta.get("annotations") or {}).get(labels.DEPLOYMENT)
    return full or (meta.get("labels") or {}).get(labels.DEPLOYMENT)


def _sorted(found: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return sorted(found or [], key=lambda ep: ep["metadata"]["name"])


def _endpoint(ep: dict[str, Any], deployments: dict[str, dict[str, Any]]) -> weights.Endpoint:
    ep_labels = ep["metadata"].get("labels") or {}
    dep = deployment_of(ep)
    canary_revision = contracts.Revisions.of(deployments.get(dep or "")).canary
    is_canary = bool(canary_revision) and ep_labels.get(labels.REVISION) == canary_revision
    return weights.Endpoint(ep["metadata"]["name"], dep, is_canary)


def _untested(ep: dict[str, Any], deployments: dict[str, dict[str, Any]]) -> bool:
    """An endpoint of a ModelDeployment that has no stable revision yet: nothing it runs has
    passed the latency gate (its first rollout is being smoke-tested, or failed)."""
    dep = deployments.get((ep["metadata"].get("labels") or {}).get(labels.DEPLOYMENT) or "")
    if dep is None:
        return False
    return not contracts.Revisions.of(dep).stable


def _retired(
    endpoints: dict[str, dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> list[str]:
    """Endpoints of a revision their deployment no longer reports (neither stable nor canary),
    where an endpoint of one it reports exists beside them; endpoints without a revision label
    or of a deployment that reports none are never retired."""
    current: dict[str, list[str]] = {}
    others: dict[str, list[str]] = {}
    for ep_name, ep in endpoints.items():
        revision = (ep["metadata"].get("labels") or {}).get(labels.REVISION)
        dep = deployment_of(ep)
        reported = set(_revisions(deployments.get(dep or "") or {}).values())
        if not (dep and revision and reported):
            continue
        (current if revision in reported else others).setdefault(dep, []).append(ep_name)
    return sorted(n for dep, names in others.items() if current.get(dep) for n in names)


def _revisions(deployment: dict[str, Any]) -> dict[str, str]:
    """A ModelDeployment's stable and canary revisions, as far as it reports them."""
    revisions = contracts.Revisions.of(deployment)
    return {k: v for k, v in (("stable", revisions.stable), ("canary", revisions.canary)) if v}


def _rolling_out(deployment: dict[str, Any]) -> bool:
    """A canary revision, or a canary run (``spec.canary.runId``) not yet in its status."""
    if "canary" in _revisions(deployment):
        return True
    run = ((deployment.get("spec") or {}).get("canary") or {}).get("runId")
    taken_up = ((deployment.get("status") or {}).get("canary") or {}).get("run")
    return bool(run) and run != taken_up


def _canary_percent(deployment: dict[str, Any]) -> int:
    """`spec.canary.trafficPercent` within the XRD's bounds (1-100); anything else splits
    nothing, as no canary would: a share outside them would give the stable endpoints less than
    none."""
    canary = (deployment.get("spec") or {}).get("canary") or {}
    value = canary.get("trafficPercent") if isinstance(canary, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    percent = int(value)
    return percent if 1 <= percent <= 100 else 0


def _parsed(ep: dict[str, Any]) -> ModelEndpointSpec | None:
    try:
        return xp.parse(ModelEndpointSpec, ep.get("spec") or {}, "spec")
    except xp.InvalidInput:
        return None


def _target(
    spec: ModelEndpointSpec | None, policy: plnt_targets.Policy
) -> tuple[tuple[str, str | None], str | None]:
    """An endpoint's (URL, rewrite path), or why it gets no traffic."""
    if spec is None:
        return ("", None), "has an invalid spec"
    refused = plnt_targets.refusal(spec.url, spec.rewrite_path, policy)
    if refused:
        return ("", None), f"points at {refused}"
    return (spec.url, spec.rewrite_path), None


def _accepted(route: dict[str, Any] | None) -> bool:
    for parent in ((route or {}).get("status") or {}).get("parents") or []:
        for cond in parent.get("conditions") or []:
            if cond.get("type") == "Accepted" and cond.get("status") == "True":
                return True
    return False


def _gateway_address(found: list[dict[str, Any]] | None) -> str | None:
    """The Gateway's first address; a status of the wrong shape (it is anyone's to write) has
    none."""
    for gw in found or []:
        addresses = xp.status_of(gw).get("addresses")
        for address in addresses if isinstance(addresses, list) else []:
            value = address.get("value") if isinstance(address, dict) else None
            if isinstance(value, str) and value:
                return value
    return None


def _percent(weight: int) -> float:
    return round(100 * weight / weights.TOTAL, 1)
