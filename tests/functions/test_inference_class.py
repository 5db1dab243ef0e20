"""function-inference-class through its real run_function: status, Usable, and bad specs."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.inference_class import fn
from plnt import xp
from plnt_host import runtime
from tests.support import has_fatal

REPO = pathlib.Path(__file__).resolve().parents[2]
CLASSES = {
    doc["metadata"]["name"]: doc
    for f in ("inference-cluster-coreweave", "inference-cluster-existing")
    for path in sorted((REPO / "examples" / f / "required").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc and doc["kind"] == "InferenceClass"
}


def request(xr: dict) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    return req


def run(xr: dict) -> fnv1.RunFunctionResponse:
    return runtime.call_sync(fn.run_function, request(xr), "function-inference-class")


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


@pytest.mark.parametrize(
    ("xr", "gpu", "devices", "message"),
    [
        (
            CLASSES["nvidia-h100-8x"],
            True,
            [
                {
                    "name": "gpu",
                    "claim": "DRA",
                    "driver": "gpu.nvidia.com",
                    "count": 8,
                    "deviceClassName": "gpu.nvidia.com",
                }
            ],
            "8x gpu per node; provisionable on CoreWeave",
        ),
        (
            CLASSES["cpu-genoa"],
            False,
            [{"name": "cpu", "claim": "Synthetic", "driver": "cpu.modelplane.ai", "count": 1}],
            "1x cpu per node; provisionable on CoreWeave",
        ),
        (
            CLASSES["nvidia-l40s-4x"],
            True,
            [
                {
                    "name": "gpu",
                    "claim": "DRA",
                    "driver": "gpu.nvidia.com",
                    "count": 4,
                    "deviceClassName": "gpu.nvidia.com",
                }
            ],
            "4x gpu per node; not provisionable (Existing clusters only)",
        ),
        (
            with_spec("cpu-genoa", gpu_by_type_attribute),
            True,
            [{"name": "accel", "claim": "Synthetic", "driver": "example.com", "count": 1}],
            "1x accel per node; "
            "not provisionable on CoreWeave until acceleratorType names its GPUs",
        ),
    ],
    ids=["h100", "cpu", "l40s-no-provisioning", "gpu-by-type-attribute"],
)
def test_usable_class_status(xr: dict, gpu: bool, devices: list, message: str) -> None:
    rsp = run(xr)
    assert not has_fatal(rsp)
    assert status(rsp) == {"gpu": gpu, "devices": devices}
    usable = condition(rsp, "Usable")
    assert usable.status == fnv1.STATUS_CONDITION_TRUE
    assert usable.message == message
    assert len(rsp.desired.resources) == 0  # a class composes nothing


def test_gpu_class_without_accelerator_type_is_usable_but_not_provisionable() -> None:
    xr = with_spec(
        "nvidia-h100-8x", lambda s: s["provisioning"]["coreweave"].pop("acceleratorType")
    )
    usable = condition(run(xr), "Usable")
    assert usable.status == fnv1.STATUS_CONDITION_TRUE
    assert usable.message == (
        "8x gpu per node; not provisionable on CoreWeave until acceleratorType names its GPUs"
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["devices"][0].pop("deviceClassName"), "spec.devices[0].deviceClassName"),
        (
            lambda s: s["devices"][0]["attributes"]["productName"].update({"bool": True}),
            "spec.devices[0].attributes.productName",
        ),
        (
            lambda s: s["devices"][0]["capacity"].update({"memory": {"value": "lots"}}),
            "spec.devices[0].capacity.memory.value",
        ),
        (lambda s: s["provisioning"].pop("coreweave"), "spec.provisioning.coreweave"),
        (lambda s: s["devices"].append(dict(s["devices"][0])), "spec.devices[1].name"),
    ],
    ids=["dra-without-device-class", "two-values", "bad-quantity", "no-coreweave", "dup-device"],
)
def test_invalid_class_is_fatal_and_not_usable(change, field: str) -> None:
    rsp = run(with_spec("nvidia-h100-8x", change))
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
