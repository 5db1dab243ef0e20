"""Regressions for an adversarial pass over every function: malformed observed state,
impostor objects under composed names, names up to 253 characters, type confusions over gRPC,
and messages that named the wrong cause. Each case failed before its fix; each runs over every
example it applies to, so the class is covered and not only the one example found."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest

from plnt import xp
from plnt_host import render

CATALOGUE = render.compositions()
SCENARIOS = {
    folder.relative_to(render.REPO_ROOT / "examples").as_posix(): render.load_scenario(folder)
    for folder in render.scenario_folders(render.REPO_ROOT / "examples")
}
WITH_OBSERVED = sorted(k for k, s in SCENARIOS.items() if s.observed)
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
TRUE, FALSE = 2, 3  # fnv1 condition status values


def run(scenario: render.Scenario, xr=None, observed=None, required=None):
    """The pipeline's (desired, results, conditions), or the Fatal message as a string."""
    xr = scenario.xr if xr is None else xr
    composition = CATALOGUE[(scenario.xr["apiVersion"], scenario.xr["kind"])]
    try:
        desired, results, conds, _ = render.run_pipeline(
            composition,
            xr,
            scenario.observed if observed is None else observed,
            scenario.required if required is None else required,
        )
    except render.PipelineError as err:
        return str(err)
    return desired, [r for _, r in results], list(conds)


MALFORMED_STATUS = {
    "status is a string": lambda o: o.__setitem__("status", "Ready"),
    "status is a list": lambda o: o.__setitem__("status", [{"type": "Ready"}]),
    "conditions are strings": lambda o: o.setdefault("status", {}).__setitem__(
        "conditions", ["Ready", "True"]
    ),
    "conditions is a string": lambda o: o.setdefault("status", {}).__setitem__(
        "conditions", "Ready=True"
    ),
    "a condition without a type": lambda o: o.setdefault("status", {}).__setitem__(
        "conditions", [{"status": "True"}, 5]
    ),
}


@pytest.mark.parametrize("mutation", sorted(MALFORMED_STATUS))
@pytest.mark.parametrize("example", WITH_OBSERVED)
def test_malformed_observed_status_reads_as_not_ready(example: str, mutation: str) -> None:
    """A malformed observed status is no internal error: no Fatal, every custom condition that
    was True on the intact example is not claimed from the broken objects, and a warning names
    each broken resource."""
    scenario = SCENARIOS[example]
    observed = copy.deepcopy(scenario.observed)
    for obj in observed:
        MALFORMED_STATUS[mutation](obj)
    out = run(scenario, observed=observed)
    assert not isinstance(out, str), out
    _, results, _ = out
    warnings = [r.message for r in results if "read as not ready" in r.message]
    named = {
        (o["metadata"].get("annotations") or {}).get(xp.COMPOSITION_RESOURCE_NAME) for o in observed
    }
    for name in named:
        assert any(f"observed resource {name!r}" in w for w in warnings), (name, warnings)


@pytest.mark.parametrize("example", WITH_OBSERVED)
def test_objects_of_another_kind_under_composed_names_are_not_trusted(example: str) -> None:
    """Every observed object replaced by a ConfigMap with the same name and a Ready status:
    InferenceCluster used to report Ready, Provisioned and StackReady True and publish a
    gateway address. What was True on nothing but the impostors' word is no longer True."""
    scenario = SCENARIOS[example]
    impostors = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": copy.deepcopy(o["metadata"]),
            "data": {},
            "status": copy.deepcopy(o.get("status") or {}),
        }
        for o in scenario.observed
    ]
    intact, faked = run(scenario), run(scenario, observed=impostors)
    assert not isinstance(faked, str), faked
    without = run(scenario, observed=[])
    assert not isinstance(without, str), without
    # With impostors the function sees what it sees with no observed objects at all.
    assert _conditions(faked[2]) == _conditions(without[2])
    assert _status(faked[0]) == _status(without[0])
    composed_there = sorted(
        set(faked[0].resources)
        & {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME] for o in impostors}
    )
    for name in composed_there:
        assert any(f"observed resource {name!r} (v1 ConfigMap" in r.message for r in faked[1])
    assert not isinstance(intact, str)


def _conditions(conds: list) -> list[tuple[str, int, str]]:
    return sorted((c.type, c.status, c.reason) for c in conds)


