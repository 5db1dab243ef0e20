"""The ModelDeployment function on the binder's fleet view beside the whole fleet.

With the view, a reconcile requires the view's index and the parts its clusterSelector's
matchLabels select, never every InferenceCluster and ModelReplica; without one (no binder has
run yet) it requires the whole fleet as before. Either way it must place exactly alike.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import fn
from plnt import xp
from plnt.capacity import commit, fleet_view
from plnt_host import render
from plnt_host.bench import fleet as bench_fleet
from tests.functions.test_model_deployment import EXAMPLES, scenario

MD_EXAMPLES = [
    f.name
    for f in render.scenario_folders(EXAMPLES)
    if render.load_scenario(f).xr["kind"] == "ModelDeployment"
]
WHOLE_FLEET = {"inference-clusters", "model-replicas"}
TENANCY = {"namespace", "quota-ledgers"}  # its Namespace (fences) and the quota ledgers
COREWEAVE = {"matchLabels": {"modelplane.ai/provider": "coreweave"}}


def on_coreweave(xr: dict[str, Any]) -> dict[str, Any]:
    """`xr` with a clusterSelector (no example has one): two of the three example clusters."""
    out = copy.deepcopy(xr)
    out["spec"]["clusterSelector"] = COREWEAVE
    return out


def bound(s: render.Scenario) -> tuple[list[dict], list[dict], list[dict]]:
    """The scenario after one binder pass: its required objects and observed ones with the
    annotations the binder writes, and the fleet view ConfigMaps it writes."""
    clusters = {o["metadata"]["name"]: o for o in s.required if o["kind"] == "InferenceCluster"}
    classes = {o["metadata"]["name"]: o for o in s.required if o["kind"] == "InferenceClass"}
    objs = [copy.deepcopy(o) for o in s.required + s.observed]
    replicas = []
    for i, o in enumerate(objs):
        if o["kind"] == "ModelReplica":
            o["metadata"].setdefault("uid", f"uid-{i}")
            replicas.append(o)
    committed, annotated = commit.bind_all(clusters, classes, replicas)
    by_key = {(r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in annotated}
    objs = [by_key.get((o["metadata"].get("namespace"), o["metadata"]["name"]), o) for o in objs]
    view = fleet_view.configmaps(fleet_view.parts(commit.views(clusters, classes, committed)))
    return objs[: len(s.required)], objs[len(s.required) :], view


def requirements(req: fnv1.RunFunctionRequest) -> dict[str, fnv1.ResourceSelector]:
    return dict(fn.run_function(req).requirements.resources)


def answered(
    xr: dict[str, Any], pool: list[dict[str, Any]], observed: list[dict[str, Any]] = ()
) -> fnv1.RunFunctionRequest:
    """The request once Crossplane has answered every requirement from `pool`."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for obj in observed:
        req.observed.resources[obj["metadata"]["name"]].resource.update(obj)
    return render.run_with_requirements(fn.run_function, req, pool, "model-deployment")[1]


def test_first_call_asks_for_the_view_narrowed_by_the_selector() -> None:
    xr = on_coreweave(scenario("deploy-qwen3-8b").xr)
    wanted = requirements(answered_nothing(xr))
    assert set(wanted) == {"fleet-view-index", "fleet-view", "inference-classes", *TENANCY}
    index, parts = wanted["fleet-view-index"], wanted["fleet-view"]
    assert (index.kind, index.match_name, index.namespace) == (
        "ConfigMap",
        "plnt-fleet-view",
        "plnt-system",
    )
    assert parts.namespace == "plnt-system"
    assert dict(parts.match_labels.labels) == {
        "modelplane.ai/provider": "coreweave",
        "plnt.work/fleet-view": "true",
    }


