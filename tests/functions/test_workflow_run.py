"""function-workflow-run through its real run_function: presets, GPU classes, phases, identity.

Each case's whole response is in tests/functions/responses/workflow_run/; the tests named for a
rule read the field it is about.

Also checks that the XRD and the function agree (gpuClass enum, refused runtime/quantization
pairs), that each GPU class's CEL picks exactly its GPUs with the DRA CEL evaluator, and that
everything the run composes, down the rendered tree, is owned by its XR in the XR's namespace.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib
import re

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.workflow_run import fn, gpu_classes, phases, presets
from plnt import cel, xp
from plnt.models import workflow_run
from plnt_host import render, runtime
from tests.functions import tables
from tests.support import request as observing

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples/workflowrun-llama-70b/xr.yaml").read_text())
XRD = yaml.safe_load((REPO / "apis/workflowruns/definition.yaml").read_text())
PHASE_SCENARIOS = render.scenario_folders(REPO / "examples/workflowrun-phases")
UID = "6f1c2a4e-8d1b-4c55-9b7e-2f0a3c9d7e11"
ENDPOINT = "llama-3-1-70b-instruct.default.svc.cluster.local:8000"  # the seed's form
ADDRESS = "llama-3-1-70b-instruct.default.svc:8000"  # as kubectl's ENDPOINT column shows it


def request(xr: dict, observed: dict[str, dict] | None = None) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    return req


def run(xr: dict, observed: dict[str, dict] | None = None) -> fnv1.RunFunctionResponse:
    return runtime.call_sync(fn.run_function, request(xr, observed), "function-workflow-run")


def seed(**changes) -> dict:
    xr = copy.deepcopy(SEED)
    xr["metadata"]["uid"] = UID
    xr["metadata"]["generation"] = 1
    for path, value in changes.items():
        node = xr["spec"]
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return xr


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {n: xp.to_dict(r.resource) for n, r in rsp.desired.resources.items()}


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def refusal(rsp: fnv1.RunFunctionResponse) -> str:
    """The Warning an invalid spec gets: never a Fatal (Crossplane would drop the status)."""
    assert [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL] == []
    (msg,) = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert status(rsp)["phase"] == "Failed"
    return msg


FLEET = [
    doc
    for path in sorted((REPO / "examples/fleet").glob("classes-*.yaml"))
    for doc in render.load_yaml_docs(path)
]


def engine_of(rsp: fnv1.RunFunctionResponse) -> dict:
    (engine,) = desired(rsp)["model-deployment"]["spec"]["engines"]
    return engine


def container_of(rsp: fnv1.RunFunctionResponse) -> dict:
    (container,) = engine_of(rsp)["members"][0]["template"]["spec"]["containers"]
    return container


# --- the seed's example -------------------------------------------------------------------


def test_seed_example_composes_a_deployment_and_a_service() -> None:
    rsp = response("seed")
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    out = desired(rsp)
    assert sorted(out) == ["model-deployment", "model-service"]
    assert out["model-deployment"]["spec"]["canary"]["runId"] == status(rsp)["workflowRunId"]
    # the seed's endpoint: a Service named after the run, its dots made dashes
    assert out["model-service"]["spec"]["service"] == {"name": "llama-3-1-70b-instruct"}
    assert status(rsp)["phase"] == "Validating"


# --- runtime presets ----------------------------------------------------------------------

PRESET_CASES = [
    (
        "vllm",
        "vllm/vllm-openai:",
        ["vllm", "serve"],
        [
            "/models",
            "--served-model-name=meta-llama/Llama-3.1-70B-Instruct",
            "--host=0.0.0.0",
            "--port=8000",
            "--tensor-parallel-size=2",
            "--dtype=float16",
        ],
    ),
    (
        "tgi",
        "ghcr.io/huggingface/text-generation-inference:",
        ["text-generation-launcher"],
        [
            "--model-id=/models",
            "--hostname=0.0.0.0",
            "--port=8000",
            "--num-shard=2",
            "--dtype=float16",
        ],
    ),
    (
        "sglang",
        "lmsysorg/sglang:",
        ["python3", "-m", "sglang.launch_server"],
        [
            "--model-path=/models",
            "--served-model-name=meta-llama/Llama-3.1-70B-Instruct",
            "--host=0.0.0.0",
            "--port=8000",
            "--tp-size=2",
            "--dtype=float16",
        ],
    ),
    (
        "trt-llm",
        "nvcr.io/nvidia/tensorrt-llm/release:",
        ["trtllm-serve"],
        [
            "/models",
            "--served-model-name=meta-llama/Llama-3.1-70B-Instruct",
            "--backend=pytorch",
            "--host=0.0.0.0",
            "--port=8000",
            "--tp_size=2",
        ],
    ),
]


@pytest.mark.parametrize(
    ("runtime_name", "image", "command", "args"), PRESET_CASES, ids=[c[0] for c in PRESET_CASES]
)
def test_each_runtime_launches_its_server_on_port_8000(runtime_name, image, command, args) -> None:
    rsp = response(f"runtime-{runtime_name}")
    container = container_of(rsp)
    assert container["image"].startswith(image)
    assert re.search(r":v?\d+\.\d+\.\d+$", container["image"]), "images are pinned to a release"
    assert container["command"] == command
    assert container["args"] == args
    assert engine_of(rsp)["name"] == runtime_name


QUANTIZATION_FLAGS = {
    ("vllm", "fp8"): ["--quantization=fp8"],
    ("vllm", "awq-4bit"): ["--quantization=awq"],
    ("vllm", "gptq-4bit"): ["--quantization=gptq"],
    ("tgi", "fp8"): ["--quantize=fp8"],
    ("tgi", "awq-4bit"): ["--quantize=awq"],
    ("tgi", "gptq-4bit"): ["--quantize=gptq"],
    ("sglang", "fp8"): ["--quantization=fp8"],
    ("sglang", "awq-4bit"): ["--quantization=awq"],
    ("sglang", "gptq-4bit"): ["--quantization=gptq"],
    ("trt-llm", "fp16"): [],
    ("trt-llm", "fp8"): [],
    ("trt-llm", "awq-4bit"): [],
}


@pytest.mark.parametrize(
    ("pair", "flags"),
    QUANTIZATION_FLAGS.items(),
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else "",
)
def test_quantization_becomes_the_runtimes_own_flag(pair, flags) -> None:
    runtime_name, quantization = pair
    args = container_of(response(f"quantization-{runtime_name}-{quantization}"))["args"]
    tail = args[len(presets.PRESETS[runtime_name].model_args) + 1 :]
    assert tail == flags


def test_a_pair_the_runtime_cannot_serve_fails_naming_both() -> None:
    rsp = response("refused-trt-llm-gptq-4bit")
    message = refusal(rsp)
    assert "spec.model.quantization" in message
    assert "trt-llm" in message
    assert "gptq-4bit" in message
    assert not rsp.desired.resources  # nothing was composed before: nothing to carry
    (valid,) = [c for c in rsp.conditions if c.type == "Valid"]
    assert valid.status == fnv1.STATUS_CONDITION_FALSE
    assert valid.reason == "InvalidSpec"


def test_the_xrd_refuses_exactly_the_pairs_the_presets_cannot_serve() -> None:
    spec = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    every = {q for p in presets.PRESETS.values() for q in p.quantization_args}
    pairs = sorted(
        (runtime, q)
        for runtime, p in presets.PRESETS.items()
        for q in every - set(p.quantization_args)
    )
    assert pairs == [("trt-llm", "gptq-4bit")]
    for runtime_name, quantization in pairs:
        assert (
            f"self.runtime == '{runtime_name}' && self.model.quantization == '{quantization}'"
            in rules
        )
    props = spec["properties"]
    assert sorted(props["runtime"]["enum"]) == sorted(presets.PRESETS)
    every = {q for p in presets.PRESETS.values() for q in p.quantization_args}
    assert set(props["model"]["properties"]["quantization"]["enum"]) == every


def test_traffic_percent_defaults_to_the_seeds_five_in_xrd_and_model() -> None:
    canary = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["canary"]["properties"]
    assert canary["trafficPercent"]["default"] == 5
    assert (
        workflow_run.WorkflowRunSpec.model_validate(
            {"model": {"name": "m"}, "resources": {"gpuClass": "nvidia.com/l4"}}
        ).canary.traffic_percent
        == 5
    )
    xr = seed()
    del xr["spec"]["canary"]
    canary_block = desired(run(xr))["model-deployment"]["spec"]["canary"]
    assert canary_block["trafficPercent"] == 5


# --- GPU classes ----------------------------------------------------------------------------

PRODUCTS = {
    "NVIDIA A100-SXM4-80GB": "nvidia.com/a100",
    "NVIDIA H100 80GB HBM3": "nvidia.com/h100",
    "NVIDIA H200": "nvidia.com/h200",
    "NVIDIA B200": "nvidia.com/b200",
    "NVIDIA L40S": "nvidia.com/l40s",
    "NVIDIA L4": "nvidia.com/l4",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "nvidia.com/rtx-pro-6000",
}


@pytest.mark.parametrize("product", PRODUCTS)
def test_each_gpu_class_selects_exactly_its_gpu(product: str) -> None:
    device = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "attributes": {"productName": {"string": product}},
    }
    chosen = [c for c, expr in gpu_classes.BUILT_IN.items() if cel.evaluate(expr, device)]
    assert chosen == [PRODUCTS[product]]


def test_the_xrd_takes_any_vendor_class_name_not_a_closed_list() -> None:
    props = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    gpu_class = props["resources"]["properties"]["gpuClass"]
    assert "enum" not in gpu_class
    assert gpu_class["pattern"] == workflow_run.GPU_CLASS_PATTERN
    assert gpu_class["maxLength"] == workflow_run.GPU_CLASS_MAX_LENGTH
    for name in [*gpu_classes.BUILT_IN, "amd.com/mi300x", "nvidia.com/gb300"]:
        assert re.fullmatch(gpu_class["pattern"], name), name
    for name in ["H100", "nvidia.com/", "/h100", "nvidia.com/H100", "nvidia.com/h100/x"]:
        assert not re.fullmatch(gpu_class["pattern"], name), name
    # what an InferenceClass device may declare is the same shape
    classes = yaml.safe_load((REPO / "apis/inferenceclasses/definition.yaml").read_text())
    device = classes["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["devices"]["items"]["properties"]["gpuClass"]
    assert (device["pattern"], device["maxLength"]) == (gpu_class["pattern"], 63)


@pytest.mark.parametrize("gpu_class", list(gpu_classes.BUILT_IN))
def test_gpu_class_becomes_the_device_request_cel(gpu_class: str) -> None:
    (device,) = engine_of(response(f"gpu-class-{slug(gpu_class)}"))["members"][0]["nodeSelector"][
        "devices"
    ]
    assert device == {
        "name": "gpu",
        "count": 4,
        "selectors": [{"cel": gpu_classes.BUILT_IN[gpu_class]}],
    }


def test_an_unknown_gpu_class_is_refused_listing_what_the_fleet_offers() -> None:
    message = refusal(response("gpu-class-unknown"))
    assert message == (
        "invalid spec: spec.resources.gpuClass: unknown gpuClass 'amd.com/mi300x': the fleet "
        "offers nvidia.com/h100, nvidia.com/l4, nvidia.com/l40s; a platform team offers "
        "another by setting gpuClass on an InferenceClass device"
    )
    assert "none (no InferenceClass has a GPU device)" in refusal(
        response("gpu-class-unknown-no-fleet")
    )


MI300X = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "InferenceClass",
    "metadata": {"name": "amd-mi300x-8x"},
    "spec": {
        "devices": [
            {
                "name": "gpu",
                "driver": "gpu.amd.com",
                "deviceClassName": "gpu.amd.com",
                "count": 8,
                "gpuClass": "amd.com/mi300x",
                "attributes": {"productName": {"string": "AMD Instinct MI300X"}},
            }
        ]
    },
}


# --- the cases: the seed, changed, and each phase's scenario -----------------------------------


def seed_case(name: str, xr: dict, observed: dict[str, dict] | None = None) -> tables.Case:
    return tables.Case(name, request(xr, observed))


def fleet_case(name: str, xr: dict, fleet: list[dict]) -> tables.Case:
    return tables.Case(name, request(xr), tuple(fleet))


def scenario_case(name: str, folder: pathlib.Path, phase: str | None = None) -> tables.Case:
    """The folder's XR, observed and required, the function alone; `phase` the phase last
    written, read back from the object."""
    scenario = render.load_scenario(folder)
    xr = copy.deepcopy(scenario.xr)
    if phase:
        xr.setdefault("status", {})["phase"] = phase
    return tables.Case(name, observing(xr, scenario.observed), tuple(scenario.required))


def without_storage_uri() -> dict:
    xr = seed()
    del xr["spec"]["model"]["storageUri"]
    return xr


def with_replicas(replicas: int | None) -> dict[str, dict] | None:
    """The seed's deployment as observed, its replicas set by the autoscaler."""
    if replicas is None:
        return None
    md = desired(run(seed()))["model-deployment"]
    md["spec"]["replicas"] = replicas
    return {"model-deployment": md}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# (previous phase written, phase wanted, ttl in ms) for the Ready scenario
