"""function-coreweave-cluster through its real run_function, protobuf in and out.

Requests are built from the example folders (xr.yaml, observed/, required/) and changed per
case; required resources are answered the way Crossplane does, until they are stable.
"""

from __future__ import annotations

import base64
import copy
import json
import pathlib
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from functions.coreweave_cluster import fn
from functions.coreweave_cluster import resources as r
from plnt import conditions, labels, xp
from plnt.models.coreweave_cluster import CoreWeaveClusterSpec
from plnt.xp import InvalidInput
from plnt_host import runtime

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "coreweave-cluster"
READY = REPO / "examples" / "coreweave-cluster-ready"
INVALID = REPO / "tests" / "invalid" / "coreweaveclusters"
TOKEN = "CW-SECRET-3f9d2a7c41b8e065d1c4a9f27b30e8d5-EXAMPLE-NOT-REAL"
CPU_NODEPOOL = "nodepool-cpu"
SYSTEM_NODEPOOL = "nodepool-system"
GPU_NODEPOOL = "nodepool-gpu-rtxp6000"


# --- harness ----------------------------------------------------------------------------


def load(path: pathlib.Path) -> list[dict[str, Any]]:
    if path.is_file():
        return [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for f in sorted(path.glob("*.yaml")) for d in load(f)]


def scenario(folder: pathlib.Path) -> tuple[dict, dict[str, dict], list[dict]]:
    observed = {
        o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o
        for o in load(folder / "observed")
    }
    return load(folder / "xr.yaml")[0], observed, load(folder / "required")


def _struct(obj: dict[str, Any]) -> Any:
    return json_format.ParseDict(obj, fnv1.Resource().resource)


def _selects(obj: dict[str, Any], sel: fnv1.ResourceSelector) -> bool:
    meta = obj.get("metadata") or {}
    return (
        obj["apiVersion"] == sel.api_version
        and obj["kind"] == sel.kind
        and (not sel.namespace or meta.get("namespace") == sel.namespace)
        and meta.get("name") == sel.match_name
    )


