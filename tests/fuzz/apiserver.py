"""What the Kubernetes API server would say about an object, offline and in-process.

jsonschema's Draft 7 is not the API server's OpenAPI dialect, so the schemas are translated
first (:func:`to_json_schema`): ``nullable`` becomes a ``null`` type,
``x-kubernetes-int-or-string`` an integer-or-string, a boolean ``exclusiveMinimum`` (OpenAPI
3.0) a numeric one, and ``pattern`` gets Go's RE2 meaning of ``$`` (end of text; Python's ``$``
also matches before a trailing newline). Before validating, :func:`admitted` does what the API
server does to nulls: a null where the schema does not allow one is replaced by the field's
default, or dropped when there is none (apiextensions-apiserver's defaulting and
PruneNonNullableNullsWithoutDefaults). CEL rules (``x-kubernetes-validations``) are not
evaluated: a function may refuse such input with a Fatal, which the harness always allows.

:func:`metadata_errors` checks what ObjectMeta validation checks for every object (DNS names,
label and annotation keys, label values) and the label maps inside it (pod templates, selectors,
CKS NodePool nodeLabels).
"""

from __future__ import annotations

import copy
import functools
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO / "third_party" / "crds"  # vendored: third_party/SOURCES

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# Fields that hold label maps wherever they appear.
LABEL_MAP_KEYS = frozenset({"labels", "matchLabels", "nodeLabels", "nodeSelector"})
# Kinds whose names must be DNS labels rather than subdomains.
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service"})


# What Crossplane adds to the CRD it generates from an XRD: typed status conditions.
CROSSPLANE_CONDITIONS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["lastTransitionTime", "reason", "status", "type"],
        "properties": {
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "reason": {"type": "string"},
            "status": {"type": "string"},
            "type": {"type": "string"},
        },
    },
}
# Built-in kinds the examples read (a required kubeconfig or token Secret), in the shape of
# their OpenAPI schema.
BUILTIN_SCHEMAS = {
    ("v1", "Secret"): {
        "type": "object",
        "properties": {
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
            "stringData": {"type": "object", "additionalProperties": {"type": "string"}},
            "type": {"type": "string"},
            "immutable": {"type": "boolean"},
        },
    },
}


@functools.cache
def openapi_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """openAPIV3Schema by (apiVersion, kind): our XRDs (as the CRDs Crossplane generates from
    them), the third-party CRDs and the built-in kinds the examples read."""
    out: dict[tuple[str, str], dict[str, Any]] = dict(BUILTIN_SCHEMAS)
    for path in [*REPO.glob("apis/*/definition.yaml"), *SHARED_CRDS.glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in (
                "CustomResourceDefinition",
                "CompositeResourceDefinition",
            ):
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = copy.deepcopy((version.get("schema") or {}).get("openAPIV3Schema"))
                if schema and doc["kind"] == "CompositeResourceDefinition":
                    status = schema.setdefault("properties", {}).setdefault("status", {})
                    status.setdefault("type", "object")
                    status.setdefault("properties", {})["conditions"] = CROSSPLANE_CONDITIONS
                if schema:
                    out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return out


def openapi_schema(obj: dict[str, Any]) -> dict[str, Any] | None:
    return openapi_schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))


def go_pattern(pattern: str) -> str:
    """``pattern`` with each end anchor ``$`` made Python's ``\\Z``, as RE2 reads ``$``."""
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append(r"\Z")
            continue
        out.append(char)
    return "".join(out)


def to_json_schema(node: Any) -> Any:
    """An OpenAPI v3 (Kubernetes structural) schema as the JSON Schema jsonschema checks."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: (v if k in ("default", "enum", "example") else to_json_schema(v))
        for k, v in node.items()
        if k != "nullable"
    }
    if "properties" in node:  # property names are data, not keywords
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if isinstance(node.get("pattern"), str):
        out["pattern"] = go_pattern(node["pattern"])
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # OpenAPI 3.0 (as Kubernetes reads it): a boolean that makes the bound exclusive.
        if isinstance(node.get(exclusive), bool):
            del out[exclusive]
            if node[exclusive] and bound in node:
                out[exclusive] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string") and "type" not in node and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        for combinator in ("anyOf", "oneOf"):
            if combinator in out:
                out[combinator] = [*out[combinator], {"type": "null"}]
    return out


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator | None:
    schema = openapi_schemas().get((api_version, kind))
    if schema is None:
        return None
    return jsonschema.Draft7Validator(to_json_schema(schema))


def subschema(schema: dict[str, Any] | None, key: Any) -> dict[str, Any] | None:
    """The schema of ``key`` (a property name or a list index) inside ``schema``."""
    if not schema:
        return None
    if isinstance(key, int):
        return schema.get("items")
    if key in (schema.get("properties") or {}):
        return schema["properties"][key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def schema_at(schema: dict[str, Any] | None, path: tuple) -> dict[str, Any] | None:
    for key in path:
        schema = subschema(schema, key)
    return schema


def admitted(value: Any, schema: dict[str, Any] | None) -> Any:
    """``value`` after the API server's null handling: defaulted, or pruned, where not nullable."""
    if isinstance(value, list):
        items = (schema or {}).get("items")
        return [admitted(v, items) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        sub = subschema(schema, key)
        if item is None and sub is not None and not sub.get("nullable"):
            if "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            continue
        out[key] = admitted(item, sub)
    return out


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Why the API server would refuse ``obj`` (its CEL rules aside); [] if no schema is known."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind must be strings"]
    validator = _validator(api_version, kind)
    if validator is None:
        return []
    obj = admitted(obj, openapi_schema(obj))
    return [_describe(e) for e in validator.iter_errors(obj)]


