"""function-inference-class through its real run_function: status, Usable, and bad specs; each
case's whole response in tests/functions/responses/inference_class/."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.inference_class import fn
from plnt import xp
from tests.functions import tables
from tests.support import has_fatal, request

REPO = pathlib.Path(__file__).resolve().parents[2]
CLASSES = {
    doc["metadata"]["name"]: doc
    for f in ("inference-cluster-coreweave", "inference-cluster-existing")
    for path in sorted((REPO / "examples" / f / "required").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc and doc["kind"] == "InferenceClass"
}


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    (cond,) = [c for c in rsp.conditions if c.type == typ]
    return cond


def with_spec(name: str, change) -> dict:
    xr = copy.deepcopy(CLASSES[name])
    change(xr["spec"])
    return xr


def gpu_by_type_attribute(spec: dict) -> None:
    spec["devices"] = [
        {
            "name": "accel",
            "claim": "Synthetic",
            "driver": "example.com",
            "attributes": {"type": {"string": "gpu"}},
        }
    ]


def without_accelerator_type(spec: dict) -> None:
    spec["provisioning"]["coreweave"].pop("acceleratorType")


# Valid classes: (case, class, change to its spec).
USABLE = [
    ("h100", "nvidia-h100-8x", None),
    ("cpu", "cpu-genoa", None),
    ("l40s-no-provisioning", "nvidia-l40s-4x", None),
    ("gpu-by-type-attribute", "cpu-genoa", gpu_by_type_attribute),
    ("gpu-without-accelerator-type", "nvidia-h100-8x", without_accelerator_type),
]
# Invalid changes to nvidia-h100-8x: (case, change, the field the failure names).
INVALID = [
    (
        "dra-without-device-class",
        lambda s: s["devices"][0].pop("deviceClassName"),
        "spec.devices[0].deviceClassName",
    ),
    (
        "two-values",
        lambda s: s["devices"][0]["attributes"]["productName"].update({"bool": True}),
        "spec.devices[0].attributes.productName",
    ),
    (
        "bad-quantity",
        lambda s: s["devices"][0]["capacity"].update({"memory": {"value": "lots"}}),
        "spec.devices[0].capacity.memory.value",
    ),
    ("no-coreweave", lambda s: s["provisioning"].pop("coreweave"), "spec.provisioning.coreweave"),
    ("dup-device", lambda s: s["devices"].append(dict(s["devices"][0])), "spec.devices[1].name"),
]


def class_xr(name: str, change) -> dict:
    return with_spec(name, change) if change else CLASSES[name]


TABLE = tables.Table(
    "inference_class",
    fn.run_function,
    (
        *(tables.Case(case, request(class_xr(name, change))) for case, name, change in USABLE),
        *(
            tables.Case(case, request(with_spec("nvidia-h100-8x", change)))
            for case, change, _ in INVALID
        ),
    ),
)


def run(case: str) -> fnv1.RunFunctionResponse:
    return TABLE.response_named(case)


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


@pytest.mark.parametrize("case", [case for case, _, _ in USABLE])
def test_a_valid_class_is_usable_and_composes_nothing(case: str) -> None:
    rsp = run(case)
    assert not has_fatal(rsp)
    assert condition(rsp, "Usable").status == fnv1.STATUS_CONDITION_TRUE
    assert len(rsp.desired.resources) == 0


def test_gpu_class_without_accelerator_type_is_usable_but_not_provisionable() -> None:
    usable = condition(run("gpu-without-accelerator-type"), "Usable")
    assert usable.status == fnv1.STATUS_CONDITION_TRUE
    assert usable.message == (
        "8x gpu per node; not provisionable on CoreWeave until acceleratorType names its GPUs"
    )


@pytest.mark.parametrize(("case", "field"), [(case, field) for case, _, field in INVALID])
def test_invalid_class_is_fatal_and_not_usable(case: str, field: str) -> None:
    rsp = run(case)
    (fatal,) = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal.message.startswith(f"invalid input: {field}:")
    usable = condition(rsp, "Usable")
    assert usable.status == fnv1.STATUS_CONDITION_FALSE
    assert usable.reason == "InvalidSpec"
    assert field in usable.message


@pytest.mark.parametrize(
    ("gpu_class", "error"),
    [
        ("amd.com/mi300x", None),
        ("mi300x", "spec.devices[0].gpuClass: must be <vendor domain>/<model>"),
        ("AMD.com/MI300X", "spec.devices[0].gpuClass: must be <vendor domain>/<model>"),
        ("a.com/" + "x" * 60, "spec.devices[0].gpuClass"),  # past the XRD's maxLength 63
    ],
)
def test_a_device_gpu_class_is_checked_as_the_xrd_does(gpu_class: str, error: str | None) -> None:
    from plnt.models import inference_class

    path = REPO / "examples/inference-cluster-existing/required/inferenceclass.yaml"
    doc = next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "InferenceClass")
    spec = copy.deepcopy(doc["spec"])
    spec["devices"][0]["gpuClass"] = gpu_class
    if error is None:
        assert inference_class.parse(spec).devices[0].gpu_class == gpu_class
        return
    with pytest.raises(xp.InvalidInput, match="^" + error.replace(".", r"\.").replace("[", r"\[")):
        inference_class.parse(spec)
