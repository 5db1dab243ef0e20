"""WorkflowRun (plnt.work/v1): the one-resource way to serve a model.

Reads the WorkflowRun, the observed ModelDeployment and ModelService it composed, and as a
required resource every InferenceClass (which GPU classes the fleet offers). Composes a
ModelDeployment named after the run (one Standalone engine named after the runtime, from the
runtime's preset; one DRA device request ``gpu`` of ``resources.gpu`` devices selected by the
gpuClass CEL; the canary block with ``runId`` = the workflowRunId, and autoscaling) and a
ModelService that routes the control-plane Gateway to that deployment's ModelEndpoints, with
the in-cluster Service the seed's endpoint names (``spec.service``).

Design choices:
- Every rollout is gated: the ModelDeployment always gets a canary block, so its first
  revision takes no traffic until it passes the smoke test, a change of the pods is a canary
  at ``trafficPercent``, and any other spec change (a new workflowRunId, passed as
  ``canary.runId``) re-tests the serving revision in place against the current budgets.
- The phase is derived on every call (phases.py) from observed state and the phase last
  written (the XR's own status, read back): a target from what the children report, reached
  one step at a time along the seed's order, so every step is written whatever lands between
  two reconciles, and a restarted control plane reports the same phase.
- Weights named by ``model.storageUri`` are staged before the engine starts: the engine
  reads them from ``/models`` (where ModelReplica also mounts a ModelCache) and the pod
  template carries the source in the ``plnt.work/weights-uri`` annotation, which the
  workload renderer turns into an init container (docs/workflow-run.md). That staging is the
  PullingWeights phase.
- ``status.endpoint`` is the seed's ``<service>.<namespace>.svc.cluster.local:8000``: the
  ModelService's Service, named after the run where that is a DNS label and otherwise derived
  from it (``plnt.names.service_name``: dots to dashes), reaching the route through the
  control-plane Gateway. ``status.url`` is the route's URL, for callers outside the cluster.
  Both stay put across canaries, rollbacks and clusters; ``status.address`` is the endpoint as
  kubectl's column shows it (``<service>.<namespace>.svc:8000``).
- Invalid input is not a Fatal result: Crossplane discards the desired status of a Fatal
  response, so phase Failed would never reach the live object. It is a Warning, the Valid
  condition (False, naming the field), phase Failed, and every composed resource carried
  forward as observed, so a running model loses nothing to a bad update.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.workflow_run import gpu_classes, phases, presets
from plnt import conditions, contracts, labels, names, routes, xp
from plnt.models.workflow_run import WorkflowRunSpec

DEPLOYMENT = "model-deployment"
SERVICE = "model-service"
INFERENCE_CLASSES = "inference-classes"
USER_EXCLUDED = "crossplane"  # the spec field Crossplane writes: never part of a run's identity
CROSSPLANE = "crossplane.io/"  # label prefix Crossplane puts on what it composes
WEIGHTS_PATH = "/models"  # where ModelReplica mounts a ModelCache, too
CLUSTER_DOMAIN = "." + routes.CLUSTER_DOMAIN
# the seed's endpoint is <service>.<namespace>.svc.cluster.local:8000
IN_CLUSTER_SUFFIX = f".svc{CLUSTER_DOMAIN}:8000"
# what this function composes under each name: observed objects are trusted only as these
COMPOSED_KINDS = {
    DEPLOYMENT: (contracts.MODELPLANE_API_VERSION, "ModelDeployment"),
    SERVICE: (contracts.MODELPLANE_API_VERSION, "ModelService"),
}


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    name = meta.get("name", "")
    generation = int(meta.get("generation") or 0)
    run_id = workflow_run_id(meta.get("uid", ""), xr.get("spec") or {})
    identity: dict[str, Any] = {"workflowRunId": run_id}
    if generation:
        identity["observedGeneration"] = generation
    observed = xp.observed_resources(req)
    seen_deployment = observed.get(DEPLOYMENT)
    seen_service = observed.get(SERVICE)
    fleet = xp.require(
        req,
        rsp,
        INFERENCE_CLASSES,
        contracts.MODELPLANE_API_VERSION,
        "InferenceClass",
        match_labels={},
    )
    rsp.requirements.resources[INFERENCE_CLASSES].match_labels.SetInParent()  # every one

    try:
        spec = xp.parse(WorkflowRunSpec, xr.get("spec") or {}, "spec")
        preset = presets.preset_for(spec.runtime, spec.model.quantization)
        gpu_cel = gpu_classes.selector_for(
            spec.resources.gpu_class, gpu_classes.fleet_gpus(fleet or [])
        )
    except xp.InvalidInput as err:
        _refuse(rsp, err, identity, observed)
        return rsp

    phase = phases.derive(
        seen_deployment,
        seen_service,
        run_id,
        written=xr.get("status") or {},
        stages_weights=spec.model.storage_uri is not None,
    )
    if phase.trailing:
        # the observed state is further along than the step written: the next step at once
        rsp.meta.ttl.FromMilliseconds(1000)
    deployment = model_deployment(
        name, spec, preset=preset, gpu_cel=gpu_cel, seen=seen_deployment, identity=identity
    )
    xp.compose(rsp, DEPLOYMENT, deployment, ready=phases.serving(seen_deployment))
    service = model_service(name, identity, seen_deployment)
    xp.compose(rsp, SERVICE, service, ready=phases.routed(seen_service))

    xp.set_status(rsp, _status(identity, phase, seen_service, xr.get("status") or {}))
    xp.set_conditions(
        rsp,
        xp.Condition(conditions.VALID, True, conditions.AVAILABLE, "spec is valid"),
        xp.Condition(conditions.SERVING, phase.name == phases.READY, phase.name, phase.message),
    )
    health = clusters_health(seen_deployment)
    if health is not None:
        xp.set_conditions(rsp, health)
        if not health.status:
            xp.warning(rsp, f"{health.reason}: {health.message}")
    return rsp


def clusters_health(deployment: dict[str, Any] | None) -> xp.Condition | None:
    """The ModelDeployment's ClustersHealthy, as the run's own: which cluster is degraded and
    what fails over where (None before the deployment reports it)."""
    cond = xp.condition_of(deployment, conditions.CLUSTERS_HEALTHY)
    if cond is None or cond.get("status") not in ("True", "False"):
        return None
    return xp.Condition(
        conditions.CLUSTERS_HEALTHY,
        cond["status"] == "True",
        str(cond.get("reason") or ""),
        str(cond.get("message") or ""),
    )


def _refuse(
    rsp: fnv1.RunFunctionResponse,
    err: xp.InvalidInput,
    identity: dict[str, Any],
    observed: dict[str, dict[str, Any]],
) -> None:
    """An invalid spec: phase Failed with the reason, through a path that is not Fatal (whose
    status Crossplane would discard), composing exactly what is observed so nothing is deleted
    and whatever ran under the previous spec keeps running. Only what this function composes
    is carried, and only from an object of the kind it composes under that name."""
    observed = {
        resource: obj
        for resource, obj in observed.items()
        if (obj.get("apiVersion"), obj.get("kind")) == COMPOSED_KINDS.get(resource)
    }
    for resource, obj in observed.items():
        readiness: dict[str, Callable[[Mapping[str, Any] | None], bool]] = {
            DEPLOYMENT: phases.serving,
            SERVICE: phases.routed,
        }
        ready = readiness.get(resource, xp.is_ready)
        xp.compose(rsp, resource, carried(obj), ready=ready(obj))
    kept = phases.derive(observed.get(DEPLOYMENT), observed.get(SERVICE)) if observed else None
    message = f"invalid spec: {err}"
    failed = phases.Phase(phases.FAILED, message, kept.url if kept else None)
    status = _status(identity, failed, observed.get(SERVICE), {})
    if kept is not None and kept.url:
        message += f"; the previous spec keeps serving at {status.get('endpoint') or kept.url}"
    xp.set_status(rsp, status)
    xp.set_conditions(
        rsp,
        xp.Condition(conditions.VALID, False, conditions.INVALID_SPEC, str(err)),
        xp.Condition(conditions.SERVING, False, phases.FAILED, message),
    )
    xp.warning(rsp, message)


def _status(
    identity: dict[str, Any],
    phase: phases.Phase,
    service: Mapping[str, Any] | None,
    written: Mapping[str, Any],
) -> dict[str, Any]:
    """The phase, and once a revision serves behind the route (the phase has a URL): the URL,
    the in-cluster endpoint the ModelService reports (or, while Ready, the one written before),
    and the endpoint's short form for kubectl's column."""
    status: dict[str, Any] = {**identity, "phase": phase.name}
    if not phase.url:
        return status
    status["url"] = phase.url
    endpoint = xp.status_of(service).get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        endpoint = written.get("endpoint") if phase.name == phases.READY else None
    if isinstance(endpoint, str) and endpoint.endswith(IN_CLUSTER_SUFFIX):
        status["endpoint"] = endpoint
        host, _, port = endpoint.rpartition(":")
        status["address"] = f"{host.removesuffix(CLUSTER_DOMAIN)}:{port}"
    return status


def carried(observed: dict[str, Any]) -> dict[str, Any]:
    """An observed composed resource as a desired one, unchanged: its kind, name, labels,
    annotations and spec (not its status, nor what the API server and Crossplane own, such as
    a composed XR's spec.crossplane)."""
    meta = observed.get("metadata") or {}
    out_meta = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
    annotations = dict(out_meta.get("annotations") or {})
    annotations.pop(xp.COMPOSITION_RESOURCE_NAME, None)
    labels_ = {
        k: v for k, v in (out_meta.get("labels") or {}).items() if not k.startswith(CROSSPLANE)
    }
    for key, value in (("annotations", annotations), ("labels", labels_)):
        if value:
            out_meta[key] = value
        else:
            out_meta.pop(key, None)
    out = {
        "apiVersion": observed.get("apiVersion"),
        "kind": observed.get("kind"),
        "metadata": out_meta,
    }
    if "spec" in observed:
        out["spec"] = xp.kept_spec(observed)
    return out


def workflow_run_id(uid: str, spec: Mapping[str, Any]) -> str:
    """``r-`` + 10 hex of sha256(uid + the user's spec as canonical JSON): an update of what
    the user wrote is a fresh run. ``spec.crossplane`` (composition and resource refs, which
    Crossplane writes and which bump ``metadata.generation``) is left out, so Crossplane's own
    writes never start one."""
    users = {k: v for k, v in spec.items() if k != USER_EXCLUDED}
    canonical = json.dumps(users, sort_keys=True, separators=(",", ":"), default=str)
    return "r-" + hashlib.sha256(f"{uid}{canonical}".encode()).hexdigest()[:10]


def engine_container(spec: WorkflowRunSpec, preset: presets.Preset) -> dict[str, Any]:
    """The runtime's container: pinned image, launch flags, port 8000, memory request = limit."""
    model = WEIGHTS_PATH if spec.model.storage_uri else spec.model.name
    memory = f"{spec.resources.memory_gib}Gi"
    return {
        "name": "engine",
        "image": preset.image,
        "command": list(preset.command),
        "args": presets.launch_args(
            preset, spec.model.quantization, model, spec.model.name, spec.resources.gpu
        ),
        "ports": [{"name": "http", "containerPort": presets.PORT}],
        "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}},
    }


def pod_template(run: str, spec: WorkflowRunSpec, preset: presets.Preset) -> dict[str, Any]:
    annotations = {labels.HEALTH_PATH: preset.health_path}
    if spec.model.storage_uri:
        annotations[labels.WEIGHTS_URI] = spec.model.storage_uri
        annotations[labels.WEIGHTS_PATH] = WEIGHTS_PATH
    return {
        "metadata": {
            "labels": {labels.WORKFLOW_RUN: labels.value(run)},
            "annotations": annotations,
        },
        "spec": {"containers": [engine_container(spec, preset)]},
    }


def replicas(spec: WorkflowRunSpec, seen: dict[str, Any] | None) -> int:
    """replicas.min at first; afterwards what the autoscaler set, kept within [min, max]."""
    current = ((seen or {}).get("spec") or {}).get("replicas")
    if not isinstance(current, int):
        return spec.replicas.min
    return min(max(current, spec.replicas.min), spec.replicas.max)


def model_deployment(
    run: str,
    spec: WorkflowRunSpec,
    *,
    preset: presets.Preset,
    gpu_cel: str,
    seen: dict[str, Any] | None,
    identity: dict[str, Any],
) -> dict[str, Any]:
    smoke = spec.canary.smoke_test
    body: dict[str, Any] = {
        "replicas": replicas(spec, seen),
        "engines": [
            {
                "name": spec.runtime,
                "members": [
                    {
                        "role": "Standalone",
                        "nodeSelector": {
                            "devices": [
                                {
                                    "name": "gpu",
                                    "count": spec.resources.gpu,
                                    "selectors": [{"cel": gpu_cel}],
                                }
                            ]
                        },
                        "template": pod_template(run, spec, preset),
                    }
                ],
            }
        ],
        "canary": {
            "trafficPercent": spec.canary.traffic_percent,
            "runId": identity["workflowRunId"],
            "smokeTest": {
                "prompts": smoke.prompts,
                "ttftBudgetMs": smoke.ttft_budget_ms,
                "tpotBudgetMs": smoke.tpot_budget_ms,
            },
        },
    }
    body["failover"] = {"after": spec.failover.after}
    if spec.autoscaling:
        body["autoscaling"] = {
            "targetTokensPerSecond": spec.autoscaling.target_tokens_per_second,
            "minReplicas": spec.replicas.min,
            "maxReplicas": spec.replicas.max,
        }
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {
            "name": run,
            "labels": {labels.WORKFLOW_RUN: labels.value(run)},
            "annotations": {labels.WORKFLOW_RUN_ID: identity["workflowRunId"]},
        },
        "spec": body,
    }