def status_errors(xr: dict[str, Any], status: dict[str, Any]) -> list[str]:
    """Why the XRD's status schema would refuse the status a function wrote."""
    schema = openapi_schema(xr)
    status_schema = ((schema or {}).get("properties") or {}).get("status")
    if status_schema is None:
        return []
    validator = jsonschema.Draft7Validator(to_json_schema(status_schema))
    return [f"status.{_describe(e)}" for e in validator.iter_errors(status)]


def _describe(err: jsonschema.ValidationError) -> str:
    return f"{'.'.join(map(str, err.absolute_path))}: {err.message}"


def metadata_errors(obj: dict[str, Any]) -> list[str]:
    """What ObjectMeta validation refuses: names, namespace, label and annotation keys/values."""
    meta = obj.get("metadata") or {}
    errors = []
    name = meta.get("name")
    if name is not None:
        if obj.get("kind") in LABEL_NAMED_KINDS:
            errors += _dns(name, DNS_LABEL, 63, "metadata.name")
        else:
            errors += _dns(name, DNS_SUBDOMAIN, 253, "metadata.name")
    if meta.get("namespace") is not None:
        errors += _dns(meta["namespace"], DNS_LABEL, 63, "metadata.namespace")
    labels = meta.get("labels") or {}
    errors += _label_map(labels, "metadata.labels") if isinstance(labels, dict) else ["labels"]
    errors += label_map_errors({k: v for k, v in obj.items() if k != "metadata"})
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*errors, "metadata.annotations: not a map"]
    for key, value in annotations.items():
        errors += _qualified_key(key, "metadata.annotations")
        if not isinstance(value, str):
            errors.append(f"metadata.annotations[{key!r}]: not a string")
    return errors


def label_map_errors(value: Any, where: str = "") -> list[str]:
    """Label maps anywhere in ``value`` (pod templates, selectors, CKS nodeLabels) as labels."""
    errors = []
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            # a label map holds scalars (ModelDeployment's nodeSelector holds a device list)
            is_map = isinstance(item, dict) and not any(
                isinstance(v, dict | list) for v in item.values()
            )
            if key in LABEL_MAP_KEYS and is_map:
                errors += _label_map(item, at)
            else:
                errors += label_map_errors(item, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            errors += label_map_errors(item, f"{where}[{i}]")
    return errors


def _label_map(labels: dict[str, Any], where: str) -> list[str]:
    errors = []
    for key, value in labels.items():
        errors += _qualified_key(key, where)
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            errors.append(f"{where}[{key!r}]: invalid label value {value!r}")
    return errors


def _dns(value: Any, pattern: re.Pattern[str], limit: int, where: str) -> list[str]:
    if isinstance(value, str) and len(value) <= limit and pattern.fullmatch(value):
        return []
    return [f"{where}: {value!r} is not a DNS name of at most {limit} characters"]


def _qualified_key(key: str, where: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    bad_prefix = "/" in key and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix))
    if bad_prefix or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        return [f"{where}: invalid key {key!r}"]
    return []


def embedded_manifests(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Manifests in a provider-kubernetes Object: the one it applies on its cluster and, when
    observed, the one it last read back."""
    if obj.get("apiVersion", "").startswith("kubernetes.") and obj.get("kind") == "Object":
        for root, field in (("spec", "forProvider"), ("status", "atProvider")):
            node: Any = obj
            for key in (root, field, "manifest"):  # a mutation may put anything anywhere
                node = node.get(key) if isinstance(node, dict) else None
            manifest = node
            if isinstance(manifest, dict):
                yield manifest
