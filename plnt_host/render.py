"""`plnt render`: run a Composition's pipeline in-process, as `crossplane render` does.

A scenario folder holds ``xr.yaml``, optionally ``required/`` (resources functions may ask
for) and ``observed/`` (observed composed resources). The pipeline runs through each
function's real RunFunction handler, protobuf in and protobuf out; a step whose
requirements change is re-run until they are stable, as Crossplane does. The output mirrors
`crossplane render`: the XR with its status and conditions first, then every composed
resource with the metadata Crossplane gives it. ``tree=True`` renders composed XRs of plnt's
own kinds too, depth first; observed resources belong to the XR named by their controller
ownerReference (or to the top XR when they have none).
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

import plnt
from plnt import xp
from plnt.capacity import binding, commit, ledger_parse
from plnt_host import runtime

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# Shipped inside the package (plnt/compositions links to the repository's compositions/), so
# render works from an installed wheel as well as from a checkout.
COMPOSITIONS_DIR = pathlib.Path(plnt.__file__).parent / "compositions"
MAX_REQUIREMENT_ITERATIONS = 5  # what Crossplane allows before it gives up
CONDITION_TIME = "2024-01-01T00:00:00Z"  # crossplane render's fixed lastTransitionTime
COMPOSITE_LABEL = "crossplane.io/composite"


class ScenarioError(Exception):
    """Bad input: the message names the file."""


class PipelineError(Exception):
    """A step returned a Fatal result or could not run."""


@dataclasses.dataclass
class Scenario:
    xr: dict[str, Any]
    required: list[dict[str, Any]]
    observed: list[dict[str, Any]]
    path: pathlib.Path


@dataclasses.dataclass
class Rendered:
    xr: dict[str, Any]
    composed: list[dict[str, Any]]
    results: list[dict[str, Any]]
    context: dict[str, Any]
    input_xr: dict[str, Any] = dataclasses.field(default_factory=dict)
    children: list[Rendered] = dataclasses.field(default_factory=list)

    def full_xr(self) -> dict[str, Any]:
        """The XR as the API server would hold it: input spec and metadata, rendered status."""
        return {**copy.deepcopy(self.input_xr), "status": self.xr.get("status", {})}

    def tree(self) -> Iterator[Rendered]:
        yield self
        for child in self.children:
            yield from child.tree()

    def stream(self, with_results: bool = False) -> Iterator[dict[str, Any]]:
        yield self.xr
        yield from self.composed
        if with_results:
            yield from self.results
        for child in self.children:
            yield from child.stream(with_results)


# --- loading ---------------------------------------------------------------------------


def load_yaml_docs(path: pathlib.Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{path}:{where} invalid YAML") from None
    except OSError as err:
        raise ScenarioError(f"{path}: {err.strerror}") from None
    out = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            raise ScenarioError(f"{path}: every document must be a Kubernetes object")
        out.append(doc)
    return out


def load_folder(path: pathlib.Path) -> list[dict[str, Any]]:
    if not path.is_dir():
        return []
    files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    return [doc for f in files for doc in load_yaml_docs(f)]


def load_path(path: pathlib.Path) -> list[dict[str, Any]]:
    """A YAML file or a folder of them (as crossplane render's resource flags take)."""
    if path.is_dir():
        return load_folder(path)
    if path.is_file():
        return load_yaml_docs(path)
    raise ScenarioError(f"{path}: no such file or folder")


def load_scenario(path: pathlib.Path) -> Scenario:
    xr_file = path / "xr.yaml"
    if not path.is_dir():
        raise ScenarioError(f"{path}: not a scenario folder")
    if not xr_file.is_file():
        raise ScenarioError(f"{xr_file}: no xr.yaml in the scenario folder")
    docs = load_yaml_docs(xr_file)
    if len(docs) != 1:
        raise ScenarioError(f"{xr_file}: must hold exactly one XR, found {len(docs)}")
    required = load_folder(path / "required")
    return Scenario(
        xr=docs[0],
        required=[*required, *played_binder(docs[0], required)],
        observed=load_folder(path / "observed"),
        path=path,
    )


def compositions(directory: pathlib.Path = COMPOSITIONS_DIR) -> dict[tuple[str, str], dict]:
    """Compositions by the (apiVersion, kind) of the XR they compose."""
    out = {}
    for f in sorted(directory.glob("*.yaml")):
        for doc in load_yaml_docs(f):
            if doc["kind"] == "Composition":
                ref = doc["spec"]["compositeTypeRef"]
                out[(ref["apiVersion"], ref["kind"])] = doc
    return out


# --- running the pipeline ---------------------------------------------------------------


def _struct(obj: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(obj)
    return s


def _matches(obj: dict[str, Any], sel: fnv1.ResourceSelector) -> bool:
    if obj.get("apiVersion") != sel.api_version or obj.get("kind") != sel.kind:
        return False
    meta = obj.get("metadata") or {}
    if sel.namespace and meta.get("namespace", "") != sel.namespace:
        return False
    which = sel.WhichOneof("match")
    if which == "match_name":
        return meta.get("name") == sel.match_name
    if which == "match_labels":
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in sel.match_labels.labels.items())
    return True


def fetch(pool: Iterable[dict[str, Any]], sel: fnv1.ResourceSelector) -> fnv1.Resources:
    """The objects of `pool` that `sel` matches, as Crossplane answers a requirement."""
    return fnv1.Resources(
        items=[fnv1.Resource(resource=_struct(o)) for o in pool if _matches(o, sel)]
    )


def _step_function(step: dict[str, Any]) -> runtime.RunFunction:
    return runtime.load(step["functionRef"]["name"])


def run_pipeline(
    composition: dict[str, Any],
    xr: dict[str, Any],
    observed: list[dict[str, Any]],
    required: list[dict[str, Any]],
    *,
    context: dict[str, Any] | None = None,
    trace: list[tuple[str, fnv1.RunFunctionRequest]] | None = None,
) -> tuple[fnv1.State, list[tuple[str, fnv1.Result]], list[fnv1.Condition], dict[str, Any]]:
    """Runs every step; ``trace`` collects (function name, final request) for benchmarks."""
    observed_state = fnv1.State(composite=fnv1.Resource(resource=_struct(xr)))
    for obj in observed:
        name = (obj.get("metadata", {}).get("annotations") or {}).get(xp.COMPOSITION_RESOURCE_NAME)
        if name:
            observed_state.resources[name].resource.CopyFrom(_struct(obj))
    desired = fnv1.State()
    ctx = _struct(context or {})
    results: list[tuple[str, fnv1.Result]] = []
    conditions: list[fnv1.Condition] = []
    for step in composition["spec"]["pipeline"]:
        run = _step_function(step)
        req = fnv1.RunFunctionRequest(observed=observed_state, desired=desired, context=ctx)
        if step.get("input") is not None:
            req.input.CopyFrom(_struct(step["input"]))
        for sel in (step.get("requirements") or {}).get("requiredResources") or []:
            bootstrap = fnv1.ResourceSelector(api_version=sel["apiVersion"], kind=sel["kind"])
            if sel.get("name"):
                bootstrap.match_name = sel["name"]
            elif sel.get("matchLabels"):
                bootstrap.match_labels.labels.update(sel["matchLabels"])
            req.required_resources[sel["requirementName"]].CopyFrom(fetch(required, bootstrap))
        rsp, final_req = run_with_requirements(run, req, required, step["step"])
        if trace is not None:
            trace.append((step["functionRef"]["name"], final_req))
        for res in rsp.results:
            if res.severity == fnv1.SEVERITY_FATAL:
                raise PipelineError(
                    f"pipeline step {step['step']!r} returned a fatal result: {res.message}"
                )
            results.append((step["step"], res))
        conditions.extend(rsp.conditions)
        desired = rsp.desired
        ctx = rsp.context
    return desired, results, conditions, xp.to_dict(ctx)


def run_with_requirements(
    run: runtime.RunFunction,
    req: fnv1.RunFunctionRequest,
    required: list[dict[str, Any]],
    step: str,
) -> tuple[fnv1.RunFunctionResponse, fnv1.RunFunctionRequest]:
    """Calls the function until what it requires stops changing, answering each requirement from
    `required` as Crossplane does: the last response and the request that got it."""
    previous = None
    for _ in range(MAX_REQUIREMENT_ITERATIONS):
        rsp = runtime.call_sync(run, req, step)
        wanted = rsp.requirements.resources
        if previous is not None and dict(wanted) == previous:
            return rsp, req
        if not wanted:
            return rsp, req
        previous = dict(wanted)
        req = copy.deepcopy(req)
        req.required_resources.clear()
        for name, sel in wanted.items():
            req.required_resources[name].CopyFrom(fetch(required, sel))
    raise PipelineError(f"pipeline step {step!r}: requirements did not stabilise")


# --- assembling the output ---------------------------------------------------------------


def _composed_metadata(obj: dict[str, Any], xr: dict[str, Any], name: str) -> dict[str, Any]:
    """What Crossplane sets on every composed resource (SetComposedResourceMetadata)."""
    meta = obj.setdefault("metadata", {})
    xr_meta = xr.get("metadata") or {}
    prefix = (xr_meta.get("labels") or {}).get(COMPOSITE_LABEL) or xr_meta.get("name", "")
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = f"{prefix}-"
    if xr_meta.get("namespace"):
        meta["namespace"] = xr_meta["namespace"]
    meta.setdefault("annotations", {})[xp.COMPOSITION_RESOURCE_NAME] = name
    meta.setdefault("labels", {})[COMPOSITE_LABEL] = prefix
    owner = {
        "apiVersion": xr["apiVersion"],
        "kind": xr["kind"],
        "name": xr_meta.get("name", ""),
        "uid": xr_meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs = [r for r in meta.get("ownerReferences") or [] if not r.get("controller")]
    meta["ownerReferences"] = [*refs, owner]
    return obj


def _condition(c: fnv1.Condition) -> dict[str, Any]:
    status = {
        fnv1.STATUS_CONDITION_TRUE: "True",
        fnv1.STATUS_CONDITION_FALSE: "False",
    }.get(c.status, "Unknown")
    out = {"type": c.type, "status": status, "lastTransitionTime": CONDITION_TIME}
    if c.reason:
        out["reason"] = c.reason
    if c.message:
        out["message"] = c.message
    return out


def _set_condition(conditions: list[dict[str, Any]], cond: dict[str, Any]) -> None:
    for i, existing in enumerate(conditions):
        if existing["type"] == cond["type"]:
            conditions[i] = cond
            return
    conditions.append(cond)


def _stable_names(names: list[str], first_n: int = 3) -> str:
    """Crossplane's StableNAndSomeMore, word for word: sorted, the first n, then a count."""
    names = sorted(names)
    if len(names) > first_n:
        return f"{', '.join(names[:first_n])}, and {len(names) - first_n} more"
    if len(names) == first_n:
        return f"{', '.join(names[: first_n - 1])}, and {names[first_n - 1]}"
    return ", ".join(names)


def render(
    scenario: Scenario,
    *,
    tree: bool = False,
    catalogue: dict[tuple[str, str], dict] | None = None,
    context: dict[str, Any] | None = None,
) -> Rendered:
    catalogue = catalogue if catalogue is not None else compositions()
    return _render_xr(
        scenario.xr, scenario.observed, scenario.required, catalogue, tree=tree, context=context
    )


def _owned_by(obj: dict[str, Any], xr: dict[str, Any]) -> bool:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == xr["kind"]:
            return ref.get("name") == xr["metadata"].get("name")
    return False


def _has_controller(obj: dict[str, Any]) -> bool:
    return any(
        r.get("controller") for r in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


def _render_xr(
    xr: dict[str, Any],
    all_observed: list[dict[str, Any]],
    required: list[dict[str, Any]],
    catalogue: dict[tuple[str, str], dict],
    *,
    tree: bool,
    context: dict[str, Any] | None,
    top: bool = True,
) -> Rendered:
    key = (xr["apiVersion"], xr["kind"])
    composition = catalogue.get(key)
    if composition is None:
        raise ScenarioError(
            f"no Composition in compositions/ composes {xr['kind']} ({xr['apiVersion']})"
        )
    observed = [o for o in all_observed if _owned_by(o, xr) or (top and not _has_controller(o))]
    desired, results, conditions, ctx = run_pipeline(
        composition, xr, observed, required, context=context
    )
    observed_by_name = {
        (o["metadata"].get("annotations") or {}).get(xp.COMPOSITION_RESOURCE_NAME): o
        for o in observed
    }

    composed, unready = _composed(desired, observed_by_name, xr)
    out_xr = _rendered_xr(xr, desired.composite, conditions, unready)

    rendered = Rendered(
        xr=out_xr,
        composed=composed,
        results=[
            {
                "apiVersion": "render.crossplane.io/v1beta1",
                "kind": "Result",
                "step": step,
                "severity": fnv1.Severity.Name(r.severity),
                "message": r.message,
            }
            for step, r in results
        ],
        context=ctx,
        input_xr=xr,
    )
    if tree:
        children = [
            _as_child_xr(obj, observed_by_name)
            for obj in composed
            if (obj["apiVersion"], obj["kind"]) in catalogue
        ]
        committed = _preview_binding(children, required)
        for child in children:
            rendered.children.append(
                _render_xr(
                    child,
                    all_observed,
                    [*required, *committed],
                    catalogue,
                    tree=tree,
                    context=None,
                    top=False,
                )
            )
    return rendered


def _composed(
    desired: fnv1.State, observed_by_name: dict[Any, dict[str, Any]], xr: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The composed resources by name, named as observed where they exist, and the names of
    those not ready."""
    composed = []
    unready = []
    for name in sorted(desired.resources):
        dr = desired.resources[name]
        if dr.ready != fnv1.READY_TRUE:
            unready.append(name)
        obj = xp.to_dict(dr.resource)
        seen = observed_by_name.get(name)
        if seen is not None:
            meta = obj.setdefault("metadata", {})
            for field in ("name", "namespace", "generateName"):
                if seen["metadata"].get(field):
                    meta[field] = seen["metadata"][field]
        composed.append(_composed_metadata(obj, xr, name))
    return composed, unready


def _rendered_xr(
    xr: dict[str, Any],
    composite: fnv1.Resource,
    conditions: list[fnv1.Condition],
    unready: list[str],
) -> dict[str, Any]:
    """The XR as rendered: the desired composite under the input's identity, with Ready as
    Crossplane derives it and the functions' conditions but Crossplane's own."""
    out_xr = xp.to_dict(composite.resource)
    out_xr["apiVersion"] = xr["apiVersion"]
    out_xr["kind"] = xr["kind"]
    meta = {"name": xr["metadata"]["name"]}
    if xr["metadata"].get("namespace"):
        meta["namespace"] = xr["metadata"]["namespace"]
    out_xr["metadata"] = meta
    ready = {"type": "Ready", "status": "True", "reason": "Available"}
    if composite.ready == fnv1.READY_FALSE:
        ready = {"type": "Ready", "status": "False", "reason": "Creating"}
    elif composite.ready == fnv1.READY_UNSPECIFIED and unready:
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "Creating",
            "message": f"Unready resources: {_stable_names(unready)}",
        }
    ready["lastTransitionTime"] = CONDITION_TIME
    status = out_xr.setdefault("status", {})
    conds: list[dict[str, Any]] = []
    _set_condition(conds, ready)
    for c in conditions:
        if c.type in ("Ready", "Synced", "Healthy"):
            continue  # system conditions belong to Crossplane
        _set_condition(conds, _condition(c))
    status["conditions"] = conds
    return out_xr


def _preview_binding(
    children: list[dict[str, Any]], required: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """ModelReplicas render only once their cluster's ledger commits them (plnt.capacity.binding):
    the tree shows them as the binder (`plnt reconcile --bind`) would commit them on the scenario's
    fleet, refusals included. Returns the ledgers it wrote, which the replicas' renders read."""
    replicas = [c for c in children if c.get("kind") == "ModelReplica"]
    if not replicas:
        return []
    done = commit.preview(replicas, required)
    for child in replicas:
        meta = child["metadata"]
        commit.write_annotations(
            child, done.annotate.get(f"{meta.get('namespace', '')}/{meta['name']}", {})
        )
    return done.configmaps


def played_binder(xr: dict[str, Any], required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For a ModelReplica scenario whose required resources hold no ledger of its cluster,
    the ledgers the binder would commit it with (render plays the binder; a ModelReplica's
    own annotations never bind it). Nothing for any other XR."""
    if xr.get("kind") != "ModelReplica":
        return []
    cluster = (xr.get("spec") or {}).get("clusterName", "")
    configmaps = [o for o in required if o.get("kind") == "ConfigMap"]
    try:
        ledger_parse.cluster_ledger_of(configmaps, cluster)
        return []  # the scenario brings its cluster's ledger
    except ledger_parse.UnreadableLedgerError as err:
        if err.reason != ledger_parse.LEDGER_MISSING:
            return []  # and an unreadable one is what the function reads too
    return commit.preview([copy.deepcopy(xr)], required).configmaps


def _as_child_xr(obj: dict[str, Any], observed_by_name: dict[str | None, dict]) -> dict[str, Any]:
    """A composed XR as its own composition would see it: its spec, the observed status."""
    child = copy.deepcopy(obj)
    meta = child["metadata"]
    name = meta.get("annotations", {}).get(xp.COMPOSITION_RESOURCE_NAME, "")
    if not meta.get("name"):
        meta["name"] = f"{meta.get('generateName', '')}{name}".strip("-")
    seen = observed_by_name.get(name)
    seen_annotations = ((seen or {}).get("metadata") or {}).get("annotations") or {}
    for key in (binding.BINDING, binding.REFUSED, binding.OVER_COMMITTED):
        if key in seen_annotations:
            meta.setdefault("annotations", {})[key] = seen_annotations[key]
    if seen is not None and "status" in seen:
        child["status"] = copy.deepcopy(seen["status"])
        meta.setdefault("uid", (seen.get("metadata") or {}).get("uid", ""))
    return child


class _Dumper(yaml.SafeDumper):
    """Sorted keys (deterministic, and apiVersion/kind/metadata/spec/status read in that order);
    strings a YAML 1.2 reader (Go's, kubectl's) would take for numbers or booleans are quoted."""


_NUMBER_LIKE = re.compile(r"^[-+]?(\.?[0-9][0-9_.]*([eE][-+]?[0-9]+)?|0x[0-9a-fA-F]+|0o[0-7]+)$")
_BOOL_LIKE = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _NUMBER_LIKE.match(value) or value.lower() in _BOOL_LIKE:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return dumper.represent_str(value)


_Dumper.add_representer(str, _represent_str)


def dump(objs: Iterable[dict[str, Any]]) -> str:
    return yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=True, explicit_start=True, width=100)


def scenario_folders(root: pathlib.Path) -> list[pathlib.Path]:
    """Every folder under ``root`` holding an xr.yaml (nested ones too), sorted."""
    return sorted(
        p.parent
        for p in root.rglob("xr.yaml")
        if not {"required", "observed"} & set(p.relative_to(root).parts)
    )