def endpoints_digest(deployment: dict[str, Any] | None) -> str:
    """A digest of what decides the deployment's endpoints: its placements and its
    ClustersHealthy condition ('' before it reports them)."""
    status = (deployment or {}).get("status") or {}
    placements = status.get("placements") if isinstance(status, dict) else None
    health = xp.condition_of(deployment, conditions.CLUSTERS_HEALTHY) or {}
    if not placements and not health:
        return ""
    names = sorted(
        str(p.get("replica")) + "@" + str(p.get("cluster"))
        for p in placements or []
        if isinstance(p, dict)
    )
    said = [names, health.get("status"), health.get("reason"), health.get("message")]
    body = json.dumps(said, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:12]


def model_service(
    run: str, identity: dict[str, Any], seen_deployment: dict[str, Any] | None
) -> dict[str, Any]:
    """Routes the default control-plane Gateway at ``/<namespace>/<run>`` to the run's endpoints,
    and gives them the in-cluster Service ``names.service_name(run)`` on port 8000.

    The ``plnt.work/stable-revision`` and ``plnt.work/canary-revision`` annotations follow the
    deployment's revisions, so a canary appearing, a promotion and a rollback each change the
    ModelService and it re-reads its endpoints at once (they are required resources, which
    Crossplane does not watch), not at its next poll: a canary takes its share while it is
    smoke-tested, even when the service last ran before the deployment took the update up.
    ``plnt.work/endpoints`` does the same when the deployment's replicas change or a cluster they
    are on degrades or recovers (its endpoints leave or rejoin the routes at once)."""
    annotations = {labels.WORKFLOW_RUN_ID: identity["workflowRunId"]}
    revisions = contracts.Revisions.of(seen_deployment)
    if revisions.stable:
        annotations[labels.STABLE_REVISION] = revisions.stable
    if revisions.canary:
        annotations[labels.CANARY_REVISION] = revisions.canary
    routed = endpoints_digest(seen_deployment)
    if routed:
        annotations[labels.ENDPOINTS_DIGEST] = routed
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "ModelService",
        "metadata": {
            "name": run,
            "labels": {labels.WORKFLOW_RUN: labels.value(run)},
            "annotations": annotations,
        },
        "spec": {
            "endpoints": [
                {"weight": 1, "selector": {"matchLabels": {labels.DEPLOYMENT: labels.value(run)}}}
            ],
            "service": {"name": names.service_name(run)},
        },
    }
