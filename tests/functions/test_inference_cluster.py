"""function-inference-cluster through its real run_function, with Crossplane's requirement loop.

Inputs come from the example scenarios (examples/inference-cluster-*), changed per case; each
case's whole response is in tests/functions/responses/inference_cluster/.
"""

from __future__ import annotations

import copy
import hashlib
import pathlib
from collections.abc import Callable

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.inference_cluster import fn, inferencepool_crd, tenants
from plnt import xp
from plnt_host import render, runtime
from tests.functions import tables
from tests.support import has_fatal, request

REPO = pathlib.Path(__file__).resolve().parents[2]
COREWEAVE = render.load_scenario(REPO / "examples" / "inference-cluster-coreweave")
EXISTING = render.load_scenario(REPO / "examples" / "inference-cluster-existing")
READY = render.load_scenario(REPO / "examples" / "inference-cluster-ready")

TIER_ONE = {
    "coreweavecluster",
    "providerconfig-kubernetes",
    "providerconfig-helm",
    "release-gateway-api-crds",
    "object-inference-extension-crds",
    "release-kgateway-crds",
    "release-leaderworkerset",
    "release-nvidia-dra-driver-gpu",
    "object-gateway-namespace",
}
EVERYTHING = TIER_ONE | {"release-kgateway", "object-gateway-parameters", "object-gateway"}
LATER = ("release-kgateway", "object-gateway-parameters", "object-gateway")


def run(xr: dict, required: list[dict] = (), observed: list[dict] = ()) -> fnv1.RunFunctionResponse:
    """Calls the function until its requirements are stable, answering them from `required`."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for obj in observed:
        name = obj["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]
        req.observed.resources[name].resource.update(obj)
    previous = None
    for _ in range(5):
        rsp = runtime.call_sync(fn.run_function, req, "function-inference-cluster")
        wanted = dict(rsp.requirements.resources)
        if wanted == previous or not wanted:
            return rsp
        previous = wanted
        req = copy.deepcopy(req)
        req.required_resources.clear()
        for name, sel in wanted.items():
            req.required_resources[name].CopyFrom(render.fetch(required, sel))
    raise AssertionError("requirements did not stabilise")


def composed(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {name: xp.to_dict(r.resource) for name, r in rsp.desired.resources.items()}


def readiness(rsp: fnv1.RunFunctionResponse) -> dict[str, bool]:
    return {n: r.ready == fnv1.READY_TRUE for n, r in rsp.desired.resources.items()}


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    (cond,) = [c for c in rsp.conditions if c.type == typ]
    return cond


def changed(doc: dict, change: Callable[[dict], None]) -> dict:
    out = copy.deepcopy(doc)
    change(out)
    return out


def ready_observed(drop: tuple[str, ...] = (), unready: tuple[str, ...] = ()) -> list[dict]:
    """What the ready InferenceCluster composed (not what its CoreWeaveCluster composed)."""
    out = []
    for obj in copy.deepcopy(READY.observed):
        if obj["metadata"].get("ownerReferences"):
            continue
        name = obj["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]
        if name in drop:
            continue
        if name in unready:
            for cond in obj["status"]["conditions"]:
                cond["status"] = "False"
        out.append(obj)
    return out


# --- the cases: the example scenarios, changed ------------------------------------------------


def without(kind: str, name: str, docs: list[dict]) -> list[dict]:
    return [d for d in docs if not (d["kind"] == kind and d["metadata"]["name"] == name)]


def no_provisioning(docs: list[dict], name: str, field: str | None = None) -> list[dict]:
    out = copy.deepcopy(docs)
    for doc in out:
        if doc["kind"] == "InferenceClass" and doc["metadata"]["name"] == name:
            if field:
                doc["spec"]["provisioning"]["coreweave"].pop(field)
            else:
                doc["spec"].pop("provisioning")
    return out


def kubeconfig_published() -> list[dict]:
    cwc = copy.deepcopy(next(o for o in READY.observed if o["kind"] == "CoreWeaveCluster"))
    cwc["status"]["secrets"] = [{"name": "cks-admin", "key": "config", "type": "Kubeconfig"}]
    return [cwc]


def gateway_without_address() -> list[dict]:
    observed = ready_observed()
    gateway = next(o for o in observed if o["metadata"]["name"].endswith("-gateway"))
    gateway["status"]["atProvider"]["manifest"]["status"]["addresses"] = []
    return observed


def class_asking_b200(docs: list[dict]) -> list[dict]:
    required = copy.deepcopy(docs)
    h100 = next(o for o in required if o["metadata"]["name"] == "nvidia-h100-8x")
    h100["spec"]["provisioning"]["coreweave"]["instanceType"] = "gd-8xb200ib-i128"
    return required


def with_tenants(namespaces: str) -> dict:
    return changed(
        READY.xr,
        lambda x: x["metadata"].update(annotations={"plnt.work/tenant-namespaces": namespaces}),
    )


def observed_as_ready(rsp: fnv1.RunFunctionResponse, names: set[str]) -> list[dict]:
    """The named desired resources as provider-kubernetes would show them once Ready."""
    out = []
    for name in sorted(names):
        obj = composed(rsp)[name]
        obj["metadata"]["annotations"] = {xp.COMPOSITION_RESOURCE_NAME: name}
        obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out.append(obj)
    return out


def tenants_in_place(namespaces: str, in_place: Callable[[str], bool]) -> list[dict]:
    """The ready stack, and the shared objects of `namespaces` for which `in_place` holds, as
    the cluster's first response composed them, Ready."""
    first = run(with_tenants(namespaces), READY.required, ready_observed())
    return [*ready_observed(), *observed_as_ready(first, set(filter(in_place, composed(first))))]