WRITTEN_ONCE = [
    ("Deploying", "SmokeTesting", 1000),
    ("PullingWeights", "Deploying", 1000),
    ("SmokeTesting", "Promoting", 1000),
    ("Promoting", "Ready", 60000),
    (None, "Ready", 60000),
    ("Ready", "Ready", 60000),
]
REPLICAS = [(None, 1), (3, 3), (9, 4), (0, 1)]

TABLE = tables.Table(
    "workflow_run",
    fn.run_function,
    (
        seed_case("seed", seed()),
        *(seed_case(f"runtime-{c[0]}", seed(runtime=c[0])) for c in PRESET_CASES),
        *(
            seed_case(f"quantization-{r}-{q}", seed(runtime=r, model__quantization=q))
            for r, q in QUANTIZATION_FLAGS
        ),
        seed_case(
            "refused-trt-llm-gptq-4bit", seed(runtime="trt-llm", model__quantization="gptq-4bit")
        ),
        *(
            seed_case(f"gpu-class-{slug(c)}", seed(resources__gpuClass=c, resources__gpu=4))
            for c in gpu_classes.BUILT_IN
        ),
        fleet_case("gpu-class-unknown", seed(resources__gpuClass="amd.com/mi300x"), FLEET),
        fleet_case("gpu-class-unknown-no-fleet", seed(resources__gpuClass="amd.com/mi300x"), []),
        fleet_case(
            "gpu-class-declared", seed(resources__gpuClass="amd.com/mi300x"), [*FLEET, MI300X]
        ),
        fleet_case(
            "gpu-class-unknown-declared-listed",
            seed(resources__gpuClass="nvidia.com/v100"),
            [MI300X],
        ),
        seed_case("no-storage-uri", without_storage_uri()),
        *(
            seed_case(f"replicas-observed-{slug(str(r))}", seed(), with_replicas(r))
            for r, _ in REPLICAS
        ),
        *(scenario_case(f"phase-{p.name}", p) for p in PHASE_SCENARIOS),
        *(
            scenario_case(
                f"ready-after-{slug(str(previous))}",
                REPO / "examples/workflowrun-phases/Ready",
                previous,
            )
            for previous, _, _ in WRITTEN_ONCE
        ),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_a_class_an_inference_class_declares_resolves_to_its_device() -> None:
    """A GPU plnt has no table entry for, offered by the platform team with no plnt release."""
    rsp = response("gpu-class-declared")
    assert not rsp.results
    (device,) = engine_of(rsp)["members"][0]["nodeSelector"]["devices"]
    (selector,) = device["selectors"]
    assert selector["cel"] == (
        'device.driver == "gpu.amd.com" && '
        'device.attributes["gpu.amd.com"].productName == "AMD Instinct MI300X"'
    )
    amd = {**MI300X["spec"]["devices"][0]}
    assert cel.evaluate(selector["cel"], amd)
    for inference_class in FLEET:
        for other in inference_class["spec"]["devices"]:
            assert not cel.evaluate(selector["cel"], other), inference_class["metadata"]["name"]
    # and it is listed with the others when a class is unknown
    message = refusal(response("gpu-class-unknown-declared-listed"))
    assert "the fleet offers amd.com/mi300x;" in message


def test_a_declared_class_overrides_the_table_and_two_declarations_are_ored() -> None:
    h100 = copy.deepcopy(next(c for c in FLEET if c["metadata"]["name"] == "nvidia-h100-8x"))
    h100["spec"]["devices"][0]["gpuClass"] = "nvidia.com/h100"
    h100_pcie = copy.deepcopy(h100)
    h100_pcie["metadata"]["name"] = "nvidia-h100-pcie"
    h100_pcie["spec"]["devices"][0]["attributes"]["productName"]["string"] = "NVIDIA H100 PCIe"
    gpus = gpu_classes.fleet_gpus([h100, h100_pcie])
    want = (
        '(device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName'
        ' == "NVIDIA H100 80GB HBM3") || (device.driver == "gpu.nvidia.com" && '
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 PCIe")'
    )
    assert gpu_classes.selector_for("nvidia.com/h100", gpus) == want
    for device in (h100["spec"]["devices"][0], h100_pcie["spec"]["devices"][0]):
        assert cel.evaluate(want, device)
    # an undeclared built-in class still resolves through the table
    assert (
        gpu_classes.selector_for("nvidia.com/b200", gpus) == gpu_classes.BUILT_IN["nvidia.com/b200"]
    )


def test_odd_inference_classes_never_break_resolution() -> None:
    odd = [
        {"metadata": {"name": "x"}, "spec": {"devices": ["not a device", {"driver": 7}]}},
        {"spec": None},
        {"metadata": {"name": "cpu"}, "spec": {"devices": [{"driver": "cpu.modelplane.ai"}]}},
        {"metadata": {"name": "q"}, "spec": {"devices": [{"driver": 'gpu."x', "gpuClass": "a/b"}]}},
    ]
    gpus = gpu_classes.fleet_gpus(odd)
    assert [g.inference_class for g in gpus] == ["q"]
    assert gpu_classes.offered(gpus) == ["a/b"]
    assert cel.compile(gpu_classes.selector_for("a/b", gpus))  # the quote is escaped


def test_an_invalid_update_to_a_running_run_loses_nothing() -> None:
    """Crossplane deletes composed resources a non-Fatal response leaves out, and drops the
    status of a Fatal one: an invalid update composes exactly what is observed and says
    Failed, while the previous spec keeps serving."""
    scenario = render.load_scenario(REPO / "examples/workflowrun-invalid-update")
    out = render.render(scenario)
    st = out.xr["status"]
    assert (st["phase"], st["observedGeneration"]) == ("Failed", 2)
    assert st["url"] == "http://203.0.113.50/default/llama-3.1-70b-instruct"
    assert st["endpoint"] == ENDPOINT
    assert [r["severity"] for r in out.results] == ["SEVERITY_WARNING"]
    assert f"keeps serving at {ENDPOINT}" in out.results[0]["message"]
    assert "unknown gpuClass 'amd.com/mi300x'" in out.results[0]["message"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert (conds["Valid"]["status"], conds["Valid"]["reason"]) == ("False", "InvalidSpec")
    assert conds["Valid"]["message"].startswith("spec.resources.gpuClass: ")
    assert conds["Ready"]["status"] == "True"  # still serving
    observed = {
        o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in scenario.observed
    }
    composed = {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in out.composed}
    assert sorted(composed) == sorted(observed) == ["model-deployment", "model-service"]
    for name, obj in composed.items():
        seen = observed[name]
        assert obj["spec"] == seen["spec"], name
        assert (obj["apiVersion"], obj["kind"]) == (seen["apiVersion"], seen["kind"])
        assert obj["metadata"]["labels"] == seen["metadata"]["labels"]
        assert obj["metadata"]["annotations"] == seen["metadata"]["annotations"]
        assert "status" not in obj and "uid" not in obj["metadata"]


def test_carried_keeps_what_the_function_owns_and_nothing_the_server_does() -> None:
    observed = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelService",
        "metadata": {
            "name": "m",
            "namespace": "default",
            "uid": "u",
            "resourceVersion": "7",
            "generation": 3,
            "managedFields": [{"manager": "crossplane"}],
            "ownerReferences": [{"kind": "WorkflowRun", "name": "m"}],
            "labels": {"crossplane.io/composite": "m", "plnt.work/workflowrun": "m"},
            "annotations": {xp.COMPOSITION_RESOURCE_NAME: "model-service", "a": "b"},
        },
        "spec": {
            "endpoints": [],
            # the ModelService's own reconciler's: applied back from this observation, it would
            # replace references written since, and what they name would never be deleted
            "crossplane": {"resourceRefs": [{"kind": "HTTPRoute", "name": "r"}]},
        },
        "status": {"url": "http://x"},
    }
    assert fn.carried(observed) == {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelService",
        "metadata": {
            "name": "m",
            "labels": {"plnt.work/workflowrun": "m"},
            "annotations": {"a": "b"},
        },
        "spec": {"endpoints": []},
    }


# --- weights, replicas, identity -------------------------------------------------------------


def test_without_storage_uri_the_runtime_pulls_the_model_by_name() -> None:
    rsp = response("no-storage-uri")
    assert container_of(rsp)["args"][0] == "meta-llama/Llama-3.1-70B-Instruct"
    annotations = engine_of(rsp)["members"][0]["template"]["metadata"]["annotations"]
    assert annotations == {"plnt.work/health-path": "/health"}


@pytest.mark.parametrize(("observed_replicas", "want"), REPLICAS)
def test_replicas_start_at_min_and_keep_what_the_autoscaler_set_within_bounds(
    observed_replicas, want
) -> None:
    md = desired(response(f"replicas-observed-{slug(str(observed_replicas))}"))["model-deployment"]
    assert md["spec"]["replicas"] == want


def test_workflow_run_id_is_r_and_ten_hex_of_uid_and_the_users_spec() -> None:
    xr = seed()
    first = status(run(xr))["workflowRunId"]
    assert re.fullmatch(r"r-[0-9a-f]{10}", first)
    canonical = json.dumps(xr["spec"], sort_keys=True, separators=(",", ":"))
    assert first == "r-" + hashlib.sha256(f"{UID}{canonical}".encode()).hexdigest()[:10]
    assert status(run(seed()))["workflowRunId"] == first, "stable across reconciles"
    # Crossplane writes spec.crossplane (refs to what it composed) and bumps the generation:
    # no fresh run, while observedGeneration still follows the object
    written = seed()
    written["metadata"]["generation"] = 4
    written["spec"]["crossplane"] = {
        "compositionRef": {"name": "workflowruns"},
        "resourceRefs": [{"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService"}],
    }
    by_crossplane = status(run(written))
    assert by_crossplane["workflowRunId"] == first
    assert by_crossplane["observedGeneration"] == 4
    written["spec"]["crossplane"]["resourceRefs"] = []  # a composed resource removed
    assert status(run(written))["workflowRunId"] == first
    # the user's edit is a fresh run, and editing back is the first run's id again
    edited = seed(trafficPercent=20)
    edited["metadata"]["generation"] = 5
    second = status(run(edited))
    assert second["workflowRunId"] != first, "a spec update is a fresh run"
    assert second["observedGeneration"] == 5
    other = seed()
    other["metadata"]["uid"] = "another-uid"
    assert status(run(other))["workflowRunId"] != first


# --- phases -------------------------------------------------------------------------------------


def test_there_is_a_scenario_for_every_phase() -> None:
    assert sorted(p.name for p in PHASE_SCENARIOS) == sorted(phases.PHASES)


@pytest.mark.parametrize("folder", PHASE_SCENARIOS, ids=[p.name for p in PHASE_SCENARIOS])
def test_each_phase_scenario_renders_its_phase(folder: pathlib.Path) -> None:
    out = render.render(render.load_scenario(folder))
    st = out.xr["status"]
    assert st["phase"] == folder.name
    serving = {c["type"]: c for c in st["conditions"]}["Serving"]
    assert serving["reason"] == folder.name
    assert serving["status"] == ("True" if folder.name == "Ready" else "False")
    url = "http://203.0.113.50/default/llama-3.1-70b-instruct"
    if folder.name in ("Ready", "RolledBack", "SmokeTesting", "Promoting"):
        assert (st["endpoint"], st["address"], st["url"]) == (ENDPOINT, ADDRESS, url)
    else:
        assert not {"endpoint", "address", "url"} & set(st)
    # Crossplane's Ready means "serving": a stable revision behind a routed ModelService.
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    serving_stable = folder.name in ("Ready", "RolledBack", "SmokeTesting")
    assert ready["status"] == ("True" if serving_stable else "False")


@pytest.mark.parametrize(("previous", "want", "ttl_ms"), WRITTEN_ONCE)
def test_every_phase_of_a_passing_rollout_is_written_once(previous, want, ttl_ms) -> None:
    """The gate's pass and the traffic shift can land between two reconciles; the phase last
    written (read back from the object) keeps Promoting in the sequence for one reconcile."""
    rsp = response(f"ready-after-{slug(str(previous))}")
    st = xp.to_dict(rsp.desired.composite.resource)["status"]
    assert st["phase"] == want
    # a first rollout (no endpoint written yet) reports one only from Promoting on
    url = "http://203.0.113.50/default/llama-3.1-70b-instruct"
    assert st.get("url") == (url if want in ("Promoting", "Ready") else None)
    assert st.get("endpoint") == (ENDPOINT if want in ("Promoting", "Ready") else None)
    assert rsp.meta.ttl.ToMilliseconds() == ttl_ms


def test_rolled_back_carries_the_measured_figures_against_the_budgets() -> None:
    out = render.render(render.load_scenario(REPO / "examples/workflowrun-phases/RolledBack"))
    serving = {c["type"]: c for c in out.xr["status"]["conditions"]}["Serving"]
    assert "p95 412 ms (budget 250 ms)" in serving["message"]


_SCHEDULED = {"type": "ReplicasScheduled", "status": "True"}
_AWAITING = {"type": "Canary", "status": "False", "reason": "AwaitingVerdict"}
_CANARY_STATUS = {"revisions": {"stable": "a", "canary": "b"}}

PHASE_TABLE = [
    (
        {
            "status": {
                **_CANARY_STATUS,
                "canary": {"gate": {"state": "Waiting"}},
                "conditions": [_SCHEDULED, _AWAITING],
            }
        },
        None,
        "Deploying",
    ),
    (
        {
            "status": {
                **_CANARY_STATUS,
                "conditions": [
                    _SCHEDULED,
                    _AWAITING,
                    {"type": "CanaryGate", "status": "Unknown", "reason": "Measuring"},
                ],
            }
        },
        None,
        "SmokeTesting",
    ),
    (None, None, "Validating"),
    (
        {"status": {"conditions": [{"type": "Synced", "status": "False", "message": "boom"}]}},
        None,
        "Failed",
    ),
    ({"status": {"canary": {"gate": {"verdict": "Fail"}}}}, None, "Failed"),
    ({"status": {}}, None, "Validating"),
    (
        {"status": {"conditions": [{"type": "ReplicasScheduled", "status": "False"}]}},
        None,
        "Pending",
    ),
]


@pytest.mark.parametrize(("md", "ms", "want"), PHASE_TABLE)
def test_phase_rules(md, ms, want) -> None:
    assert phases.derive(md, ms).name == want


RUN = "r-0123456789"
_URL = "http://203.0.113.50/default/m"
_ROUTED_SERVICE = {
    "status": {
        "url": _URL,
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Routed", "status": "True"},
        ],
    }
}


def _md(revisions: dict, gate: dict | None = None, *conds: dict, run_id: str = RUN) -> dict:
    canary = {"run": run_id} | ({"gate": gate} if gate else {})
    return {
        "metadata": {"name": "llama"},
        "status": {"revisions": revisions, "canary": canary, "conditions": [*conds]},
    }


def _following(service: dict, md: dict) -> dict:
    """The service as it reads once it has computed its weights from the deployment's
    revisions now (the routed service of every row, unless a row says otherwise)."""
    if service is not _ROUTED_SERVICE:
        return service
    out = copy.deepcopy(service)
    revisions = md["status"]["revisions"]
    out["status"]["deployments"] = [{"name": "llama", **revisions}]
    return out


_FIRST = {"canary": "b"}
_READY = {"type": "ReplicasReady", "status": "True", "reason": "Available"}
_PULLING = {"type": "ReplicasReady", "status": "False", "reason": "PullingWeights"}
_WAITING = {"type": "ReplicasReady", "status": "False", "reason": "Waiting"}
_STARTING = {"type": "ReplicasReady", "status": "False", "reason": "Starting"}

RUN_TABLE = [
    # (name, deployment, service, phase, endpoint)
    (
        "a new run not taken up yet",
        _md({"stable": "a"}, None, _SCHEDULED, _READY, run_id="r-old"),
        _ROUTED_SERVICE,
        "Validating",
        _URL,
    ),
    (
        "first rollout pulling weights",
        _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, _PULLING, _AWAITING),
        None,
        "PullingWeights",
        None,
    ),
    (
        "first rollout starting",
        _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, _WAITING, _AWAITING),
        None,
        "Deploying",
        None,
    ),
    (
        "first rollout measured",
        _md(_FIRST, {"revision": "b", "state": "Measuring"}, _SCHEDULED, _READY, _AWAITING),
        _ROUTED_SERVICE,
        "SmokeTesting",
        None,
    ),
    (
        "first rollout verdict not acted on",
        _md(
            _FIRST,
            {"revision": "b", "state": "Measured", "verdict": "Pass"},
            _SCHEDULED,
            _READY,
            _AWAITING,
        ),
        None,
        "SmokeTesting",
        None,
    ),
    (
        "first rollout failed",
        _md(
            {},
            {"revision": "b", "verdict": "Fail"},
            _SCHEDULED,
            {
                "type": "Canary",
                "status": "False",
                "reason": "Failed",
                "message": "never took traffic",
            },
        ),
        _ROUTED_SERVICE,
        "Failed",
        None,
    ),
    (
        "promoted, not routed yet",
        _md(
            {"stable": "b"},
            None,
            _SCHEDULED,
            _READY,
            {"type": "Canary", "status": "True", "reason": "Promoted"},
        ),
        {
            "status": {
                "url": _URL,
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {
                        "type": "Routed",
                        "status": "False",
                        "message": "1 endpoint(s) of a first rollout wait",
                    },
                ],
            }
        },
        "Promoting",
        _URL,
    ),
    (
        "re-tested in place",
        _md(
            {"stable": "a", "canary": "a"},
            {"revision": "a", "state": "Measuring"},
            _SCHEDULED,
            _READY,
            _AWAITING,
        ),
        _ROUTED_SERVICE,
        "SmokeTesting",
        _URL,
    ),
    (
        "re-test in place failed",
        _md(
            {"stable": "a"},
            {"revision": "a", "verdict": "Fail"},
            _SCHEDULED,
            _READY,
            {"type": "Canary", "status": "False", "reason": "Failed"},
        ),
        _ROUTED_SERVICE,
        "Failed",
        _URL,
    ),
    ("ready", _md({"stable": "a"}, None, _SCHEDULED, _READY), _ROUTED_SERVICE, "Ready", _URL),
    (
        "promoted, the service still weighs the old revisions",
        _md({"stable": "b"}, None, _SCHEDULED, _READY),
        {
            "status": {
                **_ROUTED_SERVICE["status"],
                "deployments": [{"name": "llama", "stable": "a", "canary": "b"}],
            }
        },
        "Promoting",
        _URL,
    ),
]


