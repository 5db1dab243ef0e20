"""ModelEndpoint (modelplane.ai/v1alpha1): one reachable OpenAI-compatible URL.

Reads the ModelEndpoint and composes nothing. ModelDeployment composes one per replica;
people make them by hand for anything else that speaks the OpenAI API (a hosted provider,
a server outside the fleet), optionally with ``auth.secretRef`` naming the Secret key that
holds its API key. Both kinds are routed the same way by ModelService.

The function validates the URL and publishes it in status. It does not probe the URL (a
composition function must answer quickly and without side effects), so ``Reachable`` is
Unknown with reason NotProbed; the canary gate and ModelService readiness are where
reachability is measured. The Secret is referenced, never read: its value never reaches
status, conditions or events.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import conditions, xp
from plnt.models.model_endpoint import ModelEndpointSpec, target


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)
    spec = xp.parse(ModelEndpointSpec, xr.get("spec") or {}, "spec")

    scheme, host, port, path = target(spec.url, spec.rewrite_path)

    xp.set_status(rsp, endpoint_status(spec))
    xp.set_conditions(
        rsp,
        xp.Condition(
            conditions.VALID, True, conditions.AVAILABLE, f"{scheme} to {host}:{port}, path {path}"
        ),
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