def _status(desired) -> dict[str, Any]:
    return xp.to_dict(desired.composite.resource).get("status") or {}


def test_inference_cluster_believes_no_configmap() -> None:
    scenario = SCENARIOS["inference-cluster-ready"]
    impostors = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": o["metadata"], "status": o["status"]}
        for o in scenario.observed
        if "status" in o
    ]
    desired, _, conds = run(scenario, observed=impostors)
    assert {c.type: c.status for c in conds} == {"Provisioned": FALSE, "StackReady": FALSE}
    assert not _status(desired)["gateway"]["address"]
    assert desired.composite.ready != 1  # READY_TRUE


def label_values(obj: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, value) of every label and label-selector value in obj, manifests included."""
    out = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                out += [(f"{path}.{key}[{k}]", v) for k, v in value.items()]
            out += label_values(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            out += label_values(item, f"{path}[{index}]")
    return out


NAMEABLE = sorted(k for k, s in SCENARIOS.items() if s.xr["kind"] != "InferenceCluster")


@pytest.mark.parametrize("length", [63, 64, 200, 253])
@pytest.mark.parametrize("example", NAMEABLE)
def test_every_label_value_is_valid_for_any_legal_name(example: str, length: int) -> None:
    """A legal name of 64+ characters used to yield `modelplane.ai/deployment` and
    `modelplane.ai/model-cache` values the API server rejects. (InferenceCluster names are
    capped at 40 by design: they name what they compose.)"""
    scenario = SCENARIOS[example]
    xr = copy.deepcopy(scenario.xr)
    xr["metadata"]["name"] = ("a" * (length - 2) + "z9")[:length]
    out = run(scenario, xr=xr)
    assert not isinstance(out, str), out
    desired = out[0]
    for key, resource in desired.resources.items():
        for path, value in label_values(xp.to_dict(resource.resource), key):
            assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (path, value)


def test_a_long_workflow_run_name_still_routes_to_its_endpoints() -> None:
    """The shortened label is the same on both sides: the ModelService's selector of a 200
    character WorkflowRun matches the labels its ModelDeployment's endpoints carry."""
    run_xr = copy.deepcopy(SCENARIOS["workflowrun-phases/Ready"].xr)
    run_xr["metadata"]["name"] = "r" * 200
    desired, _, _ = run(SCENARIOS["workflowrun-phases/Ready"], xr=run_xr)
    service = xp.to_dict(desired.resources["model-service"].resource)
    selector = service["spec"]["endpoints"][0]["selector"]["matchLabels"]
    deployment = xp.to_dict(desired.resources["model-deployment"].resource)
    dep_scenario = SCENARIOS["deploy-qwen3-8b"]
    dep_xr = copy.deepcopy(dep_scenario.xr)
    dep_xr["metadata"]["name"] = deployment["metadata"]["name"]
    dep_desired, _, _ = run(dep_scenario, xr=dep_xr)
    endpoints = [
        xp.to_dict(r.resource)
        for r in dep_desired.resources.values()
        if r.resource["kind"] == "ModelEndpoint"
    ]
    assert endpoints
    for endpoint in endpoints:
        assert selector.items() <= endpoint["metadata"]["labels"].items()
        # ModelService reads the full name back from the annotation to find the deployment.
        assert endpoint["metadata"]["annotations"]["modelplane.ai/deployment"] == "r" * 200


TYPE_CONFUSIONS = {
    "metadata.name is a number": (
        lambda xr: xr["metadata"].__setitem__("name", 5),
        "metadata.name",
    ),
    "metadata.name is null": (lambda xr: xr["metadata"].__setitem__("name", None), "metadata.name"),
    "metadata.name is missing": (lambda xr: xr["metadata"].pop("name"), "metadata.name"),
    "metadata is a string": (lambda xr: xr.__setitem__("metadata", "x"), "metadata"),
    "metadata is missing": (lambda xr: xr.pop("metadata"), "metadata"),
    "metadata.namespace is a list": (
        lambda xr: xr["metadata"].__setitem__("namespace", ["a"]),
        "metadata.namespace",
    ),
    "a label value is a number": (
        lambda xr: xr["metadata"].__setitem__("labels", {"team": 7}),
        "metadata.labels['team']",
    ),
    "a spec number is NaN": (lambda xr: _first_number(xr, math.nan), "spec."),
    "a spec number is Infinity": (lambda xr: _first_number(xr, math.inf), "spec."),
}


