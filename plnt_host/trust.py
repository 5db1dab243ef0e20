"""What a function may trust of a RunFunctionRequest: screened once, at the edge, by the runtime.

Crossplane builds requests from what the API servers hold, but a request is only data: a caller
over gRPC (or a provider writing an odd status) can send what no schema admits. Every function
reads observed state through this screen, so none has to defend each read on its own:

- Observed state is evidence, not input. A composed or required resource whose `status` is not
  an object, or whose `status.conditions` holds anything but condition objects, is read with
  those parts removed, so it is "not ready"; a warning names the resource.
- An observed resource counts only when it is the kind composed under its name: a ConfigMap
  found where a CKS Cluster is composed says nothing about that cluster. Names an earlier step
  composed are checked before the function runs; names the function composes itself are checked
  after it, and the function runs again without the impostors (rare: it means something else
  was written under a composed name).
- The XR is input: `metadata` fields of the wrong type (a number for `metadata.name`) and
  non-finite numbers anywhere (NaN and Infinity exist in protobuf, never in Kubernetes JSON) are
  InvalidInput naming the field, so a function never computes with them.
"""

from __future__ import annotations

import dataclasses
import math

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from plnt.xp import InvalidInput

_KIND_NAMES = {
    "null_value": "null",
    "number_value": "a number",
    "string_value": "a string",
    "bool_value": "a boolean",
    "struct_value": "an object",
    "list_value": "a list",
}
_STRING_MAPS = ("labels", "annotations")
_STRINGS = ("name", "namespace", "generateName", "uid")
_NOT_READY = "read as not ready"


@dataclasses.dataclass(frozen=True)
class Screened:
    """The request a function may read, and what was left out of it and why."""

    request: fnv1.RunFunctionRequest
    warnings: tuple[str, ...] = ()


def _kind(value: struct_pb2.Value) -> str:
    return _KIND_NAMES.get(value.WhichOneof("kind") or "", "empty")


def _field(struct: struct_pb2.Struct, name: str) -> struct_pb2.Value | None:
    return struct.fields.get(name)


def _string(struct: struct_pb2.Struct, name: str) -> str:
    value = _field(struct, name)
    return value.string_value if value is not None and value.HasField("string_value") else ""


def type_of(resource: struct_pb2.Struct) -> tuple[str, str]:
    """(apiVersion, kind) of a resource; empty strings where they are missing or not strings."""
    return _string(resource, "apiVersion"), _string(resource, "kind")


def describe(key: str, resource: struct_pb2.Struct) -> str:
    api_version, kind = type_of(resource)
    meta = _field(resource, "metadata")
    name = _string(meta.struct_value, "name") if meta is not None else ""
    what = " ".join(p for p in (api_version, kind, name) if p)
    return f"{key!r} ({what})" if what else repr(key)


def _status_problem(resource: struct_pb2.Struct, *, fix: bool) -> str | None:
    """What is malformed about a resource's status, or None; with fix, removes it in place."""
    status = _field(resource, "status")
    if status is None or status.HasField("null_value"):
        return None
    if not status.HasField("struct_value"):
        problem = f"status is {_kind(status)}, not an object"
        if fix:
            del resource.fields["status"]
        return problem
    return _conditions_problem(status.struct_value, fix=fix)


def _conditions_problem(status: struct_pb2.Struct, *, fix: bool) -> str | None:
    """What is malformed about status.conditions, or None; with fix, removes it in place (the
    entries that are not conditions, or the whole field when it is not a list)."""
    conditions = _field(status, "conditions")
    if conditions is None or conditions.HasField("null_value"):
        return None
    if not conditions.HasField("list_value"):
        problem = f"status.conditions is {_kind(conditions)}, not a list"
        if fix:
            del status.fields["conditions"]
        return problem
    values = conditions.list_value.values
    good = [v for v in values if v.HasField("struct_value") and _string(v.struct_value, "type")]
    if len(good) == len(values):
        return None
    if not fix:
        return "malformed conditions"
    kept = [struct_pb2.Value() for _ in good]
    for copy, original in zip(kept, good, strict=True):
        copy.CopyFrom(original)
    del values[:]
    values.extend(kept)
    return "status.conditions holds entries that are not conditions"


def _needs_status_fix(resource: struct_pb2.Struct) -> bool:
    return _status_problem(resource, fix=False) is not None