@pytest.mark.parametrize(
    ("md", "ms", "want", "endpoint"), [c[1:] for c in RUN_TABLE], ids=[c[0] for c in RUN_TABLE]
)
def test_phase_rules_of_a_run(md, ms, want, endpoint) -> None:
    phase = phases.derive(md, _following(ms, md), RUN)
    assert (phase.name, phase.url) == (want, endpoint)


# --- lifecycle: everything is owned by the XR, in its namespace ---------------------------------


def test_everything_composed_down_the_tree_is_owned_by_its_xr_in_its_namespace() -> None:
    out = render.render(render.load_scenario(REPO / "examples/workflowrun-llama-70b"), tree=True)
    count = 0

    def walk(node: render.Rendered) -> None:
        nonlocal count
        parent = node.xr
        for obj in node.composed:
            count += 1
            meta = obj["metadata"]
            assert meta["namespace"] == parent["metadata"]["namespace"], meta
            (owner,) = [r for r in meta["ownerReferences"] if r.get("controller")]
            assert (owner["kind"], owner["name"]) == (parent["kind"], parent["metadata"]["name"])
            assert owner["blockOwnerDeletion"] is True
        for child in node.children:
            walk(child)

    walk(out)
    assert out.xr["kind"] == "WorkflowRun"
    assert count >= 4
    kinds = {o["kind"] for o in out.composed}
    assert kinds == {"ModelDeployment", "ModelService"}


