"""What every plnt function shares about talking to Crossplane.

A function's ``run_function(req) -> rsp`` uses these to read the request into plain dicts
once, and to write desired resources, XR status, conditions and results back. Invalid
input is raised as :class:`InvalidInput` with the field path; the runtime turns it into a
Fatal result, so no exception ever escapes ``RunFunction``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import pydantic
from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"
# What Crossplane writes into a composite's spec (its composition and the references to what it
# composed): the composite's own reconciler's, never part of what composes it
CROSSPLANE_SPEC = "crossplane"

Model = TypeVar("Model", bound=pydantic.BaseModel)


class InvalidInput(Exception):  # noqa: N818 (reads better at the raise site)
    """Input the function cannot act on; becomes a Fatal result naming ``path``."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


# --- reading the request ----------------------------------------------------------------


def to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A protobuf Struct as plain Python data (ints stay ints where they were whole)."""
    return _plain(resource.struct_to_dict(struct))


def _plain(value: Any) -> Any:
    # Struct numbers are doubles; Kubernetes integers must come back as ints.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def composite(req: fnv1.RunFunctionRequest) -> dict[str, Any]:
    """The observed composite resource (XR)."""
    return to_dict(req.observed.composite.resource)


def observed_resources(req: fnv1.RunFunctionRequest) -> dict[str, dict[str, Any]]:
    """Observed composed resources by composition resource name."""
    return {name: to_dict(r.resource) for name, r in req.observed.resources.items()}


def desired_resources(req: fnv1.RunFunctionRequest) -> dict[str, dict[str, Any]]:
    """Desired composed resources earlier pipeline steps produced."""
    return {name: to_dict(r.resource) for name, r in req.desired.resources.items()}


def require(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    name: str,
    api_version: str,
    kind: str,
    *,
    match_name: str | None = None,
    match_labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
) -> list[dict[str, Any]] | None:
    """Declares a required resource and returns what Crossplane resolved, or None if not yet.

    The requirement is declared on every call: Crossplane treats requirements as satisfied
    once they are the same across two calls.
    """
    response.require_resources(
        rsp,
        name,
        api_version,
        kind,
        match_name=match_name,
        match_labels=dict(match_labels) if match_labels is not None else None,
        namespace=namespace,
    )
    if name not in req.required_resources:
        return None
    return [to_dict(item.resource) for item in req.required_resources[name].items]


def context(req: fnv1.RunFunctionRequest, key: str) -> Any:
    """A value an earlier pipeline step put in the context, or None."""
    if key not in req.context.fields:
        return None
    return _plain(resource.struct_to_dict(req.context)[key])


def parse(model: type[Model], data: Any, path: str) -> Model:
    """Validates ``data`` into ``model``; any error is InvalidInput naming the first bad field."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = join_path(path, first["loc"])
        raise InvalidInput(where, first["msg"]) from None


def join_path(base: str, loc: Iterable[Any]) -> str:
    out = base
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


# --- readiness of observed objects -------------------------------------------------------


def status_of(obj: Any) -> dict[str, Any]:
    """The object's status, or {} when it has none or it is not an object (malformed)."""
    status = obj.get("status") if isinstance(obj, Mapping) else None
    return status if isinstance(status, dict) else {}


def conditions_of(obj: Any) -> list[dict[str, Any]]:
    """The object's well-formed conditions: objects with a string type; the rest is skipped."""
    conditions = status_of(obj).get("conditions")
    if not isinstance(conditions, list):
        return []
    return [c for c in conditions if isinstance(c, dict) and isinstance(c.get("type"), str)]


def condition_of(obj: Mapping[str, Any] | None, typ: str) -> dict[str, Any] | None:
    """The object's condition of type typ; None when absent or the status is malformed."""
    for cond in conditions_of(obj):
        if cond["type"] == typ:
            return cond
    return None


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """True when the object's Ready condition is True (Crossplane-managed resources and XRs).
    Anything malformed on the way (a string status, string conditions) reads as not ready."""
    cond = condition_of(obj, "Ready")
    return bool(cond and cond.get("status") == "True")


def kept_spec(observed: Mapping[str, Any]) -> dict[str, Any]:
    """An observed composed resource's spec, to desire it unchanged. A composed XR's
    spec.crossplane is left out: applied back from this (older) observation, it would replace
    the references its reconciler wrote since, and a resource those name would be forgotten,
    never deleted."""
    spec = observed.get("spec")
    if not isinstance(spec, Mapping):
        return {}
    return {k: copy.deepcopy(v) for k, v in spec.items() if k != CROSSPLANE_SPEC}


# --- writing the response ----------------------------------------------------------------


def compose(
    rsp: fnv1.RunFunctionResponse,
    name: str,
    obj: Mapping[str, Any],
    *,
    ready: bool | None = None,
) -> None:
    """Adds (or replaces) one desired composed resource."""
    desired = rsp.desired.resources[name]
    desired.resource.Clear()
    desired.resource.update(obj)
    if ready is None:
        desired.ready = fnv1.READY_UNSPECIFIED
    else:
        desired.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE


def set_status(rsp: fnv1.RunFunctionResponse, status: Mapping[str, Any]) -> None:
    """Merges fields into the desired XR status (top-level keys replace)."""
    current = to_dict(rsp.desired.composite.resource)
    merged = dict(current.get("status") or {})
    merged.update(status)
    current["status"] = merged
    rsp.desired.composite.resource.Clear()
    rsp.desired.composite.resource.update(current)


def set_composite_ready(rsp: fnv1.RunFunctionResponse, ready: bool) -> None:
    """Overrides Crossplane's readiness derivation for the XR itself."""
    rsp.desired.composite.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None
    reason: str
    message: str = ""


def set_conditions(rsp: fnv1.RunFunctionResponse, *conditions: Condition) -> None:
    for cond in conditions:
        status = {True: "True", False: "False", None: "Unknown"}[cond.status]
        response.set_conditions(
            rsp,
            resource.Condition(
                typ=cond.type, status=status, reason=cond.reason, message=cond.message or None
            ),
        )


def set_context(rsp: fnv1.RunFunctionResponse, key: str, value: Any) -> None:
    rsp.context.update({key: value})


def normal(rsp: fnv1.RunFunctionResponse, message: str) -> None:
    response.normal(rsp, message)


def warning(rsp: fnv1.RunFunctionResponse, message: str) -> None:
    response.warning(rsp, message)


def fatal(rsp: fnv1.RunFunctionResponse, message: str) -> None:
    response.fatal(rsp, message)


def respond(
    req: fnv1.RunFunctionRequest, ttl_seconds: float | None = None
) -> fnv1.RunFunctionResponse:
    """A response carrying forward the request's desired state and context."""
    import datetime

    if ttl_seconds is None:
        return response.to(req)
    return response.to(req, ttl=datetime.timedelta(seconds=ttl_seconds))
