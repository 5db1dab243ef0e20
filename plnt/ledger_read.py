"""The one reading of the binder's ledger ConfigMaps (a cluster's ledger, a quota ledger), pure,
for every reader: the ModelReplica function that verifies a binding, the binder that decides on
top of a ledger.

A ledger that cannot be read is not an empty ledger. Read as empty, a damaged ledger would say
that nothing is committed: the renderer would un-render serving replicas, the binder would
commit the same devices twice. So parsing ends in either the model or an `Unreadable` that
names the ConfigMap and what is wrong with it, and each reader decides what unknown means for
it (docs/model-replica.md, "Unknown is not unbound").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

import pydantic

Model = TypeVar("Model", bound=pydantic.BaseModel)


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A ledger ConfigMap that cannot be read: which one ("<namespace>/<name>") and what is
    wrong with it. `missing`: it does not exist at all (a cluster the binder has committed
    nothing to has none yet; a reader that knows a commit happened knows it was lost)."""

    configmap: str
    problem: str
    missing: bool = False

    def __str__(self) -> str:
        return f"ConfigMap {self.configmap} {self.problem}"


def parse(
    model: type[Model],
    configmap: Mapping[str, Any] | None,
    *,
    where: str,
    namespace: str,
    label: str,
    data_key: str,
) -> Model | Unreadable:
    """The `model` a ledger ConfigMap holds under `data_key`, or why it cannot be read.

    `where`: the ConfigMap the reader looked for ("<namespace>/<name>"), named in every problem;
    `configmap`: what it found by that name (None: nothing). The binder writes its ledgers in
    `namespace` with `label` set to "true"; a ConfigMap without either is not one it wrote."""
    if configmap is None:
        return Unreadable(where, "does not exist", missing=True)
    meta = configmap.get("metadata") or {}
    found_in = meta.get("namespace") or ""
    if found_in != namespace:
        return Unreadable(
            f"{found_in}/{meta.get('name', '')}",
            f"is in namespace {found_in or '(none)'}, not {namespace} where the binder keeps "
            "its ledgers",
        )
    if (meta.get("labels") or {}).get(label) != "true":
        return Unreadable(where, f"lacks the label {label}=true the binder writes")
    raw = (configmap.get("data") or {}).get(data_key)
    if not raw:
        return Unreadable(where, f"has no data key {data_key}")
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as err:
        return Unreadable(where, f"has a {data_key} that {describe(err, model.__name__)}")


def describe(err: pydantic.ValidationError, what: str) -> str:
    """A validation error in one line: bad JSON, or the first field that does not fit `what`
    (never the values: a reader prints this in conditions and events)."""
    problems = err.errors(include_url=False, include_input=False)
    first = problems[0]
    if first["type"] == "json_invalid":
        return f"is not JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
    path = ".".join(str(p) for p in first["loc"]) or "(the top level)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"is not a {what}: {path}: {first['msg']}{more}"
