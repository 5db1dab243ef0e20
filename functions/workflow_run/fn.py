"""WorkflowRun (plnt.work/v1): the one-resource way to serve a model.

Reads the WorkflowRun and the observed ModelDeployment and ModelService it composed.
Composes a ModelDeployment named after the run (one Standalone engine named after the
runtime, from the runtime's preset; one DRA device request ``gpu`` of ``resources.gpu``
devices selected by the gpuClass CEL; the canary and autoscaling blocks) and a ModelService
that routes the control-plane Gateway to that deployment's ModelEndpoints.

Design choices:
- The phase is derived from observed state on every call (phases.py), never stored and
  advanced, so a restarted control plane reports the same phase.
- Weights named by ``model.storageUri`` are staged before the engine starts: the engine
  reads them from ``/models`` (where ModelReplica also mounts a ModelCache) and the pod
  template carries the source in the ``plnt.work/weights-uri`` annotation, which the
  workload renderer turns into an init container (docs/workflow-run.md). That staging is the
  PullingWeights phase.
- ``status.endpoint`` is the ModelService URL, the address that stays put across canaries,
  rollbacks and clusters (docs/workflow-run.md says why not ``<name>.<ns>.svc``).
- Invalid input is a Fatal result, and the Valid condition (False) and phase Failed say why.
"""

from __future__ import annotations

import hashlib
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.workflow_run import gpu_classes, phases, presets
from plnt import conditions, labels, xp
from plnt.models.workflow_run import WorkflowRunSpec

DEPLOYMENT = "model-deployment"
SERVICE = "model-service"
MODELPLANE = "modelplane.ai/v1alpha1"
WEIGHTS_PATH = "/models"  # where ModelReplica mounts a ModelCache, too


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    name = meta.get("name", "")
    generation = int(meta.get("generation") or 0)
    identity = {"workflowRunId": workflow_run_id(meta.get("uid", ""), generation)}
    if generation:
        identity["observedGeneration"] = generation
    observed = xp.observed_resources(req)

    try:
        spec = xp.parse(WorkflowRunSpec, xr.get("spec") or {}, "spec")
        preset = presets.preset_for(spec.runtime, spec.model.quantization)
        gpu_cel = gpu_classes.selector_for(spec.resources.gpu_class)
    except xp.InvalidInput as err:
        xp.set_status(rsp, {**identity, "phase": phases.FAILED})
        xp.set_conditions(
            rsp,
            xp.Condition(conditions.VALID, False, conditions.INVALID_SPEC, str(err)),
            xp.Condition(conditions.SERVING, False, phases.FAILED, str(err)),
        )
        xp.fatal(rsp, f"invalid input: {err}")
        return rsp

    seen_deployment = observed.get(DEPLOYMENT)
    seen_service = observed.get(SERVICE)
    phase = phases.derive(seen_deployment, seen_service)

    deployment = model_deployment(
        name, spec, preset=preset, gpu_cel=gpu_cel, seen=seen_deployment, identity=identity
    )
    xp.compose(rsp, DEPLOYMENT, deployment, ready=_replicas_ready(seen_deployment))
    xp.compose(rsp, SERVICE, model_service(name, identity), ready=_routing(seen_service))

    status: dict[str, Any] = {**identity, "phase": phase.name}
    if phase.endpoint:
        status["endpoint"] = phase.endpoint
    xp.set_status(rsp, status)
    xp.set_conditions(
        rsp,
        xp.Condition(conditions.VALID, True, conditions.AVAILABLE, "spec is valid"),
        xp.Condition(
            conditions.SERVING,
            phase.name == phases.READY,
            phase.name,
            phase.message,
        ),
    )
    return rsp


def workflow_run_id(uid: str, generation: int) -> str:
    """``r-`` + 10 hex of sha256(uid + generation): a spec update is a fresh run."""
    return "r-" + hashlib.sha256(f"{uid}{generation}".encode()).hexdigest()[:10]


def _replicas_ready(seen: dict[str, Any] | None) -> bool:
    cond = xp.condition_of(seen, conditions.REPLICAS_READY)
    return bool(cond and cond.get("status") == "True")


def _routing(seen: dict[str, Any] | None) -> bool:
    return bool(seen and xp.is_ready(seen) and (seen.get("status") or {}).get("url"))


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
            "smokeTest": {
                "prompts": smoke.prompts,
                "ttftBudgetMs": smoke.ttft_budget_ms,
                "tpotBudgetMs": smoke.tpot_budget_ms,
            },
        },
    }
    if spec.autoscaling:
        body["autoscaling"] = {
            "targetTokensPerSecond": spec.autoscaling.target_tokens_per_second,
            "minReplicas": spec.replicas.min,
            "maxReplicas": spec.replicas.max,
        }
    return {
        "apiVersion": MODELPLANE,
        "kind": "ModelDeployment",
        "metadata": {
            "name": run,
            "labels": {labels.WORKFLOW_RUN: labels.value(run)},
            "annotations": {labels.WORKFLOW_RUN_ID: identity["workflowRunId"]},
        },
        "spec": body,
    }


def model_service(run: str, identity: dict[str, Any]) -> dict[str, Any]:
    """Routes the default control-plane Gateway at ``/<namespace>/<run>`` to the run's endpoints."""
    return {
        "apiVersion": MODELPLANE,
        "kind": "ModelService",
        "metadata": {
            "name": run,
            "labels": {labels.WORKFLOW_RUN: labels.value(run)},
            "annotations": {labels.WORKFLOW_RUN_ID: identity["workflowRunId"]},
        },
        "spec": {
            "endpoints": [
                {"weight": 1, "selector": {"matchLabels": {labels.DEPLOYMENT: labels.value(run)}}}
            ]
        },
    }