# Each install waits for what it needs: (case, observed, what is composed).
WAITS = [
    ("waits-nothing-observed", [], TIER_ONE),
    (
        "waits-tier-one-ready",
        ready_observed(drop=LATER),
        TIER_ONE | {"release-kgateway", "object-gateway-parameters"},
    ),
    (
        "waits-crds-unready",
        ready_observed(drop=LATER, unready=("release-kgateway-crds",)),
        TIER_ONE,
    ),
    (
        "waits-namespace-unready",
        ready_observed(drop=LATER, unready=("object-gateway-namespace",)),
        TIER_ONE | {"release-kgateway"},
    ),
    (
        "waits-kgateway-unready",
        ready_observed(drop=("object-gateway",), unready=("release-kgateway",)),
        TIER_ONE | {"release-kgateway", "object-gateway-parameters"},
    ),
    (
        "waits-parameters-unready",
        ready_observed(drop=("object-gateway",), unready=("object-gateway-parameters",)),
        TIER_ONE | {"release-kgateway", "object-gateway-parameters"},
    ),
    ("waits-kgateway-ready", ready_observed(drop=("object-gateway",)), EVERYTHING),
    # Once it exists, the Gateway stays even when its controller turns unready.
    ("waits-keeps-gateway", ready_observed(unready=("release-kgateway",)), EVERYTHING),
]
# Inputs missing or wrong: (case, scenario, required, the message naming what is missing).
BAD_INPUT = [
    (
        "bad-missing-class",
        COREWEAVE,
        without("InferenceClass", "cpu-genoa", COREWEAVE.required),
        'node pool "cpu": InferenceClass "cpu-genoa" not found',
    ),
    (
        "bad-no-coreweave-provisioning",
        COREWEAVE,
        no_provisioning(COREWEAVE.required, "cpu-genoa"),
        'node pool "cpu": InferenceClass "cpu-genoa" has no CoreWeave provisioning '
        "(spec.provisioning.coreweave)",
    ),
    (
        "bad-gpu-without-accelerator",
        COREWEAVE,
        no_provisioning(COREWEAVE.required, "nvidia-h100-8x", "acceleratorType"),
        'node pool "h100": InferenceClass "nvidia-h100-8x" has GPU devices but no '
        "spec.provisioning.coreweave.acceleratorType",
    ),
    (
        "bad-missing-secret",
        EXISTING,
        without("Secret", "lab-l40s-kubeconfig", EXISTING.required),
        'kubeconfig Secret "plnt-system/lab-l40s-kubeconfig" not found',
    ),
    (
        "bad-secret-without-key",
        EXISTING,
        [
            changed(d, lambda s: s.update(data={"config": "eA=="})) if d["kind"] == "Secret" else d
            for d in EXISTING.required
        ],
        'kubeconfig Secret "plnt-system/lab-l40s-kubeconfig" has no key "kubeconfig"',
    ),
    (
        "bad-invalid-class",
        EXISTING,
        [
            changed(d, lambda c: c["spec"]["devices"][0].pop("deviceClassName"))
            if d["kind"] == "InferenceClass"
            else d
            for d in EXISTING.required
        ],
        'node pool "l40s": InferenceClass "nvidia-l40s-4x" is invalid '
        "(spec.devices[0].deviceClassName: required when claim is DRA)",
    ),
]
# Invalid specs: (case, change to the CoreWeave example, the fatal result).
INVALID = [
    (
        "invalid-no-coreweave-block",
        lambda x: x["spec"]["cluster"].pop("coreweave"),
        "invalid input: spec.cluster.coreweave: required when source is CoreWeave",
    ),
    (
        "invalid-duplicate-pool",
        lambda x: x["spec"]["nodePools"].append(dict(x["spec"]["nodePools"][0])),
        "invalid input: spec.nodePools[2].name: duplicate node pool name 'h100'",
    ),
    (
        "invalid-min-above-max",
        lambda x: x["spec"]["nodePools"][0].update(minNodeCount=5),
        "invalid input: spec.nodePools[0].minNodeCount: minNodeCount must not exceed maxNodeCount",
    ),
    (
        "invalid-long-name",
        lambda x: x["metadata"].update(name="c" * 41),
        "invalid input: metadata.name: must be at most 40 characters: it names the "
        "CoreWeaveCluster, the ProviderConfigs and the Releases, and labels what they compose",
    ),
]


