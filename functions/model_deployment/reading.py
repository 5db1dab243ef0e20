"""Reading the fleet out of the request: only the fields the scheduler uses, converted once.

A 1,000-cluster fleet is most of a RunFunction's time if every object is turned into a dict
whole (`xp.to_dict` goes through protobuf's JSON conversion). Real objects also carry what
the scheduler never reads (managed fields, last-applied annotations, pod templates), so each
kind is read through a *shape*: a dict names the keys to keep, a one-element list applies its
shape to every item, and True keeps the value whole.
"""

from __future__ import annotations

from typing import Any

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from plnt import binding

Shape = Any  # dict[str, Shape] | list[Shape] | bool

CLUSTER: Shape = {
    "metadata": {"name": True, "labels": True},
    "status": {"conditions": True, "pools": True, "gateway": True},
}
CLUSTER_SPEC: Shape = {"spec": {"nodePools": True}}  # only read while status has no pools
CLASS: Shape = {"metadata": {"name": True}, "spec": {"devices": True, "nodeResources": True}}
REPLICA: Shape = {
    "metadata": {
        "name": True,
        "namespace": True,
        "labels": True,
        "annotations": dict.fromkeys(binding.ANNOTATIONS, True),
    },
    "spec": {
        "clusterName": True,
        "engines": [
            {
                "name": True,
                "copies": True,
                "members": [
                    {"role": True, "worker": True, "nodePoolName": True, "deviceRequests": True}
                ],
            }
        ],
    },
}


def require_all(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    name: str,
    api_version: str,
    kind: str,
    *,
    shape: Shape,
) -> list[dict[str, Any]] | None:
    """Every object of `kind` in every namespace (an empty label selector without a namespace),
    read through `shape`; None until Crossplane has answered. Declared on every call."""
    response.require_resources(rsp, name, api_version, kind, match_labels={})
    rsp.requirements.resources[name].match_labels.SetInParent()
    if name not in req.required_resources:
        return None
    return [read(item.resource, shape) for item in req.required_resources[name].items]


def read(struct: struct_pb2.Struct, shape: Shape) -> dict[str, Any]:
    out = _struct(struct, shape if isinstance(shape, dict) else None)
    if shape is CLUSTER and not (out.get("status") or {}).get("pools"):
        out.update(_struct(struct, CLUSTER_SPEC))
    return out


def _struct(struct: struct_pb2.Struct, shape: dict[str, Shape] | None) -> dict[str, Any]:
    fields = struct.fields
    if shape is None:
        return {k: _value(v, True) for k, v in fields.items()}
    return {k: _value(fields[k], sub) for k, sub in shape.items() if k in fields}


def _value(value: struct_pb2.Value, shape: Shape) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _struct(value.struct_value, shape if isinstance(shape, dict) else None)
    if kind == "list_value":
        item_shape = shape[0] if isinstance(shape, list) and shape else True
        return [_value(v, item_shape) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number  # as xp.to_dict does
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None
