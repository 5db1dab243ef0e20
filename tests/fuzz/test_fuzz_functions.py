"""Property-based fuzzing of every function through its real RunFunction handler.

Each example XR is mutated (see mutations.py: fields deleted, retyped, pushed to or past their
bounds, optional fields added, lists duplicated, strings made huge) and run through the
Composition's pipeline with the scenario's required and observed resources. Kinds without a
scenario of their own (InferenceClass) are seeded with the objects of that kind the examples
hold. Properties:

- no exception escapes a function (the runtime would turn one into an "internal error" Fatal;
  seeing that message is a failure here);
- input the XRD's OpenAPI schema rejects, as the API server reads it (apiserver.py), gets a
  Fatal result naming a `spec` field, or (WorkflowRun, whose phase Failed must reach the live
  object) a Valid condition False with reason InvalidSpec naming one;
- input the schema accepts and the function composes from yields a status its XRD accepts and
  desired resources that pass the schemas we have (our XRDs and the CRDs in third_party/crds,
  for provider-kubernetes Objects also the manifest inside) and ObjectMeta validation.
  Input the schema accepts may still get a Fatal: the XRD's CEL rules are not evaluated here.

A second test keeps the XR and mutates one of the objects the function reads besides it (a
required InferenceCluster, an observed CKS Cluster, a token Secret...), within what that
object's own schema admits: no exception may escape and what is composed must still validate.

The normal test run takes a fixed-seed slice (PLNT_FUZZ_EXAMPLES, default 60 per function);
`make fuzz` runs 10,000 per function; with `-s` each kind prints how many examples were
schema-valid, schema-invalid, refused with a Fatal and composed.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from plnt import xp
from plnt_host import render
from tests.fuzz import apiserver
from tests.fuzz.mutations import (
    hostile_observed,
    legal_name,
    mutated,
    mutated_object,
    with_non_finite,
)

REPO = apiserver.REPO
EXAMPLES_PER_FUNCTION = int(os.environ.get("PLNT_FUZZ_EXAMPLES", "60"))
FULL_RUN = "PLNT_FUZZ_EXAMPLES" in os.environ
CATALOGUE = render.compositions()


def scenarios_by_kind() -> dict[str, list[render.Scenario]]:
    out: dict[str, list[render.Scenario]] = {}
    for folder in render.scenario_folders(REPO / "examples"):
        scenario = render.load_scenario(folder)
        out.setdefault(scenario.xr["kind"], []).append(scenario)
    # Composed kinds no scenario stars in: every such object in the examples is a seed.
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for doc in render.load_yaml_docs(path):
            key = (doc["apiVersion"], doc["kind"])
            if key in CATALOGUE and doc["kind"] not in out:
                seed_xr = {k: v for k, v in doc.items() if k != "status"}
                out.setdefault(f"{doc['kind']}*", []).append(
                    render.Scenario(xr=seed_xr, required=[], observed=[], path=path)
                )
    return {kind.rstrip("*"): scenarios for kind, scenarios in out.items()}


SCENARIOS = scenarios_by_kind()
SCHEMA = ("schema: valid", "schema: invalid")


def desired_errors(obj: dict[str, Any]) -> list[str]:
    errors = apiserver.schema_errors(obj) + apiserver.metadata_errors(obj)
    for manifest in apiserver.embedded_manifests(obj):
        inner = apiserver.schema_errors(manifest) + apiserver.metadata_errors(manifest)
        errors += [f"manifest ({manifest.get('kind')}) {e}" for e in inner]
    return errors


def run(
    scenario: render.Scenario,
    xr: dict[str, Any],
    record: Callable[[Iterable[str]], Any] = lambda _: None,
    fatal_names_spec: bool = True,
) -> None:
    composition = CATALOGUE[(xr["apiVersion"], xr["kind"])]
    invalid = apiserver.schema_errors(xr)
    record(["schema: invalid" if invalid else "schema: valid"])
    try:
        desired, _, conditions, _ = render.run_pipeline(
            composition, xr, scenario.observed, scenario.required
        )
    except render.PipelineError as err:
        record(["function: fatal"])
        message = str(err)
        assert "internal error" not in message, message
        if fatal_names_spec:
            assert "spec" in message, f"a Fatal result must name the field: {message}"
        return
    refusals = [c.message for c in conditions if (c.type, c.reason) == ("Valid", "InvalidSpec")]
    if refusals:  # refused without a Fatal (WorkflowRun): its status and what it keeps validate
        record(["function: refused"])
        if fatal_names_spec:
            assert "spec" in refusals[0], f"a refusal must name the field: {refusals[0]}"
    else:
        record(["function: composed"])
        assert not invalid, f"the function accepted input its XRD rejects: {invalid[:3]}"
    status = xp.to_dict(desired.composite.resource).get("status") or {}
    errors = apiserver.status_errors(xr, status)
    assert not errors, f"the status fails the XRD's schema: {errors[:3]}"
    for name, resource in desired.resources.items():
        obj = xp.to_dict(resource.resource)
        errors = desired_errors(obj)
        assert not errors, f"{name} ({obj.get('kind')}) fails validation: {errors[:3]}"


KINDS = sorted(SCENARIOS)
# Fixed seeds and no example database: the normal run is the same slice every time.
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_FUNCTION,
    deadline=None,
    database=None,
    derandomize=not FULL_RUN,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("kind", KINDS)
def test_functions_survive_mutated_input(kind: str) -> None:
    scenarios = SCENARIOS[kind]

    @seed(20261130)
    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(st.sampled_from(scenarios))
        run(scenario, data.draw(mutated(scenario.xr)), record=tally.update)

    tally: Counter[str] = Counter()
    check()
    print(f"\nfuzz {kind}: {sum(tally[k] for k in SCHEMA)} examples, {dict(sorted(tally.items()))}")
    assert sum(tally[k] for k in SCHEMA) >= EXAMPLES_PER_FUNCTION
    assert tally["function: composed"] > 0, "no mutant got through to composing"


@st.composite
def with_mutated_fleet(draw: st.DrawFn, scenario: render.Scenario) -> render.Scenario:
    """``scenario`` with one of its required or observed objects mutated."""
    required, observed = list(scenario.required), list(scenario.observed)
    which = draw(
        st.sampled_from(
            [("required", i) for i in range(len(required))]
            + [("observed", i) for i in range(len(observed))]
        )
    )
    pool = required if which[0] == "required" else observed
    pool[which[1]] = draw(mutated_object(pool[which[1]]))
    return render.Scenario(xr=scenario.xr, required=required, observed=observed, path=scenario.path)


FLEET_KINDS = sorted(
    k for k, scs in SCENARIOS.items() if any(s.required or s.observed for s in scs)
)


@pytest.mark.parametrize("kind", FLEET_KINDS)
def test_functions_survive_mutated_fleet(kind: str) -> None:
    """What the function reads besides its XR (required and observed objects) is mutated: no
    exception escapes, and what it composes still validates. A Fatal is allowed (a bad object
    elsewhere may stop composition), but never an internal error."""
    scenarios = [s for s in SCENARIOS[kind] if s.required or s.observed]

    @seed(20261201)
    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(with_mutated_fleet(data.draw(st.sampled_from(scenarios))))
        run(scenario, scenario.xr, record=tally.update, fatal_names_spec=False)

    tally: Counter[str] = Counter()
    check()
    print(f"\nfuzz {kind} (fleet): {sum(tally[k] for k in SCHEMA)} examples, {dict(tally)}")
    assert sum(tally[k] for k in SCHEMA) >= EXAMPLES_PER_FUNCTION


OBSERVED_KINDS = sorted(k for k, scs in SCENARIOS.items() if any(s.observed for s in scs))


@pytest.mark.parametrize("kind", OBSERVED_KINDS)
def test_functions_survive_hostile_observed_state(kind: str) -> None:
    """Observed objects no API server would hold (a string status, conditions that are not
    conditions) or of another kind than composed under their name: never an internal error,
    and what is composed still validates (the function reads them as not ready / absent)."""
    scenarios = [s for s in SCENARIOS[kind] if s.observed]

    @seed(20261219)
    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(st.sampled_from(scenarios))
        observed = list(scenario.observed)
        for index in data.draw(
            st.sets(st.integers(0, len(observed) - 1), min_size=1, max_size=len(observed))
        ):
            observed[index] = data.draw(hostile_observed(observed[index]))
        hostile = render.Scenario(scenario.xr, scenario.required, observed, scenario.path)
        run(hostile, scenario.xr, record=tally.update, fatal_names_spec=False)

    tally: Counter[str] = Counter()
    check()
    assert tally["function: composed"] > 0, "no hostile observed state got through to composing"


@pytest.mark.parametrize("kind", KINDS)
def test_functions_survive_any_legal_name(kind: str) -> None:
    """XR names of every legal length up to 253: never an internal error; a Fatal names the
    field (InferenceCluster caps its names on purpose); every label value written is valid."""

    @seed(20261220)
    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(st.sampled_from(SCENARIOS[kind]))
        xr = {
            **scenario.xr,
            "metadata": {**scenario.xr["metadata"], "name": data.draw(legal_name())},
        }
        run(scenario, xr, record=tally.update, fatal_names_spec=False)

    tally: Counter[str] = Counter()
    check()
    assert tally["function: composed"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_functions_refuse_non_finite_numbers(kind: str) -> None:
    """NaN and Infinity exist over gRPC, never in Kubernetes JSON: a Fatal naming the field."""

    @seed(20261221)
    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        scenario = data.draw(st.sampled_from(SCENARIOS[kind]))
        xr = data.draw(with_non_finite(scenario.xr))
        composition = CATALOGUE[(xr["apiVersion"], xr["kind"])]
        with pytest.raises(render.PipelineError, match=r"invalid input: spec\S*: must be a finite"):
            render.run_pipeline(composition, xr, scenario.observed, scenario.required)

    check()


@pytest.mark.parametrize("kind", KINDS)
def test_every_seed_is_valid_and_composes(kind: str) -> None:
    """The unmutated seeds pass every property, so a failure above is the mutation's doing."""
    for scenario in SCENARIOS[kind]:
        assert not apiserver.schema_errors(scenario.xr), scenario.path
        run(scenario, scenario.xr)