def cluster_case(
    name: str, xr: dict, required: list[dict] = (), observed: list[dict] = ()
) -> tables.Case:
    return tables.Case(name, request(xr, observed), tuple(required))


def is_tenant(name: str) -> bool:
    return name.startswith("tenant-")


def is_shared(name: str) -> bool:
    return name.startswith(("tenant-", "endpoint-picker"))


TABLE = tables.Table(
    "inference_cluster",
    fn.run_function,
    (
        cluster_case("coreweave", COREWEAVE.xr, COREWEAVE.required),
        cluster_case(
            "coreweave-kubeconfig-published",
            COREWEAVE.xr,
            COREWEAVE.required,
            kubeconfig_published(),
        ),
        cluster_case(
            "coreweave-cpu-only",
            changed(
                COREWEAVE.xr, lambda x: x["spec"].update(nodePools=[x["spec"]["nodePools"][1]])
            ),
            COREWEAVE.required,
        ),
        *(cluster_case(name, READY.xr, READY.required, observed) for name, observed, _ in WAITS),
        cluster_case("ready", READY.xr, READY.required, ready_observed()),
        cluster_case(
            "ready-gateway-without-address", READY.xr, READY.required, gateway_without_address()
        ),
        cluster_case(
            "ready-waiting-for-cluster-and-lws",
            READY.xr,
            READY.required,
            ready_observed(unready=("coreweavecluster", "release-leaderworkerset")),
        ),
        cluster_case("existing", EXISTING.xr, EXISTING.required),
        cluster_case("existing-stack-observed", EXISTING.xr, EXISTING.required, ready_observed()),
        *(cluster_case(name, scenario.xr, required) for name, scenario, required, _ in BAD_INPUT),
        cluster_case(
            "bad-input-keeps-what-exists",
            READY.xr,
            without("InferenceClass", "cpu-genoa", READY.required),
            ready_observed(drop=("release-kgateway", "object-gateway")),
        ),
        *(
            cluster_case(name, changed(COREWEAVE.xr, change), COREWEAVE.required)
            for name, change, _ in INVALID
        ),
        cluster_case(
            "instance-type-held", READY.xr, class_asking_b200(READY.required), ready_observed()
        ),
        cluster_case(
            "instance-type-new-pool",
            changed(
                READY.xr,
                lambda x: x["spec"]["nodePools"].append(
                    {**x["spec"]["nodePools"][0], "name": "b200"}
                ),
            ),
            class_asking_b200(READY.required),
            ready_observed(),
        ),
        cluster_case(
            "tenants-published",
            with_tenants("ml-team,team-b,Not_A_Name"),
            READY.required,
            ready_observed(),
        ),
        cluster_case(
            "tenants-in-place-but-one",
            with_tenants("ml-team,team-b,Not_A_Name"),
            READY.required,
            tenants_in_place(
                "ml-team,team-b,Not_A_Name",
                lambda n: is_shared(n) and n != "tenant-team-b-rolebinding",
            ),
        ),
        cluster_case(
            "tenant-unpublished",
            with_tenants("team-b"),
            READY.required,
            tenants_in_place("ml-team,team-b", is_tenant),
        ),
        cluster_case(
            "tenants-none-published",
            with_tenants(""),
            READY.required,
            tenants_in_place("ml-team,team-b", is_tenant),
        ),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


# --- source CoreWeave -----------------------------------------------------------------


def test_coreweave_cluster_from_the_classes() -> None:
    rsp = response("coreweave")
    resources = composed(rsp)
    assert set(resources) == TIER_ONE
    cwc = resources["coreweavecluster"]
    assert cwc["spec"] == {
        "zone": "US-EAST-04A",
        "kubernetesVersion": "1.37",
        "credentials": {"name": "default", "type": "ClusterProviderConfig"},
        "nodePools": [
            {
                "name": "h100",
                "role": "GPU",
                "instanceType": "gd-8xh100ib-i128",
                "nodeCount": 1,
                "minNodeCount": 1,
                "maxNodeCount": 4,
                "gpu": {"acceleratorType": "nvidia-h100"},
            },
            {"name": "cpu", "role": "CPU", "instanceType": "cd-gp-a192-genoa", "nodeCount": 2},
        ],
    }
    assert not any(readiness(rsp).values())
    assert condition(rsp, "Provisioned").message == (
        "waiting for CoreWeaveCluster plnt-system/coreweave-us-east-04"
    )
    assert condition(rsp, "StackReady").status == fnv1.STATUS_CONDITION_FALSE


def test_provider_configs_follow_the_published_kubeconfig() -> None:
    before = composed(response("coreweave"))
    after = composed(response("coreweave-kubeconfig-published"))
    for name, api in (
        ("providerconfig-kubernetes", "kubernetes.m.crossplane.io/v1alpha1"),
        ("providerconfig-helm", "helm.m.crossplane.io/v1beta1"),
    ):
        assert before[name]["apiVersion"] == after[name]["apiVersion"] == api
        assert before[name]["kind"] == "ClusterProviderConfig"
        assert before[name]["metadata"]["name"] == "coreweave-us-east-04"
        assert before[name]["spec"]["credentials"] == {
            "source": "Secret",
            "secretRef": {
                "name": "coreweave-us-east-04-kubeconfig",
                "namespace": "plnt-system",
                "key": "kubeconfig",
            },
        }
        assert after[name]["spec"]["credentials"]["secretRef"] == {
            "name": "cks-admin",
            "namespace": "plnt-system",
            "key": "config",
        }


def test_releases_are_pinned_and_use_the_cluster_provider_config() -> None:
    resources = composed(response("coreweave"))
    releases = {n: r for n, r in resources.items() if r["kind"] == "Release"}
    assert set(releases) == {
        "release-gateway-api-crds",
        "release-kgateway-crds",
        "release-leaderworkerset",
        "release-nvidia-dra-driver-gpu",
    }
    for rname, release in releases.items():
        assert release["apiVersion"] == "helm.m.crossplane.io/v1beta1"
        component = rname.removeprefix("release-")
        assert release["metadata"]["name"] == f"coreweave-us-east-04-{component}"
        # the Helm release on the workload cluster is named after the component alone
        helm_name = "lws" if component == "leaderworkerset" else component
        assert release["metadata"]["annotations"] == {"crossplane.io/external-name": helm_name}
        assert release["metadata"]["namespace"] == "plnt-system"
        assert release["spec"]["providerConfigRef"] == {
            "kind": "ClusterProviderConfig",
            "name": "coreweave-us-east-04",
        }
        chart = release["spec"]["forProvider"]["chart"]
        assert chart["version"][0].isdigit() or chart["version"].startswith("v")
    dra = releases["release-nvidia-dra-driver-gpu"]["spec"]["forProvider"]
    assert dra["chart"] == {
        "name": "nvidia-dra-driver-gpu",
        "repository": "https://helm.ngc.nvidia.com/nvidia",
        "version": "25.12.0",
    }
    assert dra["values"]["resources"]["gpus"]["enabled"] is True


def test_no_nvidia_dra_driver_without_nvidia_gpus() -> None:
    resources = composed(response("coreweave-cpu-only"))
    assert "release-nvidia-dra-driver-gpu" not in resources
    assert [p["role"] for p in resources["coreweavecluster"]["spec"]["nodePools"]] == ["CPU"]


@pytest.mark.parametrize(("name", "expected"), [(name, want) for name, _, want in WAITS])
def test_each_install_waits_for_what_it_needs(name: str, expected: set[str]) -> None:
    assert set(composed(response(name))) == expected


def test_ready_cluster_reports_everything() -> None:
    rsp = response("ready")
    assert all(readiness(rsp).values()) and set(readiness(rsp)) == EVERYTHING
    assert status(rsp) == {
        "providerConfigRef": {"name": "coreweave-us-east-04"},
        "namespaces": [],
        "gateway": {"address": "203.0.113.10"},
        "pools": [
            {"name": "h100", "className": "nvidia-h100-8x", "nodeCapacity": 4},
            {"name": "cpu", "className": "cpu-genoa", "nodeCapacity": 2},
        ],
    }
    assert condition(rsp, "StackReady").status == fnv1.STATUS_CONDITION_TRUE
    assert condition(rsp, "Provisioned").status == fnv1.STATUS_CONDITION_TRUE
    gateway = composed(rsp)["object-gateway"]["spec"]["forProvider"]["manifest"]
    assert gateway["metadata"] == {"name": "plnt-inference", "namespace": "plnt-system"}
    assert gateway["spec"]["gatewayClassName"] == "kgateway"


def test_gateway_without_an_address_is_not_ready() -> None:
    rsp = response("ready-gateway-without-address")
    assert readiness(rsp)["object-gateway"] is False
    assert status(rsp)["gateway"] == {"address": ""}
    stack = condition(rsp, "StackReady")
    assert stack.status == fnv1.STATUS_CONDITION_FALSE
    assert stack.message == "waiting for gateway address"


def test_waiting_message_names_what_is_awaited() -> None:
    rsp = response("ready-waiting-for-cluster-and-lws")
    message = condition(rsp, "StackReady").message
    assert (
        message == "waiting for CoreWeaveCluster plnt-system/coreweave-us-east-04; leaderworkerset"
    )
    assert condition(rsp, "Provisioned").message == (
        "waiting for CoreWeaveCluster plnt-system/coreweave-us-east-04"
    )


# --- the stack must be able to run on tainted pools, and never delete what it may share ---

POOL_TOLERATIONS = [
    {"key": "modelplane.ai/gpu", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists"},
    {"key": "modelplane.ai/cpu", "operator": "Exists"},
]
NVIDIA_NODE_TERMS = [
    {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]},
    {
        "key": "feature.node.kubernetes.io/cpu-model.vendor_id",
        "operator": "In",
        "values": ["NVIDIA"],
    },
    {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
]


def values(resources: dict[str, dict], rname: str) -> dict:
    return resources[rname]["spec"]["forProvider"].get("values") or {}


@pytest.mark.parametrize("name", ["ready", "existing-stack-observed"])
def test_every_component_that_runs_pods_tolerates_every_pool_taint(name: str) -> None:
    """plnt taints every pool it makes, and a cluster may be one GPU pool (seed 004)."""
    resources = composed(response(name))
    # the chart's own key for its controller's pods: kgateway and lws read top-level tolerations
    assert values(resources, "release-kgateway")["tolerations"] == POOL_TOLERATIONS
    assert values(resources, "release-kgateway")["inferenceExtension"] == {"enabled": True}
    assert values(resources, "release-leaderworkerset") == {"tolerations": POOL_TOLERATIONS}
    # CRD-only charts run no pods: their values are untouched
    assert "tolerations" not in values(resources, "release-gateway-api-crds")
    assert "release-kgateway-crds" in resources
    assert values(resources, "release-kgateway-crds") == {}
    # kgateway deploys the Gateway's Envoy proxy from the GatewayParameters the Gateway names
    params = resources["object-gateway-parameters"]["spec"]["forProvider"]["manifest"]
    gateway = resources["object-gateway"]["spec"]["forProvider"]["manifest"]
    assert params["apiVersion"] == "gateway.kgateway.dev/v1alpha1"
    assert params["kind"] == "GatewayParameters"
    assert params["metadata"]["namespace"] == gateway["metadata"]["namespace"]
    assert gateway["spec"]["infrastructure"]["parametersRef"] == {
        "group": "gateway.kgateway.dev",
        "kind": "GatewayParameters",
        "name": params["metadata"]["name"],
    }
    assert params["spec"] == {"kube": {"podTemplate": {"tolerations": POOL_TOLERATIONS}}}


@pytest.mark.parametrize(
    ("name", "gpu_pools"), [("ready", ["h100"]), ("existing-stack-observed", ["l40s"])]
)
def test_the_dra_kubelet_plugin_runs_on_the_gpu_pools(name: str, gpu_pools: list[str]) -> None:
    resources = composed(response(name))
    dra = values(resources, "release-nvidia-dra-driver-gpu")
    plugin = dra["kubeletPlugin"]
    assert plugin["tolerations"] == POOL_TOLERATIONS
    terms = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # nodeSelectorTerms are ORed: plnt's GPU pools, or the chart's own GPU-node labels
    assert terms == [
        {
            "matchExpressions": [
                {"key": "modelplane.ai/pool", "operator": "In", "values": gpu_pools}
            ]
        },
        *({"matchExpressions": [term]} for term in NVIDIA_NODE_TERMS),
    ]
    assert dra["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    assert dra["nvidiaDriverRoot"] == "/"


def policies(resources: dict[str, dict]) -> dict[str, list[str]]:
    return {n: r["spec"].get("managementPolicies", ["*"]) for n, r in resources.items()}


@pytest.mark.parametrize("name", ["ready", "existing-stack-observed"])
def test_namespaces_and_crds_are_never_deleted(name: str) -> None:
    """plnt-system and the CRDs may be shared or pre-existing (an Existing cluster may be the
    management cluster itself): deleting the InferenceCluster must leave them in place."""
    got = policies(composed(response(name)))
    keep = ["Observe", "Create", "Update", "LateInitialize"]
    kept = {
        "object-gateway-namespace",  # the plnt-system Namespace
        "object-inference-extension-crds",  # the InferencePool CRD
        "release-gateway-api-crds",  # a chart that templates the Gateway API CRDs
        "release-kgateway-crds",  # a chart that templates kgateway's CRDs
    }
    assert {n for n, p in got.items() if "Delete" not in p and p != ["*"]} == kept
    assert all(got[n] == keep for n in kept)
    # what only plnt made is deleted with the cluster: controllers, the Gateway, its parameters
    for name in ("release-kgateway", "release-leaderworkerset", "object-gateway"):
        assert got[name] == ["*"]


# --- source Existing ------------------------------------------------------------------


def test_existing_cluster_uses_the_secret_as_is() -> None:
    rsp = response("existing")
    resources = composed(rsp)
    assert "coreweavecluster" not in resources
    assert set(resources) == TIER_ONE - {"coreweavecluster"}
    assert resources["providerconfig-helm"]["spec"]["credentials"]["secretRef"] == {
        "name": "lab-l40s-kubeconfig",
        "namespace": "plnt-system",
        "key": "kubeconfig",
    }
    assert condition(rsp, "Provisioned").status == fnv1.STATUS_CONDITION_TRUE
    assert status(rsp)["pools"] == [
        {"name": "l40s", "className": "nvidia-l40s-4x", "nodeCapacity": 3}
    ]


def test_kubeconfig_never_leaves_the_request() -> None:
    rsp = response("existing")
    secret = next(o for o in EXISTING.required if o["kind"] == "Secret")
    data = secret["data"]["kubeconfig"]
    assert data not in str(rsp)
    assert "not-a-real-token" not in str(rsp)


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "message"), [(name, msg) for name, _, _, msg in BAD_INPUT])
def test_bad_input_composes_nothing_and_names_the_missing_thing(name: str, message: str) -> None:
    rsp = response(name)
    assert composed(rsp) == {}
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    provisioned = condition(rsp, "Provisioned")
    assert provisioned.status == fnv1.STATUS_CONDITION_FALSE
    assert provisioned.reason == "MissingDependency"
    assert provisioned.message == message
    assert condition(rsp, "StackReady").message == f"blocked: {message}"
    assert [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING] == [message]
    assert "providerConfigRef" not in status(rsp)
    assert not has_fatal(rsp)


def test_bad_input_keeps_what_exists_and_adds_nothing() -> None:
    observed = ready_observed(drop=("release-kgateway", "object-gateway"))
    rsp = response("bad-input-keeps-what-exists")
    resources = composed(rsp)
    assert set(resources) == EVERYTHING - {"release-kgateway", "object-gateway"}
    for obj in observed:
        name = obj["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]
        assert resources[name]["spec"] == obj["spec"]
        assert resources[name]["metadata"]["name"] == obj["metadata"]["name"]
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert status(rsp)["providerConfigRef"] == {"name": "coreweave-us-east-04"}


def test_fixing_the_input_composes_the_whole_cluster_at_once() -> None:
    broken = response("bad-missing-class")
    assert composed(broken) == {}
    fixed = composed(response("coreweave"))
    assert set(fixed) == TIER_ONE
    assert [p["name"] for p in fixed["coreweavecluster"]["spec"]["nodePools"]] == ["h100", "cpu"]


@pytest.mark.parametrize(("name", "error"), [(name, error) for name, _, error in INVALID])
def test_invalid_spec_is_fatal_naming_the_field(name: str, error: str) -> None:
    rsp = response(name)
    assert [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL] == [error]
    assert composed(rsp) == {}


def test_a_class_edited_under_a_running_pool_keeps_the_pools_instance_type() -> None:
    """CKS can't change a pool's instance type and the CoreWeaveCluster refuses the change at
    admission (seed 004): the InferenceCluster keeps the pool as it runs and says what to do."""
    rsp = response("instance-type-held")
    pools = {p["name"]: p for p in composed(rsp)["coreweavecluster"]["spec"]["nodePools"]}
    assert pools["h100"]["instanceType"] == "gd-8xh100ib-i128"
    assert pools["cpu"]["instanceType"] == "cd-gp-a192-genoa"
    cond = condition(rsp, "Provisioned")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "InstanceTypeHeld")
    assert cond.message == (
        'node pool "h100": InferenceClass "nvidia-h100-8x" now asks for instance type '
        "gd-8xb200ib-i128, but the pool runs gd-8xh100ib-i128 and CKS can't change an existing "
        "pool's instance type: add a pool under a new name for the new type (and remove this "
        "one once its workloads have moved)"
    )
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert warnings == [cond.message]
    # a new pool of that class under a new name gets the new type
    pools = {
        p["name"]: p["instanceType"]
        for p in composed(response("instance-type-new-pool"))["coreweavecluster"]["spec"][
            "nodePools"
        ]
    }
    assert pools == {
        "h100": "gd-8xh100ib-i128",
        "b200": "gd-8xb200ib-i128",
        "cpu": "cd-gp-a192-genoa",
    }


def test_the_inferencepool_crd_is_the_vendored_file_without_descriptions() -> None:
    """The composed CRD is upstream's file: an edit to either shows here."""
    vendored = REPO / "third_party" / "crds/inference.networking.k8s.io_inferencepools.yaml"
    assert inferencepool_crd.UPSTREAM.resolve() == vendored.resolve()
    sums = dict(
        reversed(line.split())
        for line in (REPO / "third_party" / "SOURCES").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert hashlib.sha256(vendored.read_bytes()).hexdigest() == sums[f"crds/{vendored.name}"]

    upstream = yaml.safe_load(vendored.read_text())
    composed = inferencepool_crd.crd()
    version = upstream["spec"]["versions"][0]
    assert composed["spec"]["versions"][0]["name"] == version["name"] == "v1"
    assert "description" not in str(composed)
    assert "status" not in composed
    assert composed["metadata"]["annotations"][inferencepool_crd.BUNDLE_VERSION] == "v1.6.0"
    pool_spec = composed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    upstream_spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert pool_spec["required"] == upstream_spec["required"]
    assert set(pool_spec["properties"]) == set(upstream_spec["properties"])


# --- what the replicas of one namespace share ------------------------------------------------


def test_each_published_namespace_gets_its_shared_objects_once_listed_when_in_place() -> None:
    rsp = response("tenants-published")
    shared = set(filter(is_shared, composed(rsp)))
    assert shared == {
        "endpoint-picker-clusterrole",
        *(f"tenant-{ns}-{part}" for ns in ("ml-team", "team-b") for part in tenants.PARTS),
    }
    assert status(rsp)["namespaces"] == []  # none observed yet
    assert readiness(rsp)["tenant-ml-team-namespace"]  # never what holds the cluster's Ready
    manifests = {n: composed(rsp)[n]["spec"]["forProvider"]["manifest"] for n in shared}
    binding = manifests["tenant-team-b-rolebinding"]
    assert binding["metadata"] == {"name": "plnt-endpoint-picker", "namespace": "team-b"}
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "plnt-endpoint-picker", "namespace": "team-b"}
    ]
    assert composed(rsp)["tenant-team-b-namespace"]["spec"]["managementPolicies"] == [
        "Observe",
        "Create",
        "Update",
        "LateInitialize",
    ]
    role = manifests["endpoint-picker-clusterrole"]
    assert {r["resources"][0] for r in role["rules"]} == {
        "pods",
        "inferencepools",
        "inferenceobjectives",
    }
    assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in role["rules"])

    # all but team-b's RoleBinding in place (tenants-in-place-but-one)
    assert status(response("tenants-in-place-but-one"))["namespaces"] == ["ml-team"]


def test_a_namespace_no_longer_published_loses_its_shared_objects() -> None:
    # ml-team and team-b were published and their objects are in place; now only team-b is
    rsp = response("tenant-unpublished")
    assert not any(n.startswith("tenant-ml-team-") for n in composed(rsp))
    assert "tenant-team-b-serviceaccount" in composed(rsp)
    rsp = response("tenants-none-published")
    assert not any(n.startswith(("tenant-", "endpoint-picker")) for n in composed(rsp))
    assert status(rsp)["namespaces"] == []
