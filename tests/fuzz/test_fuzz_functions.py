"""Property-based fuzzing of every function through its real RunFunction handler.

Each example XR is mutated (fields deleted, retyped, pushed past their bounds, lists
duplicated, strings made huge) and run through the Composition's pipeline with the
scenario's required and observed resources. Properties:

- no exception escapes a function (the runtime would turn one into an "internal error" Fatal;
  seeing that message is a failure here);
- input the XRD's OpenAPI schema rejects gets a Fatal result naming a `spec` field;
- input the schema accepts and the function composes from yields desired resources that pass
  the schemas we have (our XRDs and the CRDs in ../shared/crds).

The normal test run takes a fixed-seed slice (PLNT_FUZZ_EXAMPLES, default 60 per function);
`make fuzz` runs 10,000 per function.
"""

from __future__ import annotations

import copy
import functools
import os
import pathlib
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from plnt import render

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO.parent / "shared" / "crds"
EXAMPLES_PER_FUNCTION = int(os.environ.get("PLNT_FUZZ_EXAMPLES", "60"))
FULL_RUN = "PLNT_FUZZ_EXAMPLES" in os.environ
CATALOGUE = render.compositions()


@functools.cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """openAPIV3Schema by (apiVersion, kind), from our XRDs and the third-party CRDs."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*REPO.glob("apis/*/definition.yaml"), *SHARED_CRDS.glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in (
                "CustomResourceDefinition",
                "CompositeResourceDefinition",
            ):
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema:
                    out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return out


def schema_errors(obj: dict[str, Any]) -> list[str]:
    schema = schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if schema is None:
        return []
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
    ]


def scenarios_by_kind() -> dict[str, list[render.Scenario]]:
    out: dict[str, list[render.Scenario]] = {}
    for folder in render.scenario_folders(REPO / "examples"):
        scenario = render.load_scenario(folder)
        out.setdefault(scenario.xr["kind"], []).append(scenario)
    return out


SCENARIOS = scenarios_by_kind()

NASTY_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, -1, 1, 63, 64, 65, 1000, 1001, 10**9]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["", "x" * 300, "UPPER_case", "-leading", "a/b", "1.2.3", "Nope", "GPU"]),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def parent_of(root: Any, path: tuple) -> tuple[Any, Any]:
    node = root
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


@st.composite
def mutated(draw: st.DrawFn, scenario: render.Scenario) -> dict[str, Any]:
    xr = copy.deepcopy(scenario.xr)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(xr.get("spec")) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        node, key = parent_of(xr["spec"], path)
        action = draw(st.sampled_from(["delete", "replace", "duplicate", "replace"]))
        if action == "delete":
            del node[key]
        elif action == "duplicate" and isinstance(node, list):
            node.append(copy.deepcopy(node[key]))
        else:
            node[key] = draw(NASTY_VALUES)
    return xr


def run(scenario: render.Scenario, xr: dict[str, Any]) -> None:
    composition = CATALOGUE[(xr["apiVersion"], xr["kind"])]
    invalid = schema_errors(xr)
    try:
        desired, _, _, _ = render.run_pipeline(
            composition, xr, scenario.observed, scenario.required
        )
    except render.PipelineError as err:
        message = str(err)
        assert "internal error" not in message, message
        assert "spec" in message, f"a Fatal result must name the field: {message}"
        return
    assert not invalid, f"the function accepted input its XRD rejects: {invalid[:3]}"
    for name, resource in desired.resources.items():
        obj = render.xp.to_dict(resource.resource)
        errors = schema_errors(obj)
        assert not errors, f"{name} ({obj.get('kind')}) fails its schema: {errors[:3]}"


KINDS = sorted(SCENARIOS)


@pytest.mark.parametrize("kind", KINDS)
def test_functions_survive_mutated_input(kind: str) -> None:
    scenarios = SCENARIOS[kind]

    @seed(20261130)
    @settings(
        max_examples=EXAMPLES_PER_FUNCTION,
        deadline=None,
        database=None,
        derandomize=not FULL_RUN,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(st.sampled_from(scenarios))
        run(scenario, data.draw(mutated(scenario)))

    check()