def test_the_docs_print_the_tables_the_code_uses() -> None:
    text = (REPO / "docs/workflow-run.md").read_text()
    for gpu_class, expression in gpu_classes.BUILT_IN.items():
        assert f"| `{gpu_class}` | `{expression}` |" in text
    for preset in presets.PRESETS.values():
        assert f"`{preset.image}`" in text


def _child(out: render.Rendered, kind: str = "ModelDeployment") -> render.Rendered:
    (node,) = [c for c in out.children if c.xr["kind"] == kind]
    return node


def _revisions_of_replicas(node: render.Rendered) -> list[str]:
    return sorted(
        o["metadata"]["labels"]["modelplane.ai/revision"]
        for o in node.composed
        if o["kind"] == "ModelReplica"
    )


def _passed(run_id: str, revision: str) -> dict:
    return {
        "revision": revision,
        "run": run_id,
        "state": "Measured",
        "verdict": "Pass",
        "reason": "all 10 prompts succeeded",
        "budgets": {"ttftMs": 250, "tpotMs": 40},
    }


def test_the_first_rollout_is_tested_before_it_takes_traffic_and_updates_are_fresh_runs() -> None:
    """Render generation 1 down the tree; observe its first revision as passed and running;
    then update the spec, once changing the pods and once not."""
    scenario = render.load_scenario(REPO / "examples/workflowrun-llama-70b")
    scenario.xr["metadata"].update(uid=UID, generation=1)
    first = render.render(scenario, tree=True)
    r1 = first.xr["status"]["workflowRunId"]
    md_node = _child(first)
    rev = md_node.xr["status"]["revisions"]["canary"]
    assert md_node.xr["status"]["revisions"] == {"canary": rev}  # no stable: no traffic
    assert md_node.xr["status"]["canary"] == {
        "run": r1,
        "revision": rev,
        "trafficPercent": 0,
        "replicas": 1,
        "mode": "FirstRollout",
        "readyReplicas": 0,
        "readiness": "Waiting",
        "gate": {
            "revision": rev,
            "run": r1,
            "state": "Waiting",
            "message": "0 of 1 canary ModelReplicas ready",
        },
    }
    conds = {c["type"]: c for c in md_node.xr["status"]["conditions"]}
    assert (conds["Canary"]["reason"], conds["Ready"]["status"]) == ("AwaitingVerdict", "False")
    assert _revisions_of_replicas(md_node) == [rev]

    # the first revision passed its smoke test and runs
    md = copy.deepcopy(next(o for o in first.composed if o["kind"] == "ModelDeployment"))
    md["metadata"]["uid"] = "md-uid"
    md["status"] = {
        "revisions": {"stable": rev},
        "canary": {"run": r1, "revision": rev, "gate": _passed(r1, rev)},
        "conditions": [{"type": "ReplicasReady", "status": "True", "reason": "Available"}],
    }
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]}
    # its replicas (not their endpoints: the gate would measure their gateway addresses)
    running = [
        {**copy.deepcopy(o), "status": ready}
        for o in md_node.composed
        if o["kind"] == "ModelReplica"
    ]

    def update(change) -> render.Rendered:
        xr = copy.deepcopy(scenario.xr)
        xr["metadata"]["generation"] = 2
        change(xr["spec"])
        return render.render(
            render.Scenario(xr, scenario.required, [md, *running], scenario.path), tree=True
        )

    # a change of the pods: a canary at trafficPercent, in a fresh run
    fp8 = update(lambda spec: spec["model"].update(quantization="fp8"))
    r2 = fp8.xr["status"]["workflowRunId"]
    assert r2 != r1
    assert fp8.xr["status"]["observedGeneration"] == 2
    assert fp8.xr["status"]["phase"] == "Validating"  # the deployment has not taken up r2 yet
    composed = next(o for o in fp8.composed if o["kind"] == "ModelDeployment")
    assert composed["spec"]["canary"]["runId"] == r2
    md_after = _child(fp8)
    canary = md_after.xr["status"]["revisions"]["canary"]
    assert md_after.xr["status"]["revisions"] == {"stable": rev, "canary": canary}
    assert canary != rev
    assert md_after.xr["status"]["canary"]["trafficPercent"] == 5
    assert md_after.xr["status"]["canary"]["run"] == r2
    assert _revisions_of_replicas(md_after) == sorted([rev, canary])
    canary_args = next(
        o
        for o in md_after.composed
        if o["kind"] == "ModelReplica"
        and o["metadata"]["labels"]["modelplane.ai/revision"] == canary
    )["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["args"]
    assert "--quantization=fp8" in canary_args

    # a change that leaves the pods as they are: the serving revision is re-tested in place
    budgets = update(lambda spec: spec["canary"]["smokeTest"].update(ttftBudgetMs=200))
    r3 = budgets.xr["status"]["workflowRunId"]
    assert r3 not in (r1, r2), "each distinct spec is its own run"
    md_after = _child(budgets)
    assert md_after.xr["status"]["revisions"] == {"stable": rev, "canary": rev}
    assert md_after.xr["status"]["canary"]["trafficPercent"] == 100
    assert _revisions_of_replicas(md_after) == [rev]  # nothing new starts, nothing stops
    cond = {c["type"]: c for c in md_after.xr["status"]["conditions"]}["Canary"]
    assert (cond["reason"], cond["message"]) == (
        "AwaitingVerdict",
        f"revision {rev} serves unchanged while the latency gate re-tests it in run {r3}",
    )
    gate_cond = {c["type"]: c for c in md_after.xr["status"]["conditions"]}["CanaryGate"]
    assert (gate_cond["reason"], gate_cond["message"]) == (
        "WaitingForCanary",
        f"canary revision {rev}: no canary ModelEndpoint yet",
    )


# --- PullingWeights: the storageUri staged by an init container, seen all the way up ------------

PULLING = REPO / "examples/workflowrun-phases/PullingWeights"


@pytest.mark.parametrize(
    ("reason", "want"),
    [("PullingWeights", "PullingWeights"), ("Waiting", "Deploying"), ("", "Deploying")],
)
def test_replicas_ready_reason_picks_pulling_weights_or_deploying(reason: str, want: str) -> None:
    ready = {"type": "ReplicasReady", "status": "False", "reason": reason, "message": "0 of 1"}
    md = {"status": {"revisions": {"stable": "a"}, "conditions": [_SCHEDULED, ready]}}
    phase = phases.derive(md, None)
    assert phase.name == want
    assert "0 of 1" in phase.message


def _rendered(kind: str, out: render.Rendered) -> render.Rendered:
    return next(n for n in out.tree() if n.xr["kind"] == kind)


def _observed(kind: str) -> dict:
    for path in sorted((PULLING / "observed").glob("*.yaml")):
        for doc in render.load_yaml_docs(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no observed {kind}")


@pytest.mark.parametrize(
    ("kind", "typ"), [("ModelDeployment", "ReplicasReady"), ("ModelReplica", "WorkloadsReady")]
)
def test_pulling_weights_scenario_is_what_the_functions_themselves_report(
    kind: str, typ: str
) -> None:
    """The observed ModelDeployment and ModelReplica carry the conditions their own functions
    derive from the observed Deployment below them (pods, no copy available)."""
    out = render.render(render.load_scenario(PULLING), tree=True)
    rendered = {c["type"]: c for c in _rendered(kind, out).xr["status"]["conditions"]}[typ]
    observed = xp.condition_of(_observed(kind), typ)
    assert observed is not None
    assert (rendered["status"], rendered["reason"]) == ("False", "PullingWeights")
    assert (observed["reason"], observed["message"]) == (rendered["reason"], rendered["message"])


def test_seed_storage_uri_becomes_the_engines_weights_init_container() -> None:
    out = render.render(render.load_scenario(REPO / "examples/workflowrun-llama-70b"), tree=True)
    replica = _rendered("ModelReplica", out)
    (deployment,) = [
        o["spec"]["forProvider"]["manifest"]
        for o in replica.composed
        if o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME].startswith("workload-")
    ]
    pod = deployment["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["name"] == "stage-weights"
    assert init["image"] == "amazon/aws-cli:2.27.50"
    assert init["env"] == [
        {"name": "LOCATION", "value": "plnt-models/llama-3.1-70b/fp16"},
        {"name": "DEST", "value": "/models"},
    ]
    assert init["volumeMounts"] == [{"name": "weights", "mountPath": "/models"}]
    assert pod["volumes"] == [{"name": "weights", "emptyDir": {}}]
    (engine,) = pod["containers"]
    assert engine["volumeMounts"] == [{"name": "weights", "mountPath": "/models", "readOnly": True}]
    assert engine["args"][0] == "/models"  # vLLM serves the staged directory


def test_the_service_follows_the_deployments_revisions_so_a_canary_wakes_it() -> None:
    """The ModelService reads endpoints as required resources, which Crossplane does not watch:
    each change of revisions must change the service itself (live: a service that ran before the
    deployment took an update up never showed the canary's share)."""
    md = desired(run(seed()))["model-deployment"]

    def service_annotations(revisions: dict | None) -> dict:
        seen = copy.deepcopy(md)
        if revisions is not None:
            seen["status"] = {"revisions": revisions}
        out = desired(run(seed(), {"model-deployment": seen}))["model-service"]
        return {k: v for k, v in out["metadata"]["annotations"].items() if "revision" in k}

    assert service_annotations(None) == {}
    assert service_annotations({"canary": "b"}) == {"plnt.work/canary-revision": "b"}
    assert service_annotations({"stable": "a", "canary": "b"}) == {
        "plnt.work/stable-revision": "a",
        "plnt.work/canary-revision": "b",
    }
    assert service_annotations({"stable": "b"}) == {"plnt.work/stable-revision": "b"}


# --- the first rollout's sequence, each reconcile reading back what the last one wrote ----------

_SEED_SEQUENCE = ["Validating", "PullingWeights", "Deploying", "SmokeTesting", "Promoting", "Ready"]
_PASS = {"revision": "b", "state": "Measured", "verdict": "Pass"}
_PROMOTED = {"type": "Canary", "status": "True", "reason": "Promoted"}
_NOT_ROUTED = {
    "status": {
        "url": _URL,
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Routed", "status": "False", "message": "a first rollout waits"},
        ],
    }
}


def _children(stage: int, run_id: str) -> dict[str, dict]:
    """What the children report at each step of a first rollout: 0 nothing composed yet,
    1 replicas created (not staging), 2 staging weights, 3 engine starting, 4 ready and measured,
    5 the verdict, 6 promoted (service not following yet), 7 routed."""
    if stage == 0:
        return {}
    first, starting = {"canary": "b"}, {"state": "Waiting"}
    md = {
        1: lambda: _md(first, starting, _SCHEDULED, _WAITING, _AWAITING, run_id=run_id),
        2: lambda: _md(first, starting, _SCHEDULED, _PULLING, _AWAITING, run_id=run_id),
        3: lambda: _md(first, starting, _SCHEDULED, _STARTING, _AWAITING, run_id=run_id),
        4: lambda: _md(
            first,
            {"revision": "b", "state": "Measuring"},
            _SCHEDULED,
            _READY,
            _AWAITING,
            run_id=run_id,
        ),
        5: lambda: _md(first, _PASS, _SCHEDULED, _READY, _AWAITING, run_id=run_id),
        6: lambda: _md({"stable": "b"}, _PASS, _SCHEDULED, _READY, _PROMOTED, run_id=run_id),
        7: lambda: _md({"stable": "b"}, None, _SCHEDULED, _READY, _PROMOTED, run_id=run_id),
        # promoted, then its replica's pod restarts and stages its weights again (seen live)
        8: lambda: _md({"stable": "b"}, None, _SCHEDULED, _PULLING, _STABLE, run_id=run_id),
    }[stage]()
    service = copy.deepcopy(_following(_ROUTED_SERVICE, md) if stage == 7 else _NOT_ROUTED)
    kinds = fn.COMPOSED_KINDS
    md["apiVersion"], md["kind"] = kinds[fn.DEPLOYMENT]
    service["apiVersion"], service["kind"] = kinds[fn.SERVICE]
    service["metadata"] = {"name": "llama"}
    return {fn.DEPLOYMENT: md, fn.SERVICE: service}


_STABLE = {"type": "Canary", "status": "True", "reason": "Stable"}


def _written(seen: tuple[int, ...]) -> list[str]:
    """kubectl's sequence (the phase each time it changes) when the reconciles see the
    children's steps ``seen``, each reconcile's written status the next one's observed XR."""
    xr, written, run_id = seed(), [], None
    for stage in [*seen, 7, 7, 7, 7]:  # the last step stays observed until it settles
        st = status(run(xr, _children(stage, run_id or "")))
        run_id = st["workflowRunId"]
        if not written or written[-1] != st["phase"]:
            written.append(st["phase"])
        xr = copy.deepcopy(xr)
        xr["status"] = st
    return written


def _regressions() -> list[tuple[int, ...]]:
    """The forward steps with, after each step from staging on, the children reporting an
    earlier state for one or two reconciles: not staging, staging, engine starting, or
    promoted with its replica staging again."""
    out = []
    for after in range(2, 7):
        for back in (1, 2, 3, 8):
            for times in (1, 2):
                forward = list(range(after + 1))
                out.append((*forward, *[back] * times, *range(after, 7), 7))
    return out


def test_a_first_rollout_never_steps_back_when_a_child_reports_an_earlier_state() -> None:
    """Live, a promoted first revision's replica reported its weights staging again, and the
    WorkflowRun walked PullingWeights, Deploying, SmokeTesting, Promoting a second time: the
    first rollout's sequence must stay the seed's whatever a child reports late."""
    for seen in _regressions():
        assert _written(seen) == _SEED_SEQUENCE, (seen, _written(seen))
    assert len(_regressions()) == 5 * 4 * 2


def _interleavings() -> list[tuple[int, ...]]:
    """Every order in which reconciles can see the children's steps: each of steps 1-6 is seen
    by no reconcile, one, or two (the children can move any number of steps between two
    reconciles, or none); step 0 is the first reconcile's and 7 the last."""
    import itertools

    out = []
    for counts in itertools.product((0, 1, 2), repeat=6):
        seen = [0]
        for stage, n in zip(range(1, 7), counts, strict=True):
            seen += [stage] * n
        out.append((*seen, 7))
    return out


@pytest.mark.parametrize("chunk", range(9))
def test_a_first_rollout_writes_exactly_the_seeds_sequence_whatever_lands_between(chunk) -> None:
    """Each reconcile's written status becomes the next one's observed XR; the children's
    steps land between reconciles in every way they can. kubectl's sequence (the phase each
    time it changes) must be the seed's, no more and no less."""
    runs = _interleavings()[chunk::9]
    for seen in runs:
        assert _written(seen) == _SEED_SEQUENCE, (seen, _written(seen))
    assert len(_interleavings()) == 3**6
