"""function-workflow-run through its real run_function: presets, GPU classes, phases, identity.

Also checks that the XRD and the function agree (gpuClass enum, refused runtime/quantization
pairs), that each GPU class's CEL picks exactly its GPUs with the DRA CEL evaluator, and that
everything the run composes, down the rendered tree, is owned by its XR in the XR's namespace.
"""

from __future__ import annotations

import copy
import hashlib
import pathlib
import re

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.workflow_run import fn, gpu_classes, phases, presets
from plnt import cel, render, runtime, xp

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples/workflowrun-llama-70b/xr.yaml").read_text())
XRD = yaml.safe_load((REPO / "apis/workflowruns/definition.yaml").read_text())
PHASE_SCENARIOS = render.scenario_folders(REPO / "examples/workflowrun-phases")
UID = "6f1c2a4e-8d1b-4c55-9b7e-2f0a3c9d7e11"


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


def fatal(rsp: fnv1.RunFunctionResponse) -> str:
    (msg,) = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return msg


def engine_of(rsp: fnv1.RunFunctionResponse) -> dict:
    (engine,) = desired(rsp)["model-deployment"]["spec"]["engines"]
    return engine


def container_of(rsp: fnv1.RunFunctionResponse) -> dict:
    (container,) = engine_of(rsp)["members"][0]["template"]["spec"]["containers"]
    return container


# --- the seed's example -------------------------------------------------------------------


def test_seed_example_composes_a_deployment_and_a_service() -> None:
    rsp = run(seed())
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    out = desired(rsp)
    assert sorted(out) == ["model-deployment", "model-service"]
    md = out["model-deployment"]
    assert md["kind"] == "ModelDeployment"
    assert md["metadata"]["name"] == "llama-3.1-70b-instruct"
    assert md["metadata"]["labels"] == {"plnt.work/workflowrun": "llama-3.1-70b-instruct"}
    spec = md["spec"]
    assert spec["replicas"] == 1
    assert spec["autoscaling"] == {
        "targetTokensPerSecond": 1500,
        "minReplicas": 1,
        "maxReplicas": 4,
    }
    assert spec["canary"] == {
        "trafficPercent": 5,
        "smokeTest": {"prompts": 10, "ttftBudgetMs": 250, "tpotBudgetMs": 40},
    }
    (engine,) = spec["engines"]
    assert engine["name"] == "vllm"
    (member,) = engine["members"]
    assert member["role"] == "Standalone"
    assert member["nodeSelector"]["devices"] == [
        {
            "name": "gpu",
            "count": 2,
            "selectors": [
                {"cel": 'device.attributes["gpu.nvidia.com"].productName.contains("H100")'}
            ],
        }
    ]
    container = container_of(rsp)
    assert container["name"] == "engine"
    assert "readinessProbe" not in container
    assert container["resources"] == {
        "requests": {"memory": "160Gi"},
        "limits": {"memory": "160Gi"},
    }
    assert container["ports"] == [{"name": "http", "containerPort": 8000}]
    assert member["template"]["metadata"]["annotations"] == {
        "plnt.work/health-path": "/health",
        "plnt.work/weights-uri": "s3://plnt-models/llama-3.1-70b/fp16",
        "plnt.work/weights-path": "/models",
    }
    ms = out["model-service"]
    assert ms["kind"] == "ModelService"
    assert ms["metadata"]["name"] == "llama-3.1-70b-instruct"
    assert ms["spec"] == {
        "endpoints": [
            {
                "weight": 1,
                "selector": {"matchLabels": {"modelplane.ai/deployment": "llama-3.1-70b-instruct"}},
            }
        ]
    }
    assert status(rsp)["phase"] == "Validating"
    assert "endpoint" not in status(rsp)
    assert status(rsp)["observedGeneration"] == 1


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
    rsp = run(seed(runtime=runtime_name))
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
    args = container_of(run(seed(runtime=runtime_name, model__quantization=quantization)))["args"]
    tail = args[len(presets.PRESETS[runtime_name].model_args) + 1 :]
    assert tail == flags


def test_a_pair_the_runtime_cannot_serve_fails_naming_both() -> None:
    rsp = run(seed(runtime="trt-llm", model__quantization="gptq-4bit"))
    message = fatal(rsp)
    assert "spec.model.quantization" in message
    assert "trt-llm" in message
    assert "gptq-4bit" in message
    assert not rsp.desired.resources
    assert status(rsp)["phase"] == "Failed"
    (valid,) = [c for c in rsp.conditions if c.type == "Valid"]
    assert valid.status == fnv1.STATUS_CONDITION_FALSE
    assert valid.reason == "InvalidSpec"
    assert "gptq-4bit" in valid.message


def test_the_xrd_refuses_exactly_the_pairs_the_presets_cannot_serve() -> None:
    spec = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    pairs = presets.unsupported_pairs()
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
    chosen = [c for c, expr in gpu_classes.GPU_CLASSES.items() if cel.evaluate(expr, device)]
    assert chosen == [PRODUCTS[product]]


def test_the_xrd_enum_lists_the_mapped_gpu_classes() -> None:
    props = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    assert props["resources"]["properties"]["gpuClass"]["enum"] == list(gpu_classes.GPU_CLASSES)