def screen(req: fnv1.RunFunctionRequest) -> Screened:
    """The request with malformed observed statuses removed and impostors left out."""
    broken = [k for k, r in req.observed.resources.items() if _needs_status_fix(r.resource)]
    broken_required = [
        (k, i)
        for k, items in req.required_resources.items()
        for i, item in enumerate(items.items)
        if _needs_status_fix(item.resource)
    ]
    impostors = {
        key: composed
        for key, composed in ((k, type_of(r.resource)) for k, r in req.desired.resources.items())
        if key in req.observed.resources
        and type_of(req.observed.resources[key].resource) != composed
    }
    if not (broken or broken_required or impostors):
        return Screened(req)
    request = fnv1.RunFunctionRequest()
    request.CopyFrom(req)
    warnings = []
    for key in broken:
        resource = request.observed.resources[key].resource
        problem = _status_problem(resource, fix=True)
        warnings.append(f"observed resource {describe(key, resource)}: {problem}; {_NOT_READY}")
    for key, index in broken_required:
        resource = request.required_resources[key].items[index].resource
        problem = _status_problem(resource, fix=True)
        warnings.append(f"required resource {describe(key, resource)}: {problem}; {_NOT_READY}")
    warnings += _drop_impostors(request, impostors)
    return Screened(request, tuple(warnings))


def impostors_after(screened: Screened, rsp: fnv1.RunFunctionResponse) -> dict[str, tuple]:
    """Observed resources of another type than what the response composes under their name."""
    observed = screened.request.observed.resources
    return {
        key: composed
        for key, composed in ((k, type_of(r.resource)) for k, r in rsp.desired.resources.items())
        if key in observed and type_of(observed[key].resource) != composed
    }


def without_impostors(screened: Screened, impostors: dict[str, tuple]) -> Screened:
    request = fnv1.RunFunctionRequest()
    request.CopyFrom(screened.request)
    return Screened(request, screened.warnings + tuple(_drop_impostors(request, impostors)))


def _drop_impostors(request: fnv1.RunFunctionRequest, impostors: dict[str, tuple]) -> list[str]:
    warnings = []
    for key, (api_version, kind) in sorted(impostors.items()):
        seen = describe(key, request.observed.resources[key].resource)
        warnings.append(
            f"observed resource {seen} is not the {api_version} {kind} composed there; "
            "not trusted (read as not yet created)"
        )
        del request.observed.resources[key]
    return warnings


# --- the XR ---------------------------------------------------------------------------------


def check_composite(req: fnv1.RunFunctionRequest) -> None:
    """Raises InvalidInput naming the first field of the XR no Kubernetes object could hold."""
    xr = req.observed.composite.resource
    if not xr.fields:
        return  # no composite at all: each function names what it misses (spec first)
    meta = _field(xr, "metadata")
    if meta is None:
        raise InvalidInput("metadata", "is required (every Kubernetes object has one)")
    if not meta.HasField("struct_value"):
        raise InvalidInput("metadata", f"must be an object, not {_kind(meta)}")
    fields = meta.struct_value
    if _field(fields, "name") is None:
        raise InvalidInput("metadata.name", "is required (every Kubernetes object has one)")
    for name in _STRINGS:
        value = _field(fields, name)
        if value is not None and not value.HasField("string_value"):
            raise InvalidInput(f"metadata.{name}", f"must be a string, not {_kind(value)}")
    for name in _STRING_MAPS:
        _string_map(fields, name)
    for name in ("spec", "status"):
        value = _field(xr, name)
        if value is not None:
            _finite(value, name)


def _string_map(meta: struct_pb2.Struct, name: str) -> None:
    """metadata.<name> (labels, annotations) is absent, null or a map of strings."""
    value = _field(meta, name)
    if value is None or value.HasField("null_value"):
        return
    if not value.HasField("struct_value"):
        raise InvalidInput(f"metadata.{name}", f"must be an object, not {_kind(value)}")
    for key, item in value.struct_value.fields.items():
        if not item.HasField("string_value"):
            raise InvalidInput(f"metadata.{name}[{key!r}]", f"must be a string, not {_kind(item)}")


def _finite(value: struct_pb2.Value, path: str) -> None:
    if value.HasField("number_value"):
        if not math.isfinite(value.number_value):
            raise InvalidInput(path, f"must be a finite number, not {value.number_value}")
    elif value.HasField("struct_value"):
        for key, item in value.struct_value.fields.items():
            _finite(item, f"{path}.{key}")
    elif value.HasField("list_value"):
        for index, item in enumerate(value.list_value.values):
            _finite(item, f"{path}[{index}]")