def run(
    xr: dict[str, Any],
    observed: dict[str, dict[str, Any]] | None = None,
    required: list[dict[str, Any]] | None = None,
    calls: int = 5,
) -> fnv1.RunFunctionResponse:
    """One RunFunction as Crossplane drives it: re-called until its requirements settle."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(_struct(xr))
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.CopyFrom(_struct(obj))
    previous = None
    for call in range(1, 6):
        rsp = runtime.call_sync(fn.run_function, req, "function-coreweave-cluster")
        wanted = dict(rsp.requirements.resources)
        if wanted == previous or not wanted or call == calls:
            return rsp
        previous = wanted
        req.required_resources.clear()
        for name, sel in wanted.items():
            items = [o for o in required or [] if _selects(o, sel)]
            req.required_resources[name].CopyFrom(
                fnv1.Resources(items=[fnv1.Resource(resource=_struct(o)) for o in items])
            )
    raise AssertionError("requirements did not settle")


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    return {k: xp.to_dict(v.resource) for k, v in rsp.desired.resources.items()}


def ready_flags(rsp: fnv1.RunFunctionResponse) -> dict[str, bool]:
    return {k: v.ready == fnv1.READY_TRUE for k, v in rsp.desired.resources.items()}


def status(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    return xp.to_dict(rsp.desired.composite.resource).get("status") or {}


def provisioned(rsp: fnv1.RunFunctionResponse) -> fnv1.Condition:
    (cond,) = [c for c in rsp.conditions if c.type == conditions.PROVISIONED]
    return cond


def manifest(rsp: fnv1.RunFunctionResponse, name: str) -> dict[str, Any]:
    return desired(rsp)[name]["spec"]["forProvider"]["manifest"]


def kubeconfig_of(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    data = desired(rsp)[fn.KUBECONFIG]["data"][r.KUBECONFIG_KEY]
    return yaml.safe_load(base64.b64decode(data))


def ready_object(obj: dict[str, Any], manifest_status: dict[str, Any] | None = None) -> dict:
    """An observed composed resource as Crossplane reports it once it is Ready."""
    out = copy.deepcopy(obj)
    st = out.setdefault("status", {})
    st["conditions"] = [{"type": "Ready", "status": "True", "reason": "Available"}]
    if manifest_status is not None:
        seen = copy.deepcopy(out["spec"]["forProvider"]["manifest"])
        seen["status"] = manifest_status
        st["atProvider"] = {"manifest": seen}
    return out


AT_TARGET = {"conditions": [{"type": "AtTarget", "status": "True", "reason": "AtTarget"}]}


def fully_ready(rsp: fnv1.RunFunctionResponse, observed: dict[str, dict]) -> dict[str, dict]:
    """Everything the first ready render composed, now observed and Ready."""
    out = dict(observed)
    for name, obj in desired(rsp).items():
        if name in out:
            continue
        out[name] = ready_object(obj, AT_TARGET if name.startswith("nodepool-") else None)
    return out


# --- stage 1: VPC and CKS cluster ---------------------------------------------------------


def test_seed_example_composes_only_vpc_and_cks_cluster() -> None:
    xr, observed, required = scenario(SEED)
    rsp = run(xr, observed, required)
    out = desired(rsp)
    assert sorted(out) == [fn.CLUSTER, fn.VPC]
    assert not rsp.requirements.resources  # nothing is looked up before the cluster runs
    vpc = out[fn.VPC]["spec"]["forProvider"]
    assert vpc["zone"] == "US-EAST-04A"
    prefixes = {p["name"]: p["value"] for p in vpc["vpcPrefixes"]}
    assert prefixes == r.VPC_PREFIXES
    cluster = out[fn.CLUSTER]["spec"]["forProvider"]
    assert cluster["version"] == "v1.37"
    assert cluster["zone"] == "US-EAST-04A"
    assert cluster["vpcIdRef"] == {"name": out[fn.VPC]["metadata"]["name"]}
    named = {cluster["podCidrName"], cluster["serviceCidrName"], *cluster["internalLbCidrNames"]}
    assert named == set(prefixes)
    for obj in out.values():
        assert obj["spec"]["providerConfigRef"] == {
            "kind": "ClusterProviderConfig",
            "name": "default",
        }
        assert obj["metadata"]["namespace"] == "platform"
    assert ready_flags(rsp) == {fn.VPC: False, fn.CLUSTER: False}
    cond = provisioned(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.message == "waiting for VPC; waiting for CKS cluster"
    assert status(rsp)["nodePools"] == [
        {
            "name": "gpu-rtxp6000",
            "nodePoolName": "gpu-rtxp6000",
            "instanceType": "rtxp6000-8x",
            "ready": False,
        },
        {
            "name": "system",
            "nodePoolName": "system",
            "instanceType": "cd-gp-a192-genoa",
            "ready": False,
        },
    ]
    assert "secrets" not in status(rsp)


@pytest.mark.parametrize(
    ("credentials", "ref"),
    [
        (None, {"kind": "ClusterProviderConfig", "name": "default"}),
        ({"name": "team-a"}, {"kind": "ClusterProviderConfig", "name": "team-a"}),
        ({"type": "ProviderConfig", "name": "cw"}, {"kind": "ProviderConfig", "name": "cw"}),
    ],
)
def test_provider_config_ref_follows_spec_credentials(credentials, ref) -> None:
    xr, _, _ = scenario(SEED)
    if credentials is not None:
        xr["spec"]["credentials"] = credentials
    out = desired(run(xr))
    assert out[fn.VPC]["spec"]["providerConfigRef"] == ref
    assert out[fn.CLUSTER]["spec"]["providerConfigRef"] == ref


def test_long_xr_name_gives_coreweave_names_within_30_characters() -> None:
    xr, _, _ = scenario(SEED)
    xr["metadata"]["name"] = "inference-cluster-in-us-east-04a-for-team-research"
    out = desired(run(xr))
    for name in (fn.VPC, fn.CLUSTER):
        cw_name = out[name]["spec"]["forProvider"]["name"]
        assert len(cw_name) <= 30
        assert cw_name.startswith("inference-cluster")


def test_vpc_ready_cluster_not_ready_waits_only_for_cluster() -> None:
    xr, observed, required = scenario(READY)
    observed[fn.CLUSTER]["status"]["conditions"][0]["status"] = "False"
    rsp = run(xr, observed, required)
    assert sorted(desired(rsp)) == [fn.CLUSTER, fn.VPC]
    assert ready_flags(rsp) == {fn.VPC: True, fn.CLUSTER: False}
    assert provisioned(rsp).message == "waiting for CKS cluster"


# --- stage 2: the ready cluster -----------------------------------------------------------


def test_ready_example_composes_access_pools_and_storage_class() -> None:
    xr, observed, required = scenario(READY)
    rsp = run(xr, observed, required)
    assert sorted(desired(rsp)) == sorted(
        [
            fn.VPC,
            fn.CLUSTER,
            fn.KUBECONFIG,
            fn.PROVIDER_CONFIG,
            CPU_NODEPOOL,
            GPU_NODEPOOL,
            SYSTEM_NODEPOOL,
            fn.SHARED_VAST,
            fn.STORAGE_CLASS,
        ]
    )
    out = desired(rsp)
    assert out[fn.KUBECONFIG]["metadata"]["name"] == "serving-us-east-04-kubeconfig"
    assert out[fn.PROVIDER_CONFIG]["kind"] == "ProviderConfig"
    assert out[fn.PROVIDER_CONFIG]["metadata"] == {
        "name": "serving-us-east-04",
        "namespace": "platform",
    }
    assert out[fn.PROVIDER_CONFIG]["spec"]["credentials"] == {
        "source": "Secret",
        "secretRef": {
            "namespace": "platform",
            "name": "serving-us-east-04-kubeconfig",
            "key": "kubeconfig",
        },
    }
    for name in (CPU_NODEPOOL, GPU_NODEPOOL, fn.SHARED_VAST, fn.STORAGE_CLASS):
        assert out[name]["spec"]["providerConfigRef"] == {
            "kind": "ProviderConfig",
            "name": "serving-us-east-04",
        }
    st = status(rsp)
    assert st["secrets"] == [
        {"name": "serving-us-east-04-kubeconfig", "key": "kubeconfig", "type": "Kubeconfig"}
    ]
    assert st["cache"] == {"storageClassName": r.MODEL_CACHE_STORAGE_CLASS}
    assert st["endpoint"] == "https://4f2a9c-0b7e4c2a.k8s.us-east-04a.coreweave.com"


def test_kubeconfig_holds_endpoint_and_the_provider_configs_token() -> None:
    xr, observed, required = scenario(READY)
    config = kubeconfig_of(run(xr, observed, required))
    assert config["clusters"][0]["cluster"]["server"] == (
        "https://4f2a9c-0b7e4c2a.k8s.us-east-04a.coreweave.com"
    )
    assert config["users"][0]["user"] == {"token": TOKEN}
    assert config["current-context"] == config["contexts"][0]["name"]


@pytest.mark.parametrize(
    ("pool", "labels_", "taint"),
    [
        (
            CPU_NODEPOOL,
            {labels.POOL: "cpu", labels.CPU: "true"},
            {"key": labels.CPU, "value": "true", "effect": "NoSchedule"},
        ),
        (
            GPU_NODEPOOL,
            {labels.POOL: "gpu-rtxp6000", labels.ACCELERATOR: "nvidia-rtx-pro-6000"},
            {"key": labels.GPU, "value": "true", "effect": "NoSchedule"},
        ),
    ],
)
def test_node_pool_labels_and_taints(pool: str, labels_: dict, taint: dict) -> None:
    xr, observed, required = scenario(READY)
    spec = manifest(run(xr, observed, required), pool)["spec"]
    assert spec["nodeLabels"] == labels_
    assert spec["nodeTaints"] == [taint]


def test_a_default_system_pool_runs_add_ons_untainted() -> None:
    """Seed 004: pools for GPU inference and for system workloads. Add-ons that tolerate no
    taint (CoreDNS, metrics, controllers) need a pool with none."""
    xr, observed, required = scenario(READY)
    system = manifest(run(xr, observed, required), SYSTEM_NODEPOOL)
    assert system["metadata"]["name"] == "system"
    assert system["spec"]["nodeTaints"] == []
    assert system["spec"]["nodeLabels"] == {labels.POOL: "system", "modelplane.ai/system": "true"}
    assert system["spec"]["instanceType"] == "cd-gp-a192-genoa"
    assert (system["spec"]["targetNodes"], system["spec"]["autoscaling"]) == (2, False)


def test_a_declared_system_pool_replaces_the_default() -> None:
    xr, observed, required = scenario(READY)
    xr = copy.deepcopy(xr)
    mine = {"name": "addons", "role": "System", "instanceType": "turin-gp", "nodeCount": 3}
    xr["spec"]["nodePools"].append(mine)
    out = desired(run(xr, observed, required))
    assert SYSTEM_NODEPOOL not in out
    spec = out["nodepool-addons"]["spec"]["forProvider"]["manifest"]["spec"]
    assert (spec["instanceType"], spec["targetNodes"], spec["nodeTaints"]) == ("turin-gp", 3, [])


def test_a_pool_named_system_must_be_the_system_pool() -> None:
    xr, _, _ = scenario(READY)
    xr = copy.deepcopy(xr)
    xr["spec"]["nodePools"].append({"name": "system", "role": "CPU", "instanceType": "turin-gp"})
    with pytest.raises(InvalidInput, match="default System pool"):
        CoreWeaveClusterSpec.model_validate(xr["spec"])


def test_node_pools_carry_instance_type_and_the_pool_name_verbatim() -> None:
    xr, observed, required = scenario(READY)
    rsp = run(xr, observed, required)
    gpu = manifest(rsp, GPU_NODEPOOL)
    assert gpu["apiVersion"] == "compute.coreweave.com/v1alpha1"
    assert gpu["kind"] == "NodePool"
    assert gpu["spec"]["instanceType"] == "rtxp6000-8x"
    assert gpu["metadata"]["name"] == "gpu-rtxp6000"  # seed 004: the pool's name, verbatim
    assert manifest(rsp, CPU_NODEPOOL)["spec"]["instanceType"] == "turin-gp"


def _pool(**fields: Any) -> dict[str, Any]:
    return {"name": "p", "role": "CPU", "instanceType": "turin-gp", **fields}


@pytest.mark.parametrize(
    ("pool", "observed_target", "expected"),
    [
        # fixed size: exactly nodeCount, no autoscaler
        (_pool(), None, {"targetNodes": 1, "autoscaling": False}),
        (_pool(nodeCount=3), None, {"targetNodes": 3, "autoscaling": False}),
        (_pool(nodeCount=0), None, {"targetNodes": 0, "autoscaling": False}),
        (_pool(nodeCount=3), 7, {"targetNodes": 3, "autoscaling": False}),
        # autoscaled, new pool: min defaults to nodeCount (1 when 0), target at least 1
        (
            _pool(nodeCount=0, maxNodeCount=4),
            None,
            {"targetNodes": 1, "autoscaling": True, "minNodes": 1, "maxNodes": 4},
        ),
        (
            _pool(nodeCount=2, maxNodeCount=4),
            None,
            {"targetNodes": 2, "autoscaling": True, "minNodes": 2, "maxNodes": 4},
        ),
        (
            _pool(nodeCount=1, minNodeCount=3, maxNodeCount=5),
            None,
            {"targetNodes": 3, "autoscaling": True, "minNodes": 3, "maxNodes": 5},
        ),
        (
            _pool(nodeCount=0, minNodeCount=0, maxNodeCount=2),
            None,
            {"targetNodes": 1, "autoscaling": True, "minNodes": 1, "maxNodes": 2},
        ),
        # autoscaled, existing pool: the autoscaler's target stays (even 0), capped at max
        (
            _pool(nodeCount=2, maxNodeCount=4),
            3,
            {"targetNodes": 3, "autoscaling": True, "minNodes": 2, "maxNodes": 4},
        ),
        (
            _pool(nodeCount=1, maxNodeCount=4),
            0,
            {"targetNodes": 0, "autoscaling": True, "minNodes": 1, "maxNodes": 4},
        ),
        (
            _pool(nodeCount=1, maxNodeCount=4),
            9,
            {"targetNodes": 4, "autoscaling": True, "minNodes": 1, "maxNodes": 4},
        ),
    ],
)
def test_node_counts(pool: dict, observed_target: int | None, expected: dict) -> None:
    xr, observed, required = scenario(READY)
    xr["spec"]["nodePools"] = [pool]
    name = "nodepool-p"
    if observed_target is not None:
        first = desired(run(xr, observed, required))[name]
        seen = ready_object(first, AT_TARGET)
        seen["status"]["atProvider"]["manifest"]["spec"]["targetNodes"] = observed_target
        observed = {**observed, name: seen}
    spec = manifest(run(xr, observed, required), name)["spec"]
    counts = {
        k: spec[k] for k in ("targetNodes", "autoscaling", "minNodes", "maxNodes") if k in spec
    }
    assert counts == expected


def test_min_node_count_zero_is_raised_with_a_warning() -> None:
    xr, observed, required = scenario(READY)
    xr["spec"]["nodePools"] = [_pool(nodeCount=0, minNodeCount=0, maxNodeCount=2)]
    rsp = run(xr, observed, required)
    warnings = [x.message for x in rsp.results if x.severity == fnv1.SEVERITY_WARNING]
    assert warnings == ["spec.nodePools[0].minNodeCount 0 is raised to 1 (see the API docs)"]


def test_cpu_pool_ignores_gpu_settings() -> None:
    xr, observed, required = scenario(READY)
    xr["spec"]["nodePools"] = [_pool(gpu={"acceleratorType": "nvidia-h100"})]
    spec = manifest(run(xr, observed, required), "nodepool-p")
    assert spec["spec"]["nodeLabels"] == {labels.POOL: "p", labels.CPU: "true"}


def test_changed_instance_type_keeps_the_pool_and_says_to_add_a_new_one() -> None:
    """The XRD refuses this at admission; input that skipped admission never replaces a pool."""
    xr, observed, required = scenario(READY)
    before = run(xr, observed, required)
    observed = fully_ready(before, observed)
    xr["spec"]["nodePools"][1]["instanceType"] = "b200-8x"
    after = run(xr, observed, required)
    assert sorted(desired(after)) == sorted(desired(before))  # nothing deleted or added
    assert manifest(after, GPU_NODEPOOL) == manifest(before, GPU_NODEPOOL)
    assert manifest(after, GPU_NODEPOOL)["spec"]["instanceType"] == "rtxp6000-8x"
    cond = provisioned(after)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == conditions.INVALID_SPEC
    assert cond.message == (
        "spec.nodePools[1].instanceType: node pool gpu-rtxp6000 runs rtxp6000-8x, and CKS can't "
        "change an existing pool's instance type, so b200-8x is not applied: add a pool with it "
        "under a new name instead"
    )
    warnings = [x.message for x in after.results if x.severity == fnv1.SEVERITY_WARNING]
    assert warnings == [cond.message]
    pool = next(p for p in status(after)["nodePools"] if p["name"] == "gpu-rtxp6000")
    assert pool["instanceType"] == "rtxp6000-8x"


def test_a_new_pool_under_a_new_name_is_added_beside_the_old_one() -> None:
    xr, observed, required = scenario(READY)
    observed = fully_ready(run(xr, observed, required), observed)
    new_pool = {**xr["spec"]["nodePools"][1], "name": "gpu-b200", "instanceType": "b200-8x"}
    xr["spec"]["nodePools"].append(new_pool)
    rsp = run(xr, observed, required)
    assert manifest(rsp, "nodepool-gpu-b200")["metadata"]["name"] == "gpu-b200"
    assert manifest(rsp, "nodepool-gpu-b200")["spec"]["instanceType"] == "b200-8x"
    assert manifest(rsp, GPU_NODEPOOL)["spec"]["instanceType"] == "rtxp6000-8x"
    assert provisioned(rsp).message == "waiting for node pools: gpu-b200"


# --- readiness and the Provisioned condition ---------------------------------------------


def test_everything_ready_makes_provisioned_true() -> None:
    xr, observed, required = scenario(READY)
    observed = fully_ready(run(xr, observed, required), observed)
    rsp = run(xr, observed, required)
    assert all(ready_flags(rsp).values()), ready_flags(rsp)
    cond = provisioned(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_TRUE
    assert cond.reason == conditions.AVAILABLE
    assert [p["ready"] for p in status(rsp)["nodePools"]] == [True, True, True]


@pytest.mark.parametrize(
    ("unready", "message"),
    [
        ([CPU_NODEPOOL], "waiting for node pools: cpu"),
        ([CPU_NODEPOOL, GPU_NODEPOOL], "waiting for node pools: cpu, gpu-rtxp6000"),
        ([fn.STORAGE_CLASS], "waiting for the modelplane-shared-vast StorageClass"),
        (
            [GPU_NODEPOOL, fn.STORAGE_CLASS],
            "waiting for node pools: gpu-rtxp6000; "
            "waiting for the modelplane-shared-vast StorageClass",
        ),
    ],
)
def test_provisioned_names_what_it_waits_for(unready: list[str], message: str) -> None:
    xr, observed, required = scenario(READY)
    observed = fully_ready(run(xr, observed, required), observed)
    for name in unready:
        del observed[name]
    rsp = run(xr, observed, required)
    cond = provisioned(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == conditions.WAITING
    assert cond.message == message
    assert {k for k, ok in ready_flags(rsp).items() if not ok} == set(unready)


@pytest.mark.parametrize(
    ("manifest_status", "ready"),
    [
        (AT_TARGET, True),
        ({"conditions": [{"type": "AtTarget", "status": "False", "reason": "Scaling"}]}, False),
        ({"currentNodes": 0}, False),
        (None, True),  # provider-kubernetes did not surface the manifest: trust the Object
    ],
)
def test_pool_readiness_checks_the_observed_node_pool(manifest_status, ready: bool) -> None:
    xr, observed, required = scenario(READY)
    observed = fully_ready(run(xr, observed, required), observed)
    observed[GPU_NODEPOOL] = ready_object(desired(run(xr, observed, required))[GPU_NODEPOOL])
    if manifest_status is not None:
        observed[GPU_NODEPOOL] = ready_object(observed[GPU_NODEPOOL], manifest_status)
    rsp = run(xr, observed, required)
    assert ready_flags(rsp)[GPU_NODEPOOL] is ready
    assert status(rsp)["nodePools"][1]["ready"] is ready


def test_node_pool_object_readiness_waits_for_at_target() -> None:
    xr, observed, required = scenario(READY)
    readiness = desired(run(xr, observed, required))[GPU_NODEPOOL]["spec"]["readiness"]
    assert readiness["policy"] == "DeriveFromCelQuery"
    assert "AtTarget" in readiness["celQuery"]


def test_storage_class_copies_shared_vast_with_delete_reclaim() -> None:
    xr, observed, required = scenario(READY)
    rsp = run(xr, observed, required)
    observer = desired(rsp)[fn.SHARED_VAST]
    assert observer["spec"]["managementPolicies"] == ["Observe"]
    assert observer["spec"]["forProvider"]["manifest"]["metadata"]["name"] == "shared-vast"
    sc = manifest(rsp, fn.STORAGE_CLASS)
    source = observed[fn.SHARED_VAST]["status"]["atProvider"]["manifest"]
    assert sc["metadata"] == {"name": r.MODEL_CACHE_STORAGE_CLASS}
    assert sc["provisioner"] == source["provisioner"]
    assert sc["parameters"] == source["parameters"]
    assert sc["volumeBindingMode"] == source["volumeBindingMode"]
    assert sc["allowVolumeExpansion"] is True
    assert sc["reclaimPolicy"] == "Delete"


def test_storage_class_waits_until_shared_vast_is_observed() -> None:
    xr, observed, required = scenario(READY)
    del observed[fn.SHARED_VAST]
    rsp = run(xr, observed, required)
    assert fn.SHARED_VAST in desired(rsp)
    assert fn.STORAGE_CLASS not in desired(rsp)
    assert "cache" not in status(rsp)
    assert "the modelplane-shared-vast StorageClass" in provisioned(rsp).message


# --- the token ----------------------------------------------------------------------------


def test_token_lookup_is_required_resources_one_after_the_other() -> None:
    xr, observed, required = scenario(READY)
    first = run(xr, observed, required, calls=1)
    (sel,) = first.requirements.resources.values()
    assert (sel.api_version, sel.kind, sel.match_name, sel.namespace) == (
        "coreweave.m.crossplane.io/v1beta1",
        "ClusterProviderConfig",
        "default",
        "",
    )
    assert sorted(desired(first)) == [fn.CLUSTER, fn.VPC]
    assert provisioned(first).message == "waiting for ClusterProviderConfig default"
    second = run(xr, observed, required, calls=2)
    secret = second.requirements.resources["coreweave-credentials"]
    assert (secret.kind, secret.namespace, secret.match_name) == (
        "Secret",
        "crossplane-system",
        "coreweave-credentials",
    )
    assert provisioned(second).message == (
        "waiting for Secret crossplane-system/coreweave-credentials"
    )


def _everything_but_the_secret(rsp: fnv1.RunFunctionResponse) -> str:
    out = desired(rsp)
    out.pop(fn.KUBECONFIG, None)
    return json.dumps(
        {
            "desired": out,
            "status": status(rsp),
            "conditions": [json_format.MessageToDict(c) for c in rsp.conditions],
            "results": [json_format.MessageToDict(x) for x in rsp.results],
            "context": xp.to_dict(rsp.context),
        }
    )


@pytest.mark.parametrize("everything_ready", [False, True])
def test_token_appears_only_in_the_kubeconfig_secret(everything_ready: bool) -> None:
    xr, observed, required = scenario(READY)
    rsp = run(xr, observed, required)
    if everything_ready:
        rsp = run(xr, fully_ready(rsp, observed), required)
    assert TOKEN in base64.b64decode(desired(rsp)[fn.KUBECONFIG]["data"]["kubeconfig"]).decode()
    dumped = _everything_but_the_secret(rsp)
    assert TOKEN not in dumped
    assert base64.b64encode(TOKEN.encode()).decode()[:20] not in dumped


def _provider_config(required: list[dict]) -> dict:
    return next(o for o in required if o["kind"] == "ClusterProviderConfig")


def _secret(required: list[dict]) -> dict:
    return next(o for o in required if o["kind"] == "Secret")


def _drop_provider_config(required: list[dict]) -> None:
    required.remove(_provider_config(required))


def _drop_secret(required: list[dict]) -> None:
    required.remove(_secret(required))


def _wrong_key(required: list[dict]) -> None:
    _provider_config(required)["spec"]["credentials"]["secretRef"]["key"] = "token"


def _not_from_secret(required: list[dict]) -> None:
    _provider_config(required)["spec"]["credentials"] = {"source": "InjectedIdentity"}


def _no_token_in_json(required: list[dict]) -> None:
    text = json.dumps({"s3_endpoint": "https://cwobject.com", "other": TOKEN})
    _secret(required)["data"]["credentials"] = base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_drop_provider_config, "ClusterProviderConfig default not found"),
        (_drop_secret, "Secret crossplane-system/coreweave-credentials"),
        (_wrong_key, "has no key 'token'"),
        (_not_from_secret, "does not take its credentials from a Secret"),
        (_no_token_in_json, "holds no CoreWeave API token"),
    ],
)
def test_missing_token_is_a_condition_without_secret_content(breakage, message: str) -> None:
    xr, observed, required = scenario(READY)
    breakage(required)
    rsp = run(xr, observed, required)
    cond = provisioned(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == conditions.MISSING_DEPENDENCY
    assert message in cond.message
    assert cond.message.startswith("cannot build the kubeconfig: ")
    assert sorted(desired(rsp)) == [fn.CLUSTER, fn.VPC]  # nothing reaches into the cluster
    assert "secrets" not in status(rsp)
    assert TOKEN not in _everything_but_the_secret(rsp)


def test_bare_token_secret_and_namespaced_provider_config() -> None:
    xr, observed, required = scenario(READY)
    xr["spec"]["credentials"] = {"type": "ProviderConfig", "name": "cw"}
    pc = copy.deepcopy(_provider_config(required))
    pc["kind"] = "ProviderConfig"
    pc["metadata"] = {"name": "cw", "namespace": "platform"}
    secret = copy.deepcopy(_secret(required))
    secret["data"]["credentials"] = base64.b64encode(f"{TOKEN}\n".encode()).decode()
    rsp = run(xr, observed, [pc, secret])
    sel = rsp.requirements.resources["coreweave-provider-config"]
    assert (sel.kind, sel.namespace, sel.match_name) == ("ProviderConfig", "platform", "cw")
    assert kubeconfig_of(rsp)["users"][0]["user"]["token"] == TOKEN


def test_existing_kubeconfig_is_kept_when_the_token_cannot_be_read() -> None:
    xr, observed, required = scenario(READY)
    first = run(xr, observed, required)
    observed = fully_ready(first, observed)
    rsp = run(xr, observed, [o for o in required if o["kind"] != "Secret"])
    assert desired(rsp)[fn.KUBECONFIG] == desired(first)[fn.KUBECONFIG]
    assert CPU_NODEPOOL in desired(rsp)
    warnings = [x.message for x in rsp.results if x.severity == fnv1.SEVERITY_WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("keeping the existing kubeconfig Secret: Secret ")
    assert TOKEN not in _everything_but_the_secret(rsp)


def test_node_pools_stay_while_the_cluster_is_briefly_not_ready() -> None:
    xr, observed, required = scenario(READY)
    observed = fully_ready(run(xr, observed, required), observed)
    observed[fn.CLUSTER]["status"]["conditions"][0]["status"] = "False"
    rsp = run(xr, observed, required)
    assert {CPU_NODEPOOL, GPU_NODEPOOL, fn.KUBECONFIG, fn.STORAGE_CLASS} <= set(desired(rsp))
    assert ready_flags(rsp)[fn.CLUSTER] is False
    assert provisioned(rsp).message == "waiting for CKS cluster"


# --- invalid input ------------------------------------------------------------------------

INVALID_FILES = sorted(INVALID.glob("*.yaml"))


def test_there_is_an_invalid_example_per_rule() -> None:
    assert len(INVALID_FILES) >= 20


@pytest.mark.parametrize("path", INVALID_FILES, ids=[p.stem for p in INVALID_FILES])
def test_invalid_xr_is_a_fatal_naming_the_field(path: pathlib.Path) -> None:
    xr = load(path)[0]
    expected = xr["metadata"]["annotations"]["plnt.work/expect-error"]
    rsp = run(xr)
    fatals = [x.message for x in rsp.results if x.severity == fnv1.SEVERITY_FATAL]
    assert len(fatals) == 1
    assert fatals[0].startswith("invalid input: ")
    assert expected in fatals[0]
    assert not rsp.desired.resources


@pytest.mark.parametrize(
    "credentials",
    [True, {"source": "Secret", "secretRef": 7}, {"source": "Secret", "secretRef": {"name": 3}}],
)
def test_a_provider_config_of_the_wrong_shape_is_named_not_a_crash(credentials) -> None:
    """A ProviderConfig is anyone's to write (a fuzzed fleet found these crashing)."""
    xr, observed, required = scenario(READY)
    required = copy.deepcopy(required)
    (config,) = [o for o in required if o["kind"] == "ClusterProviderConfig"]
    config["spec"]["credentials"] = credentials
    rsp = run(xr, observed, required, calls=3)
    assert not [r for r in rsp.results if "internal error" in r.message]
    assert "ClusterProviderConfig default does not take its credentials from a Secret" in (
        provisioned(rsp).message
    )