@pytest.mark.parametrize("gpu_class", list(gpu_classes.GPU_CLASSES))
def test_gpu_class_becomes_the_device_request_cel(gpu_class: str) -> None:
    (device,) = engine_of(run(seed(resources__gpuClass=gpu_class, resources__gpu=4)))["members"][0][
        "nodeSelector"
    ]["devices"]
    assert device == {
        "name": "gpu",
        "count": 4,
        "selectors": [{"cel": gpu_classes.GPU_CLASSES[gpu_class]}],
    }


def test_an_unknown_gpu_class_fails_listing_the_known_ones() -> None:
    message = fatal(run(seed(resources__gpuClass="nvidia.com/v100")))
    assert "spec.resources.gpuClass" in message
    assert "nvidia.com/v100" in message
    for known in gpu_classes.GPU_CLASSES:
        assert known in message


# --- weights, replicas, identity -------------------------------------------------------------


def test_without_storage_uri_the_runtime_pulls_the_model_by_name() -> None:
    xr = seed()
    del xr["spec"]["model"]["storageUri"]
    rsp = run(xr)
    assert container_of(rsp)["args"][0] == "meta-llama/Llama-3.1-70B-Instruct"
    annotations = engine_of(rsp)["members"][0]["template"]["metadata"]["annotations"]
    assert annotations == {"plnt.work/health-path": "/health"}


@pytest.mark.parametrize(("observed_replicas", "want"), [(None, 1), (3, 3), (9, 4), (0, 1)])
def test_replicas_start_at_min_and_keep_what_the_autoscaler_set_within_bounds(
    observed_replicas, want
) -> None:
    observed = {}
    if observed_replicas is not None:
        md = desired(run(seed()))["model-deployment"]
        md["spec"]["replicas"] = observed_replicas
        observed = {"model-deployment": md}
    assert desired(run(seed(), observed))["model-deployment"]["spec"]["replicas"] == want


def test_workflow_run_id_is_r_and_ten_hex_of_uid_and_generation() -> None:
    first = status(run(seed()))["workflowRunId"]
    assert re.fullmatch(r"r-[0-9a-f]{10}", first)
    assert first == "r-" + hashlib.sha256(f"{UID}1".encode()).hexdigest()[:10]
    assert status(run(seed()))["workflowRunId"] == first, "stable across reconciles"
    updated = seed()
    updated["metadata"]["generation"] = 2
    second = status(run(updated))
    assert second["workflowRunId"] != first, "a spec update is a fresh run"
    assert second["observedGeneration"] == 2
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
        assert st["endpoint"] == url
    else:
        assert "endpoint" not in st
    # Crossplane's Ready means "serving": a stable revision behind a routed ModelService.
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    serving_stable = folder.name in ("Ready", "RolledBack", "SmokeTesting")
    assert ready["status"] == ("True" if serving_stable else "False")


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
    for gpu_class, expression in gpu_classes.GPU_CLASSES.items():
        assert f"| `{gpu_class}` | `{expression}` |" in text
    for preset in presets.PRESETS.values():
        assert f"`{preset.image}`" in text


def test_a_spec_update_is_a_fresh_run_with_a_canary_at_traffic_percent() -> None:
    """Render generation 1 down the tree, observe it as running, then update the spec."""
    scenario = render.load_scenario(REPO / "examples/workflowrun-llama-70b")
    scenario.xr["metadata"].update(uid=UID, generation=1)
    first = render.render(scenario, tree=True)
    (md_node,) = [c for c in first.children if c.xr["kind"] == "ModelDeployment"]
    md = copy.deepcopy(next(o for o in first.composed if o["kind"] == "ModelDeployment"))
    md["metadata"]["uid"] = "md-uid"
    md["status"] = copy.deepcopy(md_node.xr["status"])
    stable = md["status"]["revisions"]["stable"]
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]}
    running = [
        {**copy.deepcopy(o), "status": ready}
        for o in md_node.composed
        if o["kind"] == "ModelReplica"
    ]
    assert len(running) == 1

    updated = copy.deepcopy(scenario.xr)
    updated["metadata"]["generation"] = 2
    updated["spec"]["model"]["quantization"] = "fp8"
    second = render.render(
        render.Scenario(updated, scenario.required, [md, *running], scenario.path), tree=True
    )
    st = second.xr["status"]
    assert st["workflowRunId"] != first.xr["status"]["workflowRunId"]
    assert st["observedGeneration"] == 2
    (md_after,) = [c for c in second.children if c.xr["kind"] == "ModelDeployment"]
    revisions = md_after.xr["status"]["revisions"]
    assert revisions["stable"] == stable
    assert revisions["canary"] not in (None, stable)
    assert md_after.xr["status"]["canary"]["trafficPercent"] == 5
    replicas = sorted(
        o["metadata"]["labels"]["modelplane.ai/revision"]
        for o in md_after.composed
        if o["kind"] == "ModelReplica"
    )
    assert replicas == sorted([stable, revisions["canary"]])
    canary_args = next(
        o
        for o in md_after.composed
        if o["kind"] == "ModelReplica"
        and o["metadata"]["labels"]["modelplane.ai/revision"] == revisions["canary"]
    )["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["args"]
    assert "--quantization=fp8" in canary_args


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
