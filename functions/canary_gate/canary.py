"""What the gate reads about a canary: its revision, replicas, endpoints and served model name.

Pure functions over the request's plain dicts (`xp.composite`, `xp.observed_resources`,
`xp.desired_resources`), so the decision in `fn.py` stays readable and these stay testable.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from plnt import contracts, labels, xp

MODEL_REPLICA = "ModelReplica"
MODEL_ENDPOINT = "ModelEndpoint"

# Engine flags naming the model, most specific first: the name the server answers to
# (vLLM, SGLang, TensorRT-LLM), then the weights it loads (vLLM, SGLang, TGI), which is also
# the name vLLM serves under when no --served-model-name is given.
SERVED_NAME_FLAGS = ("--served-model-name",)
MODEL_FLAGS = ("--model", "--model-path", "--model-id")
# Commands whose first positional argument is the model (`vllm serve M`, `trtllm-serve M`).
SERVE_WORDS = ("serve", "trtllm-serve")


@dataclass(frozen=True)
class Replica:
    name: str  # composition resource name
    ready: bool  # observed, with Crossplane's Ready condition True


@dataclass(frozen=True)
class Endpoint:
    name: str  # metadata.name of the ModelEndpoint
    namespace: str
    spec: dict[str, Any]


def canary_revision(observed_xr: Mapping[str, Any], desired_xr: Mapping[str, Any]) -> str | None:
    """The revision awaiting a verdict. The previous step's desired status is the freshest
    decision (it may just have promoted or rolled back); the observed status is the fallback
    when that step wrote no `revisions`."""
    for xr in (desired_xr, observed_xr):
        revisions = (xr.get("status") or {}).get("revisions")
        if isinstance(revisions, Mapping):
            return revisions.get("canary") or None
    return None


def last_gate(observed_xr: Mapping[str, Any], desired_xr: Mapping[str, Any]) -> dict[str, Any]:
    """`status.canary.gate` as the previous step left it, else as observed."""
    for xr in (desired_xr, observed_xr):
        gate = contracts.gate_in(xr)
        if isinstance(gate, Mapping):
            return dict(gate)
    return {}


def revision_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(labels.REVISION)


def _of_revision(
    objs: Mapping[str, dict[str, Any]], kind: str, revision: str
) -> dict[str, dict[str, Any]]:
    return {
        name: obj
        for name, obj in objs.items()
        if obj.get("kind") == kind and revision_of(obj) == revision
    }


def canary_replicas(
    revision: str,
    observed: Mapping[str, dict[str, Any]],
    desired: Mapping[str, dict[str, Any]],
) -> list[Replica]:
    """The canary's ModelReplicas: every one the previous step wants (observed or not yet),
    plus any observed one when no step composed them (the gate run on its own)."""
    wanted = _of_revision(desired, MODEL_REPLICA, revision)
    seen = _of_revision(observed, MODEL_REPLICA, revision)
    names = sorted(wanted) if wanted else sorted(seen)
    return [Replica(name=n, ready=xp.is_ready(seen.get(n))) for n in names]


def canary_endpoints(
    revision: str,
    observed: Mapping[str, dict[str, Any]],
    desired: Mapping[str, dict[str, Any]],
) -> list[Endpoint]:
    """Observed ModelEndpoints of the canary revision, sorted by name. When the previous step
    composed resources, only endpoints it still wants count (it drops the endpoint of a replica
    whose cluster is degraded)."""
    seen = _of_revision(observed, MODEL_ENDPOINT, revision)
    if desired:
        seen = {n: o for n, o in seen.items() if n in desired}
    out = [
        Endpoint(
            name=(o.get("metadata") or {}).get("name") or n,
            namespace=(o.get("metadata") or {}).get("namespace") or "",
            spec=dict(o.get("spec") or {}),
        )
        for n, o in seen.items()
    ]
    return sorted(out, key=lambda e: e.name)


def replica_engines(
    revision: str, observed: Mapping[str, dict[str, Any]], xr_spec: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The canary revision's engines: from an observed canary ModelReplica (exactly that
    revision's), else from the XR spec (the canary is always the spec's current revision)."""
    for _, obj in sorted(_of_revision(observed, MODEL_REPLICA, revision).items()):
        engines = (obj.get("spec") or {}).get("engines")
        if engines:
            return list(engines)
    return list(xr_spec.get("engines") or [])


def served_model(engines: Iterable[Mapping[str, Any]]) -> str | None:
    """The OpenAI `model` name the engines answer to, read from their container command and
    args. Serving members only (Workers of a multi-node engine run no API server); the first
    engine, member and container that names a model wins. Within one container:
    `--served-model-name` (its first name), else `--model`/`--model-path`/`--model-id`, else
    the positional argument of `vllm serve M` / `trtllm-serve M`."""
    for engine in engines:
        for member in engine.get("members") or []:
            if member.get("role") == "Worker":
                continue
            pod = ((member.get("template") or {}).get("spec")) or {}
            for container in pod.get("containers") or []:
                tokens = _tokens(container.get("command")) + _tokens(container.get("args"))
                name = model_from_args(tokens)
                if name:
                    return name
    return None


def _tokens(value: Any) -> list[str]:
    """Command/args as tokens; a single `sh -c "..."` style string is split like a shell."""
    out: list[str] = []
    for item in value or []:
        text = str(item)
        try:
            out.extend(shlex.split(text) if " " in text else [text])
        except ValueError:
            out.append(text)
    return out


def model_from_args(tokens: list[str]) -> str | None:
    """The model name in one container's command line (see `served_model`)."""
    flags: dict[str, str] = {}
    positional: str | None = None
    after_serve = False
    for i, token in enumerate(tokens):
        if token.startswith("--"):
            after_serve = False
            flag, eq, value = token.partition("=")
            if not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                value = tokens[i + 1]
            if value and flag not in flags:
                flags[flag] = value
            continue
        if after_serve and positional is None:
            positional = token
        after_serve = token.rsplit("/", 1)[-1] in SERVE_WORDS
    for flag in (*SERVED_NAME_FLAGS, *MODEL_FLAGS):
        if flags.get(flag):
            return flags[flag]
    return positional
