"""ModelEndpoint (modelplane.ai/v1alpha1): one reachable OpenAI-compatible URL.

Reads the ModelEndpoint and composes nothing. ModelDeployment composes one per replica;
people make them by hand for anything else that speaks the OpenAI API (a hosted provider,
a server outside the fleet), optionally with ``auth.secretRef`` naming the Secret key that
holds its API key. Both kinds are routed the same way by ModelService.

The function validates the URL and publishes it in status. The target must be one the
platform lets its gateway reach for this namespace (plnt.targets, the check ModelService
applies too, with the namespace's InferenceGrants, the fleet's gateway addresses and the
Namespaces a host name could resolve into, all required): otherwise ``Valid`` is False with
reason TargetRefused naming why, a Warning says it and ``status.url`` is left out. It does not
probe the URL (a composition function must answer quickly and without side effects), so
``Reachable`` is Unknown with reason NotProbed; the canary gate and ModelService readiness are
where reachability is measured. The Secret is referenced, never read: its value never reaches
status, conditions or events.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import conditions, grants, targets, xp
from plnt.models.model_endpoint import ModelEndpointSpec, target

TARGET_REFUSED = "TargetRefused"  # Valid reason: the platform's gateway may not be sent there


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)
    namespace = (xr.get("metadata") or {}).get("namespace", "")
    spec = xp.parse(ModelEndpointSpec, xr.get("spec") or {}, "spec")

    # inputs: what the platform grants the namespace, and what is the platform's own
    grant = grants.require_grant(req, rsp, namespace)
    policy = grants.require_policy(req, rsp, namespace, grant, [spec.url])

    # decisions
    scheme, host, port, path = target(spec.url, spec.rewrite_path)
    refused = targets.refusal(spec.url, spec.rewrite_path, policy)

    status = endpoint_status(spec)
    if refused:
        status.pop("url")
        xp.warning(rsp, f"spec.url points at {refused}; no ModelService routes to it")
        valid = xp.Condition(
            conditions.VALID, False, TARGET_REFUSED, f"spec.url points at {refused}"
        )
    else:
        valid = xp.Condition(
            conditions.VALID, True, conditions.AVAILABLE, f"{scheme} to {host}:{port}, path {path}"
        )
    xp.set_status(rsp, status)
    xp.set_conditions(
        rsp,
        valid,
        xp.Condition(
            conditions.REACHABLE,
            None,
            conditions.NOT_PROBED,
            "plnt does not probe endpoints; the canary gate measures them",
        ),
    )
    return rsp


def endpoint_status(spec: ModelEndpointSpec) -> dict[str, Any]:
    status: dict[str, Any] = {"url": spec.url}
    if spec.model:
        status["model"] = spec.model
    status["authenticated"] = spec.auth is not None
    return status