def _first_number(xr: dict[str, Any], value: float) -> None:
    """Replace the first number in the spec (replicas where there is one) with value."""
    if "replicas" in xr["spec"]:
        xr["spec"]["replicas"] = value
        return
    stack = [xr["spec"]]
    while stack:
        node = stack.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, int | float) and not isinstance(item, bool):
                node[key] = value
                return
            if isinstance(item, dict | list):
                stack.append(item)
    xr["spec"]["nonFinite"] = value


@pytest.mark.parametrize("confusion", sorted(TYPE_CONFUSIONS))
@pytest.mark.parametrize("example", sorted(SCENARIOS))
def test_type_confusions_are_a_fatal_naming_the_field(example: str, confusion: str) -> None:
    """Possible over gRPC, never from the API server: a clean Fatal naming the field, never
    "internal error"."""
    mutate, field = TYPE_CONFUSIONS[confusion]
    xr = copy.deepcopy(SCENARIOS[example].xr)
    mutate(xr)
    out = run(SCENARIOS[example], xr=xr)
    assert isinstance(out, str), "a type confusion composed something"
    assert "internal error" not in out, out
    assert f"invalid input: {field}" in out, out


def test_a_selector_that_errs_on_every_device_is_a_selector_error() -> None:
    """A typo (`productNam`: "Key not found in map") used to be reported as
    InsufficientCapacity, though capacity was never the problem."""
    scenario = SCENARIOS["deploy-qwen3-8b"]
    xr = copy.deepcopy(scenario.xr)
    devices = xr["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    typo = 'device.attributes["gpu.nvidia.com"].productNam == "NVIDIA-H100"'
    devices[0]["selectors"].append({"cel": typo})
    _, _, conds = run(scenario, xr=xr)
    scheduled = next(c for c in conds if c.type == "ReplicasScheduled")
    assert (scheduled.status, scheduled.reason) == (FALSE, "InvalidNodeSelector")
    field = "spec.engines[0].members[0].nodeSelector.devices[0].selectors[1].cel"
    assert f"{field}: fails on every device it was tried on (selector error on device" in (
        scheduled.message
    )
    assert "productNam" in scheduled.message
    assert "InsufficientCapacity" not in scheduled.message


def test_a_selector_false_on_every_device_is_still_a_capacity_shortfall() -> None:
    """The control: a selector that evaluates (to false) everywhere is the fleet's answer."""
    scenario = SCENARIOS["deploy-qwen3-8b"]
    xr = copy.deepcopy(scenario.xr)
    devices = xr["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    devices[0]["selectors"].append({"cel": 'device.driver == "no.such.driver"'})
    _, _, conds = run(scenario, xr=xr)
    scheduled = next(c for c in conds if c.type == "ReplicasScheduled")
    assert (scheduled.status, scheduled.reason) == (FALSE, "InsufficientCapacity")


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("127.0.0.1", "an address inside the platform (127.0.0.1, in 127.0.0.0/8)"),
        (
            "169.254.169.254",
            "an address inside the platform (169.254.169.254, in 169.254.0.0/16)",
        ),
        ("0.0.0.0", "an address inside the platform (0.0.0.0, in 0.0.0.0/8)"),
    ],
)
def test_a_refused_endpoint_is_said_to_be_refused(host: str, why: str) -> None:
    """Used to say `Routed=False NoEndpoints: no selected ModelEndpoint exists yet`, though
    one existed and was refused."""
    scenario = SCENARIOS["model-service"]
    required = copy.deepcopy(scenario.required)
    for obj in required:
        if obj["kind"] == "ModelEndpoint":
            url = obj["spec"]["url"]
            obj["spec"]["url"] = re.sub(r"//[^/]+", f"//{host}", url, count=1)
    _, _, conds = run(scenario, required=required)
    routed = next(c for c in conds if c.type == "Routed")
    assert (routed.status, routed.reason) == (FALSE, "EndpointsRefused")
    assert routed.message.startswith("every selected ModelEndpoint was refused (")
    assert f"points at {why}" in routed.message
    assert "exists yet" not in routed.message