def answered_nothing(xr: dict[str, Any]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    return req


def test_without_a_view_it_requires_the_whole_fleet_in_every_namespace() -> None:
    s = scenario("deploy-qwen3-8b")
    wanted = answered(s.xr, s.required).required_resources
    assert set(wanted) >= WHOLE_FLEET
    last = requirements(answered(s.xr, s.required))
    for name in WHOLE_FLEET | {"inference-classes"}:
        sel = last[name]
        assert sel.WhichOneof("match") == "match_labels" and not dict(sel.match_labels.labels)
        assert not sel.HasField("namespace")


def test_with_a_view_it_reads_neither_clusters_nor_replicas() -> None:
    """Of the fleet, only the view; by name, only the clusters it places on (their fences)."""
    s = scenario("deploy-qwen3-8b")
    required, _, view = bound(s)
    req = answered(s.xr, required + view)
    by_name = {n for n in req.required_resources if n.startswith("cluster-")}
    assert set(req.required_resources) - by_name == {
        "fleet-view-index",
        "fleet-view",
        "inference-classes",
        *TENANCY,
    }
    parts = [xp.to_dict(i.resource) for i in req.required_resources["fleet-view"].items]
    assert parts and all(p["kind"] == "ConfigMap" for p in parts)
    rsp = fn.run_function(req)
    replicas = [
        xp.to_dict(r.resource) for n, r in rsp.desired.resources.items() if n.startswith("replica-")
    ]
    assert len(replicas) == 3
    assert by_name == {f"cluster-{r['spec']['clusterName']}" for r in replicas}


def test_an_own_replica_off_the_view_is_read_by_name() -> None:
    """A pinned replica on a cluster the selector no longer matches stays while its cluster
    exists: the function asks for that one InferenceCluster."""
    s = scenario("deploy-pinned")
    required, observed, view = bound(s)
    own = [o for o in observed if o["kind"] == "ModelReplica"]
    assert own
    xr = copy.deepcopy(s.xr)
    xr["spec"]["clusterSelector"] = {"matchLabels": {"example.com/nothing": "matches"}}
    req = answered(xr, required + view, observed)
    pinned = {o["spec"]["clusterName"] for o in own}
    assert {n for n in req.required_resources if n.startswith("cluster-")} == {
        f"cluster-{c}" for c in pinned
    }
    assert not req.required_resources["fleet-view"].items
    rsp = fn.run_function(req)
    kept = {
        xp.to_dict(r.resource)["spec"]["clusterName"]
        for n, r in rsp.desired.resources.items()
        if n.startswith("replica-")
    }
    existing = {o["metadata"]["name"] for o in required if o["kind"] == "InferenceCluster"}
    assert pinned - existing  # the example also pins one to a cluster that is gone
    assert kept == pinned & existing


def test_an_unreadable_view_part_falls_back_to_the_whole_fleet_and_says_so() -> None:
    s = scenario("deploy-qwen3-8b")
    required, _, view = bound(s)
    broken = copy.deepcopy(view)
    part = next(c for c in broken if c["metadata"]["name"] != fleet_view.INDEX_NAME)
    part["binaryData"][fleet_view.DATA_KEY] = "bm90IGd6aXA="  # base64, not gzip
    req = answered(s.xr, required + broken)
    assert set(req.required_resources) >= WHOLE_FLEET
    rsp = fn.run_function(req)
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert any(part["metadata"]["name"] in w and "whole fleet" in w for w in warnings), warnings
    assert len([n for n in rsp.desired.resources if n.startswith("replica-")]) == 3


@pytest.mark.parametrize("selected", [False, True], ids=["whole", "coreweave"])
@pytest.mark.parametrize("name", MD_EXAMPLES)
def test_the_view_places_exactly_as_the_whole_fleet(name: str, selected: bool) -> None:
    s = scenario(name)
    required, observed, view = bound(s)
    xr = on_coreweave(s.xr) if selected else s.xr
    whole = render.render(render.Scenario(xr, required, observed, s.path))
    viewed = render.render(render.Scenario(xr, required + view, observed, s.path))
    assert viewed.composed == whole.composed
    assert viewed.xr["status"] == whole.xr["status"]
    assert [r["message"] for r in viewed.results] == [r["message"] for r in whole.results]


def test_the_benchmark_fleets_place_alike_and_answer_what_they_ask() -> None:
    """The fleet benchmark at a small size: every reconcile it measures places identically in
    both designs, and each request answers exactly what the function requires."""
    out = bench_fleet.bench(sizes=(200,), samples=2)
    rows = out["reconcile"]
    assert set(rows) == {"fleet", "regional", "new-regional", "new-fleet-wide"}
    for key in ("regional", "new-regional", "new-fleet-wide"):
        assert rows[key]["identical_placements"], key
        assert rows[key]["placed"] == (100 if key == "new-fleet-wide" else 10), rows[key]
        assert rows[key]["fleet_view"]["request_mib"] < rows[key]["whole_fleet"]["request_mib"]
    assert out["resync"][0]["identical_placements"]
    printed = bench_fleet.table(out)
    for key in ("regional", "new-regional", "new-fleet-wide"):
        (line,) = [x for x in printed.splitlines() if x.split()[:1] == [key]]
        assert "identical" in line and "OVER TARGET" not in line, line
    assert "<= 4.0" in printed and "<= 0.5" in printed


def test_a_selector_on_a_per_cluster_label_reads_the_shared_parts_and_matches_exactly() -> None:
    """Crossplane's crossplane.io/composite label is on each cluster, not on view parts: the
    requirement leaves it out and the scheduler matches it, placing as the whole fleet does."""
    s = scenario("deploy-qwen3-8b")
    required = copy.deepcopy(s.required)
    for o in required:
        if o["kind"] == "InferenceCluster":
            o["metadata"].setdefault("labels", {})["crossplane.io/composite"] = o["metadata"][
                "name"
            ]
    s = render.Scenario(s.xr, required, s.observed, s.path)
    required, observed, view = bound(s)
    target = "coreweave-h100"
    xr = copy.deepcopy(s.xr)
    xr["spec"]["clusterSelector"] = {"matchLabels": {"crossplane.io/composite": target}}
    req = answered(xr, required + view, observed)
    sel = req.required_resources  # answered: the parts of every label set
    assert len(sel["fleet-view"].items) == len([c for c in view if "labels" in c["metadata"]])
    assert dict(requirements(req)["fleet-view"].match_labels.labels) == {
        "plnt.work/fleet-view": "true"
    }
    whole = render.render(render.Scenario(xr, required, observed, s.path))
    viewed = render.render(render.Scenario(xr, required + view, observed, s.path))
    assert viewed.composed == whole.composed
    clusters = {
        o["spec"]["clusterName"] for o in viewed.composed if o.get("kind") == "ModelReplica"
    }
    assert clusters == {target}
