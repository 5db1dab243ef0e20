"""Every XRD's spec schema and its pydantic model say the same: fields, types, bounds, enums,
patterns, required fields and defaults, at every depth.

The models are written by hand (their validators raise with the field path); this walk keeps
them from drifting from the XRDs, which are the contract. A pattern the model enforces in a
validator (fullmatch, so a trailing newline does not pass `$`) is stated in the model's JSON
schema through `json_schema_extra`, so it is compared like any other.
"""

from __future__ import annotations

import pathlib
import types
import typing
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from plnt.models import (
    coreweave_cluster,
    inference_class,
    inference_cluster,
    inference_grant,
    inference_quota,
    model_cache,
    model_deployment,
    model_endpoint,
    model_replica,
    model_service,
    workflow_run,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS: dict[str, type[BaseModel]] = {
    "coreweaveclusters": coreweave_cluster.CoreWeaveClusterSpec,
    "inferenceclasses": inference_class.InferenceClassSpec,
    "inferenceclusters": inference_cluster.InferenceClusterSpec,
    "inferencegrants": inference_grant.InferenceGrantSpec,
    "inferencequotas": inference_quota.InferenceQuotaSpec,
    "modelcaches": model_cache.ModelCacheSpec,
    "modeldeployments": model_deployment.ModelDeploymentSpec,
    "modelendpoints": model_endpoint.ModelEndpointSpec,
    "modelreplicas": model_replica.ModelReplicaSpec,
    "modelservices": model_service.ModelServiceSpec,
    "workflowruns": workflow_run.WorkflowRunSpec,
}
KEYS = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength")
KEYS += ("maxLength", "minItems", "maxItems", "pattern", "enum")


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema node with $ref followed and Optional's null branch dropped."""
    while "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    for combinator in ("anyOf", "allOf"):
        options = [o for o in node.get(combinator, []) if o.get("type") != "null"]
        if len(options) == 1:
            rest = {k: v for k, v in node.items() if k != combinator}
            node = {**_resolve(options[0], defs), **rest}
    return node


def _xrd_facets(node: dict[str, Any]) -> dict[str, Any]:
    out = {k: node[k] for k in KEYS if k in node}
    for bound in ("Minimum", "Maximum"):  # OpenAPI v3.0's boolean exclusive bounds
        if out.get(f"exclusive{bound}") is True:
            out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = "int-or-string"
    return out


def _model_facets(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    out = {k: node[k] for k in KEYS if k in node}
    if "const" in node:
        out["enum"] = [node["const"]]
    branches = [_resolve(o, defs) for o in node.get("anyOf", []) if o.get("type") != "null"]
    kinds = sorted(b.get("type", "") for b in branches)
    if kinds == ["integer", "string"]:
        out["type"] = "int-or-string"
        string = next(b for b in branches if b.get("type") == "string")
        out |= {k: string[k] for k in ("pattern", "minLength", "maxLength") if k in string}
    if all("enum" in b or "const" in b for b in branches) and branches:
        out["enum"] = [v for b in branches for v in b.get("enum", [b.get("const")])]
        out["type"] = branches[0].get("type")
    return out


def _field(cls: type[BaseModel] | None, alias: str) -> FieldInfo | None:
    if cls is None:
        return None
    for name, info in cls.model_fields.items():
        if (info.alias or name) == alias:
            return info
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (itself, optional, or as list items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """An XRD default as the API server stores it: nested defaults filled in."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in out and "default" in prop:
            out[name] = _defaulted(prop, prop["default"])
    return out


def _empty(value: Any) -> bool:
    """None, "", [], {} or a map of such: what a model fills in for an absent field with no
    XRD default (an absent list and an empty one mean the same), so it reads as no default;
    so does an object of only the defaults the XRD gives its fields."""
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value is None or value in ("", [])


def _model_default(info: FieldInfo) -> Any:
    value = info.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


def _walk(
    xrd: dict[str, Any],
    model: dict[str, Any],
    defs: dict[str, Any],
    cls: type[BaseModel] | None,
    info: FieldInfo | None,
    path: str,
    out: list[str],
) -> None:
    model = _resolve(model, defs)
    if xrd.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in xrd:
        return  # verbatim user data (pod templates, labels): no shape to compare
    want, got = _xrd_facets(xrd), _model_facets(model, defs)
    if want.get("type") == "number" and got.get("type") == "integer":
        got["type"] = "number"  # an int field of a number schema: refused as non-integral
    for key in KEYS:
        a, b = want.get(key), got.get(key)
        if key == "enum" and a and b:
            a, b = sorted(map(str, a)), sorted(map(str, b))
        if a != b:
            out.append(f"{path}: {key}: XRD {want.get(key)!r}, model {got.get(key)!r}")
    if "default" in xrd or "default" in model or (info is not None and not info.is_required()):
        want_default = _defaulted(xrd, xrd.get("default"))
        got_default = model.get("default") if info is None else _model_default(info)
        absent = want_default is None and (
            _empty(got_default) or got_default == _defaulted(xrd, {})
        )
        if want_default != got_default and not absent:
            out.append(f"{path}: default: XRD {want_default!r}, model {got_default!r}")
    nested = _model_in(info.annotation) if info is not None else cls
    if xrd.get("type") == "object" and "properties" in xrd:
        props = model.get("properties", {})
        for name in sorted(set(xrd["properties"]) | set(props)):
            at = f"{path}.{name}"
            if name not in props or name not in xrd["properties"]:
                out.append(f"{at}: only in the {'XRD' if name not in props else 'model'}")
                continue
            child = _field(nested, name)
            _walk(xrd["properties"][name], props[name], defs, nested, child, at, out)
        if sorted(xrd.get("required", [])) != sorted(model.get("required", [])):
            out.append(
                f"{path}: required: XRD {sorted(xrd.get('required', []))}, "
                f"model {sorted(model.get('required', []))}"
            )
    if xrd.get("type") == "array" and "items" in xrd and "items" in model:
        _walk(xrd["items"], model["items"], defs, nested, None, f"{path}[]", out)


@pytest.mark.parametrize("plural", sorted(MODELS))
def test_the_model_says_what_the_xrd_says(plural: str) -> None:
    xrd = yaml.safe_load((REPO / "apis" / plural / "definition.yaml").read_text())
    (version,) = xrd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    model = MODELS[plural]
    schema = model.model_json_schema(by_alias=True, mode="validation")
    differences: list[str] = []
    _walk(spec, schema, schema.get("$defs", {}), model, None, "spec", differences)
    assert differences == []


def test_the_walk_sees_a_difference() -> None:
    """The comparison is not vacuous: a bound, an enum, a default and a field that differ."""
    xrd = {
        "type": "object",
        "required": ["n"],
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 9},
            "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
            "extra": {"type": "string"},
        },
    }

    class Wrong(BaseModel):
        n: int = Field(ge=1, le=10)
        mode: typing.Literal["A", "C"] = "C"

    schema = Wrong.model_json_schema(by_alias=True)
    differences: list[str] = []
    _walk(xrd, schema, schema.get("$defs", {}), Wrong, None, "spec", differences)
    assert differences == [
        "spec.extra: only in the XRD",
        "spec.mode: enum: XRD ['A', 'B'], model ['A', 'C']",
        "spec.mode: default: XRD 'A', model 'C'",
        "spec.n: maximum: XRD 9, model 10",
    ]
