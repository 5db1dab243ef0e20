"""function-model-replica through its real run_function, with Crossplane's requirement loop.

Inputs are the example scenarios (examples/model-replica-*), changed per case; each case's whole
response is in tests/functions/responses/model_replica/, and the tests named for a rule read the
field it is about. The rendered manifests are checked against Kubernetes' own validation in
test_model_replica_validation.py.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn, serving
from plnt import capacity, labels, xp
from plnt.capacity import binding, commit, ledger, ledger_parse, quotas
from plnt_host import render
from tests.functions import tables
from tests.support import call_function, request

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
QWEN = render.load_scenario(EXAMPLES / "model-replica-qwen3-8b")
GANG = render.load_scenario(EXAMPLES / "model-replica-gang")
PD = render.load_scenario(EXAMPLES / "model-replica-pd")
CACHE = render.load_scenario(EXAMPLES / "model-replica-cache")
READY = render.load_scenario(EXAMPLES / "model-replica-ready")
INVALID = sorted((REPO / "tests" / "invalid" / "modelreplicas").glob("*.yaml"))


def without_ledgers(required: list[dict]) -> list[dict]:
    return [
        o
        for o in required
        if not {ledger.LEDGER_LABEL, quotas.QUOTA_LEDGER_LABEL}
        & set((o.get("metadata") or {}).get("labels") or {})
    ]


def committed(xr: dict) -> dict:
    """The ledger of xr's cluster with an entry for exactly xr (whole nodes from node 0)."""
    state = binding.state_of(xr)
    slots = {}
    for pool, pods in state.demand.items():
        account = capacity.Pool(sum(p.count for p in pods), capacity.Shape(()))
        slots[pool] = tuple(account.pack(pods) or ())
    meta = xr["metadata"]
    entry = ledger.Entry(
        uid=meta.get("uid", ""), digest=state.digest, slots=capacity.slots_json(slots)
    )
    cluster = xr["spec"]["clusterName"]
    key = f"{meta['namespace']}/{meta['name']}"
    return ledger.ledger_configmap(ledger.Ledger(cluster=cluster, entries={key: entry}))


def run(xr: dict, required: list[dict] = (), observed: list[dict] = ()) -> fnv1.RunFunctionResponse:
    """Calls the function until its requirements are stable, answering them from `required`.
    The replica is bound, and stays bound after a test changes its spec: its ledger is one the
    binder would commit it with, as it would re-bind it (on pools as large as it needs: these
    tests are about what renders, tests/reconcile about what fits)."""
    required = [*without_ledgers(list(required)), committed(xr)]
    return call_function(fn.run_function, xr, required, observed, "function-model-replica")


def composed(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {name: xp.to_dict(r.resource) for name, r in rsp.desired.resources.items()}


def manifests(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {name: obj["spec"]["forProvider"]["manifest"] for name, obj in composed(rsp).items()}


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    return next(c for c in rsp.conditions if c.type == typ)


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def fatal(rsp: fnv1.RunFunctionResponse) -> str:
    return "\n".join(r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL)


def engine_container(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def picker_config(got: dict[str, dict]) -> str:
    """The endpoint picker's config as its --config-text flag carries it."""
    (container,) = got["serving-epp-deployment"]["spec"]["template"]["spec"]["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--config-text=")]
    return flag.removeprefix("--config-text=")


def env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


# --- the cases: the examples, changed ----------------------------------------------------------


def bound_case(
    name: str, xr: dict, required: list[dict] = (), observed: list[dict] = ()
) -> tables.Case:
    """A case of `run`'s: the replica bound by a ledger committing exactly xr."""
    return tables.Case(
        name, request(xr, observed), (*without_ledgers(list(required)), committed(xr))
    )


def scenario_case(name: str, scenario: render.Scenario) -> tables.Case:
    return bound_case(name, scenario.xr, scenario.required, scenario.observed)


def as_is_case(name: str, xr: dict, required: list[dict]) -> tables.Case:
    """A case answered from `required` as it is: bound only if its ledger commits xr."""
    return tables.Case(name, request(xr), tuple(required))


def http_port(port: int) -> dict:
    xr = copy.deepcopy(QWEN.xr)
    engine = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    engine["ports"] = [{"name": "http", "containerPort": port}]
    return xr


def observed_with(scenario: render.Scenario, key: str, change: Any) -> list[dict]:
    """The scenario's observed resources, the one of composition resource name `key` changed."""
    observed = copy.deepcopy(scenario.observed)
    for o in observed:
        if o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME] == key:
            change(o)
    return observed


def no_copy_available(o: dict) -> None:
    o["status"]["atProvider"]["manifest"]["status"]["availableReplicas"] = 0


def route_not_ready(o: dict) -> None:
    o["status"]["conditions"] = [{"type": "Ready", "status": "False"}]


def cluster_with(scenario: render.Scenario = QWEN, **status: Any) -> dict:
    """The scenario's InferenceCluster, its status' fields replaced (None: removed)."""
    cluster = copy.deepcopy(scenario.required[0])
    for key, value in status.items():
        if value is None:
            cluster["status"].pop(key, None)
        else:
            cluster["status"][key] = value
    return cluster


# A user's endpoint picker config reaches the function as a protobuf Struct, whose maps iterate in
# an order that changes from process to process; the config text follows that order, so the
# responses of these two are not cases kept whole: their tests read the config back as YAML.
PICKER_FOR_PD = {
    "config": {
        "plugins": [{"type": "random-picker"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "random-picker"}]}],
    },
    "template": {
        "spec": {
            "containers": [
                {"name": "picker", "image": "registry.example.com/epp:v1", "args": ["--v=4"]}
            ],
            "imagePullSecrets": [{"name": "registry"}],
        }
    },
}
PICKER_FOR_UNIFIED = {
    "config": {"schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "random"}]}]},
    "template": {
        "spec": {
            "containers": [
                {"name": "epp", "image": "registry.example.com/epp:v1", "args": ["--v=2"]}
            ]
        }
    },
}


def pd_with_picker() -> dict:
    xr = copy.deepcopy(PD.xr)
    xr["spec"]["serving"]["endpointPicker"] = copy.deepcopy(PICKER_FOR_PD)
    return xr


def pd_with_gang_decode() -> dict:
    xr = copy.deepcopy(PD.xr)
    decode = xr["spec"]["engines"][1]
    leader = decode["members"][0]
    leader["role"] = "Leader"
    worker = copy.deepcopy(leader)
    worker["role"] = "Worker"
    worker["worker"] = {"nodes": 1}
    worker["template"]["spec"]["containers"][0]["ports"] = []
    decode["members"].append(worker)
    return xr


def pd_decode_on_port(port: int) -> dict:
    xr = copy.deepcopy(PD.xr)
    decode = xr["spec"]["engines"][1]["members"][0]["template"]["spec"]["containers"][0]
    decode["ports"][0]["containerPort"] = port
    return xr


def qwen_serving(serving: dict) -> dict:
    xr = copy.deepcopy(QWEN.xr)
    xr["spec"]["serving"] = serving
    return xr


def second_engine_on_port(port: int) -> dict:
    xr = copy.deepcopy(QWEN.xr)
    second = copy.deepcopy(xr["spec"]["engines"][0])
    second["name"] = "second"
    second["members"][0]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "http", "containerPort": port}
    ]
    xr["spec"]["engines"].append(second)
    return xr


def _cache(**status: Any) -> list[dict]:
    required = copy.deepcopy(CACHE.required)
    cache = next(o for o in required if o["kind"] == "ModelCache")
    cache["status"] = status
    return required


CACHE_WAITS = {  # case: (the example's required resources, what its engine waits for)
    "cache-missing": (
        [o for o in CACHE.required if o["kind"] != "ModelCache"],
        "ModelCache qwen3-8b (not found in namespace ml-team)",
    ),
    "cache-no-pvc": (_cache(), "ModelCache qwen3-8b (no PVC yet)"),
    "cache-staging": (
        _cache(pvcName="qwen3-8b-weights"),
        "ModelCache qwen3-8b (weights still staging)",
    ),
}
UNREACHABLE = {  # case: (the InferenceClusters Crossplane answers with, what the condition says)
    "cluster-missing": ([], "InferenceCluster eks-l4 not found"),
    "cluster-no-provider-config": (
        [{**QWEN.required[0], "status": {"gateway": {"address": ""}}}],
        "InferenceCluster eks-l4 has no providerConfigRef yet",
    ),
}


def ready_without_namespaces() -> list[dict]:
    return [cluster_with(READY, namespaces=None), *READY.required[1:]]


# --- binding: the replicas the ledger does or does not commit ---------------------------------


UNBOUND = without_ledgers(QWEN.required)  # the fleet with no ledger: nothing committed


def _annotated(xr: dict, value: str) -> dict:
    out = copy.deepcopy(xr)
    out["metadata"].setdefault("annotations", {})[binding.BINDING] = value
    return out


def _binder_annotation(xr: dict) -> str:
    """The binding annotation the binder writes on `xr` (its preview of committing it)."""
    return (
        commit.preview([copy.deepcopy(xr)], UNBOUND).annotate[
            f"{xr['metadata']['namespace']}/{xr['metadata']['name']}"
        ][binding.BINDING]
        or ""
    )


def _warnings(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]


@dataclasses.dataclass(frozen=True)
class Unbacked:
    name: str
    xr: dict
    required: list[dict]
    reason: str
    says: str


def _renamed(xr: dict, namespace: str, name: str) -> dict:
    out = copy.deepcopy(xr)
    out["metadata"].update(namespace=namespace, name=name)
    return out


def _uid(xr: dict, uid: str) -> dict:
    out = copy.deepcopy(xr)
    out["metadata"]["uid"] = uid
    return out


def _more_gpus(xr: dict) -> dict:
    out = copy.deepcopy(xr)
    out["spec"]["engines"][0]["members"][0]["deviceRequests"][0]["count"] = 2
    return out


_SIGNED = _binder_annotation(QWEN.xr)  # what the binder wrote for ml-team/qwen3-8b-eks-l4-0
_OTHER = _renamed(QWEN.xr, "tenant-b", "mine")

UNBACKED = [
    # A tenant computes the digest with plnt.capacity.binding's public code and writes the binding:
    Unbacked(
        "binding-forged-by-its-author",
        _annotated(
            _OTHER,
            binding.binding_json(
                binding.state_of(_OTHER).digest, "eks-l4", {}, replica="tenant-b/mine"
            ),
        ),
        UNBOUND,
        "BindingForged",
        "no entry for tenant-b/mine",
    ),
    Unbacked("binding-not-json", _annotated(QWEN.xr, "yes"), UNBOUND, "BindingForged", "not one"),
    # The binder's annotation copied onto a replica in another namespace (the ledger commits
    # only the original, and the copy's own ledger entry is absent):
    Unbacked(
        "binding-copied-to-another-namespace",
        _annotated(_OTHER, _SIGNED),
        QWEN.required,
        "BindingReplayed",
        "written for ml-team/qwen3-8b-eks-l4-0, not tenant-b/mine",
    ),
    # A replica deleted and re-created under the same name, its old annotation re-applied:
    Unbacked(
        "binding-recreated-with-the-old-annotation",
        _uid(_annotated(QWEN.xr, _SIGNED), "u-new"),
        QWEN.required,
        "BindingReplayed",
        "an earlier replica of that name",
    ),
    # Edited after the commit: the ledger holds the earlier digest.
    Unbacked(
        "binding-spec-changed-after-the-commit",
        _more_gpus(_annotated(QWEN.xr, _SIGNED)),
        QWEN.required,
        "BindingStale",
        "changed after the commit",
    ),
    # Released by the binder (no entry any more), the old annotation left or written back:
    Unbacked(
        "binding-released-annotation-kept",
        _annotated(QWEN.xr, _SIGNED),
        UNBOUND,
        "BindingForged",
        "no entry for ml-team/qwen3-8b-eks-l4-0",
    ),
]


def refused(xr: dict, why: str) -> dict:
    out = copy.deepcopy(xr)
    state = binding.state_of(out)
    out["metadata"].setdefault("annotations", {})[binding.REFUSED] = binding.refusal_json(
        state.digest, why
    )
    return out


def ledger_moved_to(namespace: str) -> list[dict]:
    """The example's required resources, its ConfigMaps in `namespace`."""
    moved = copy.deepcopy(QWEN.required)
    for o in moved:
        if o.get("kind") == "ConfigMap":
            o["metadata"]["namespace"] = namespace
    return moved


# A tenant's own ConfigMap of the ledger's name, in its namespace: not the binder's ledger.
MOVED = ledger_moved_to("ml-team")


TABLE = tables.Table(
    "model_replica",
    fn.run_function,
    (
        scenario_case("qwen", QWEN),
        scenario_case("gang", GANG),
        scenario_case("pd", PD),
        scenario_case("cache", CACHE),
        scenario_case("ready", READY),
        bound_case("qwen-http-port-8080", http_port(8080), QWEN.required),
        bound_case(
            "ready-no-copy-available",
            READY.xr,
            READY.required,
            observed_with(READY, "workload-qwen3-8b", no_copy_available),
        ),
        bound_case(
            "ready-route-not-ready",
            READY.xr,
            READY.required,
            observed_with(READY, "serving-httproute", route_not_ready),
        ),
        bound_case(
            "ready-no-gateway-address",
            READY.xr,
            [cluster_with(READY, gateway={})],
            READY.observed,
        ),
        bound_case(
            "ready-namespaces-unlisted", READY.xr, ready_without_namespaces(), READY.observed
        ),
        bound_case("pd-gang-decode", pd_with_gang_decode(), PD.required),
        bound_case("pd-decode-on-sidecar-port", pd_decode_on_port(8000), PD.required),
        *(bound_case(name, CACHE.xr, required) for name, (required, _) in CACHE_WAITS.items()),
        *(bound_case(name, QWEN.xr, required) for name, (required, _) in UNREACHABLE.items()),
        bound_case("namespace-not-prepared", QWEN.xr, [cluster_with(namespaces=["team-b"])]),
        bound_case("namespace-prepared", QWEN.xr, [cluster_with(namespaces=["ml-team", "team-b"])]),
        bound_case("gateway-no-address", QWEN.xr, [cluster_with(gateway={})]),
        bound_case("gateway-ipv6", QWEN.xr, [cluster_with(gateway={"address": "2001:db8::7"})]),
        bound_case(
            "pool-unknown",
            QWEN.xr,
            [cluster_with(pools=[{"name": "gpu-a10", "className": "nvidia-a10-1x"}])],
        ),
        bound_case(
            "unified-router-endpoint-picker",
            qwen_serving({"router": "EndpointPicker"}),
            QWEN.required,
        ),
        bound_case("unified-two-http-ports", second_engine_on_port(9000), QWEN.required),
        *(
            bound_case(f"invalid-{path.stem}", render.load_yaml_docs(path)[0], QWEN.required)
            for path in INVALID
        ),
        as_is_case("unbound", QWEN.xr, UNBOUND),
        as_is_case("bound-by-the-ledger", QWEN.xr, QWEN.required),
        as_is_case("refused", refused(QWEN.xr, "pool gpu-l4: not enough free gpu"), UNBOUND),
        *(as_is_case(c.name, c.xr, c.required) for c in UNBACKED),
        as_is_case("ledger-outside-the-binders-namespace", _annotated(QWEN.xr, _SIGNED), MOVED),
        as_is_case("ledger-commits-another-spec", _more_gpus(QWEN.xr), QWEN.required),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


# --- the seed example: one Standalone engine, Unified serving ------------------------------


SURFACE = {
    "serving-inferencepool": "InferencePool",
    "serving-epp-service": "Service",
    "serving-epp-deployment": "Deployment",
    "serving-httproute": "HTTPRoute",
}


def test_seed_example_composes_claim_deployment_pool_picker_and_route() -> None:
    rsp = response("qwen")
    got = manifests(rsp)
    assert fatal(rsp) == ""
    assert {name: m["kind"] for name, m in got.items()} == {
        "rct-qwen3-8b-standalone": "ResourceClaimTemplate",
        "workload-qwen3-8b": "Deployment",
        **SURFACE,
    }
    for obj in composed(rsp).values():
        assert obj["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
        assert obj["spec"]["providerConfigRef"] == {
            "kind": "ClusterProviderConfig",
            "name": "eks-l4",
        }
    assert all(m["metadata"]["namespace"] == "ml-team" for m in got.values())


def test_seed_example_claim_template_asks_for_one_gpu() -> None:
    rct = manifests(response("qwen"))["rct-qwen3-8b-standalone"]
    assert rct["apiVersion"] == "resource.k8s.io/v1"
    assert rct["metadata"]["name"] == "qwen3-8b-eks-l4-0-qwen3-8b-standalone"
    assert rct["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]


def test_seed_example_deployment_pod() -> None:
    deployment = manifests(response("qwen"))["workload-qwen3-8b"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"] == {
        labels.REPLICA: "qwen3-8b-eks-l4-0",
        labels.ENGINE: "qwen3-8b",
        labels.ROLE: "Standalone",
        labels.SERVING: "true",
    }
    assert pod["spec"]["nodeSelector"] == {labels.POOL: "gpu-l4"}
    assert {t["key"] for t in pod["spec"]["tolerations"]} >= {"nvidia.com/gpu", labels.GPU}
    assert pod["spec"]["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "qwen3-8b-eks-l4-0-qwen3-8b-standalone"}
    ]
    engine = engine_container(pod)
    assert engine["image"] == "vllm/vllm-openai:v0.23.0"
    assert engine["args"] == ["--model=Qwen/Qwen3-8B"]
    assert engine["resources"] == {"claims": [{"name": "devices"}]}
    assert engine["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert env(engine)["MODELPLANE_LEADER_ADDRESS"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "status.podIP"}
    }
    assert env(engine)["MODELPLANE_RANK"]["value"] == "0"


def test_seed_example_inference_pool_and_route_on_the_cluster_gateway() -> None:
    """Seed 002: Unified fronts the serving pods with an InferencePool too; the route targets it."""
    got = manifests(response("qwen"))
    pool, route = got["serving-inferencepool"], got["serving-httproute"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == "qwen3-8b-eks-l4-0"
    assert pool["spec"] == {
        "selector": {"matchLabels": {labels.REPLICA: "qwen3-8b-eks-l4-0", labels.SERVING: "true"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {
            "name": got["serving-epp-service"]["metadata"]["name"],
            "port": {"number": 9002},
            "failureMode": "FailClose",
        },
    }
    (rule,) = route["spec"]["rules"]
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "plnt-inference",
            "namespace": "plnt-system",
        }
    ]
    assert rule["matches"] == [
        {"path": {"type": "PathPrefix", "value": "/ml-team/qwen3-8b-eks-l4-0/"}}
    ]
    assert rule["filters"][0]["urlRewrite"]["path"] == {
        "type": "ReplacePrefixMatch",
        "replacePrefixMatch": "/",
    }
    assert rule["backendRefs"] == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": "qwen3-8b-eks-l4-0",
        }
    ]


def test_seed_example_endpoint_picker_has_the_unified_profile() -> None:
    got = manifests(response("qwen"))
    config = yaml.safe_load(picker_config(got))
    assert config == serving.UNIFIED_EPP_CONFIG
    (profile,) = config["schedulingProfiles"]
    assert [p["pluginRef"] for p in profile["plugins"]] == [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "max-score-picker",
    ]
    assert {p["type"] for p in config["plugins"]} >= {"single-profile-handler"}
    pod = got["serving-epp-deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == serving.EPP_IMAGE
    assert container["args"][:2] == ["--pool-name=qwen3-8b-eks-l4-0", "--pool-namespace=ml-team"]
    # it needs no device: a CPU or System pool only, never tolerating a GPU taint
    assert pod["tolerations"] == [{"key": labels.CPU, "operator": "Exists"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": labels.SYSTEM, "operator": "In", "values": ["true"]}]},
        {"matchExpressions": [{"key": labels.CPU, "operator": "In", "values": ["true"]}]},
    ]
    assert "nodeSelector" not in pod


def test_unified_pool_targets_the_engines_own_http_port() -> None:
    got = manifests(response("qwen-http-port-8080"))
    assert got["serving-inferencepool"]["spec"]["targetPorts"] == [{"number": 8080}]
    pod = got["workload-qwen3-8b"]["spec"]["template"]
    assert engine_container(pod)["readinessProbe"]["httpGet"]["port"] == 8080


def test_seed_example_waits_for_its_deployment() -> None:
    rsp = response("qwen")
    cond = condition(rsp, "WorkloadsReady")
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert "engine qwen3-8b waits for its Deployment" in cond.message
    assert "0/1 copies available" in cond.message
    assert status(rsp) == {
        "endpoint": "http://198.51.100.20/ml-team/qwen3-8b-eks-l4-0",
        "engines": [{"name": "qwen3-8b", "copies": 1, "availableCopies": 0}],
    }
    assert all(r.ready != fnv1.READY_TRUE for r in rsp.desired.resources.values())


def test_ready_when_every_copy_is_available() -> None:
    rsp = response("ready")
    assert condition(rsp, "WorkloadsReady").status == fnv1.STATUS_CONDITION_TRUE
    assert all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())
    assert status(rsp)["engines"] == [{"name": "qwen3-8b", "copies": 1, "availableCopies": 1}]
    out = render.render(READY)
    ready = next(c for c in out.xr["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_not_ready_while_copies_are_missing() -> None:
    rsp = response("ready-no-copy-available")
    assert rsp.desired.resources["workload-qwen3-8b"].ready == fnv1.READY_FALSE
    assert rsp.desired.resources["serving-inferencepool"].ready == fnv1.READY_TRUE
    assert "0/1 copies available" in condition(rsp, "WorkloadsReady").message


def test_a_serving_replica_asks_to_be_called_rarely_and_one_converging_often() -> None:
    assert response("ready").meta.ttl.seconds == fn.REST_TTL_S
    assert response("ready-route-not-ready").meta.ttl.seconds == 60  # the SDK's
    assert response("ready-no-gateway-address").meta.ttl.seconds == 60  # no endpoint yet


# --- a gang: Leader + Worker as a LeaderWorkerSet ------------------------------------------


def test_gang_is_one_leader_worker_set_of_two_nodes() -> None:
    got = manifests(response("gang"))
    assert {n for n in got if n.startswith("rct-")} == {
        "rct-llama-405b-leader",
        "rct-llama-405b-worker",
    }
    for role in ("leader", "worker"):
        (request,) = got[f"rct-llama-405b-{role}"]["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["count"] == 8
    lws = got["workload-llama-405b"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["kind"] == "LeaderWorkerSet"
    assert lws["spec"]["replicas"] == 1
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    assert leader["metadata"]["labels"][labels.ROLE] == "Leader"
    assert worker["metadata"]["labels"][labels.ROLE] == "Worker"
    assert labels.SERVING not in worker["metadata"]["labels"]
    for pod in (leader, worker):
        assert pod["metadata"]["labels"][labels.DEPLOYMENT] == "llama-405b"
        engine = engine_container(pod)
        assert env(engine)["MODELPLANE_LEADER_ADDRESS"]["value"] == "$(LWS_LEADER_ADDRESS)"
        assert env(engine)["MODELPLANE_RANK"]["value"] == "$(LWS_WORKER_INDEX)"
        assert env(engine)["HF_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "hf-token", "key": "token"}
        }
        assert engine["resources"]["requests"] == {"cpu": "32", "memory": "512Gi"}
        assert engine["resources"]["claims"] == [{"name": "devices"}]
    # A worker rank serves no HTTP; only the leader is probed.
    assert "readinessProbe" in engine_container(leader)
    assert "readinessProbe" not in engine_container(worker)
    assert worker["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].endswith("-worker")


# --- prefill/decode ------------------------------------------------------------------------


def test_pd_two_engine_workloads_with_3_and_2_copies() -> None:
    got = manifests(response("pd"))
    workloads = {n: m for n, m in got.items() if n.startswith("workload-")}
    assert {n: m["spec"]["replicas"] for n, m in workloads.items()} == {
        "workload-prefill": 3,
        "workload-decode": 2,
    }


def test_pd_claim_templates_copy_the_requests_verbatim() -> None:
    got = manifests(response("pd"))
    wanted = {e["name"]: e["members"][0]["deviceRequests"][0] for e in PD.xr["spec"]["engines"]}
    for engine, count in (("prefill", 1), ("decode", 2)):
        (request,) = got[f"rct-{engine}-standalone"]["spec"]["spec"]["devices"]["requests"]
        exactly = request["exactly"]
        assert exactly["count"] == count
        assert exactly["deviceClassName"] == "gpu.nvidia.com"
        assert exactly["allocationMode"] == "ExactCount"
        assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
            s["cel"] for s in wanted[engine]["selectors"]
        ]


def test_pd_inference_pool_picker_and_route() -> None:
    got = manifests(response("pd"))
    pool = got["serving-inferencepool"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["selector"]["matchLabels"] == {
        labels.REPLICA: "qwen3-32b-pd-coreweave-h100-0",
        labels.SERVING: "true",
    }
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    picker = got["serving-epp-service"]
    assert pool["spec"]["endpointPickerRef"]["name"] == picker["metadata"]["name"]
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    route = got["serving-httproute"]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": pool["metadata"]["name"],
        }
    ]
    deployment = got["serving-epp-deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == serving.EPP_IMAGE
    assert f"--pool-name={pool['metadata']['name']}" in container["args"]
    assert "--pool-namespace=ml-team" in container["args"]
    # the namespace's, which the InferenceCluster composes once for every picker there
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "plnt-endpoint-picker"
    assert labels.SERVING not in deployment["spec"]["template"]["metadata"]["labels"]
    text = picker_config(got)
    assert "&id" not in text  # no YAML anchors: every profile is written out
    config = yaml.safe_load(text)
    assert config["kind"] == "EndpointPickerConfig"
    assert [p["name"] for p in config["schedulingProfiles"]] == ["prefill", "decode"]


def test_pd_pods_carry_their_phase_and_decode_gets_the_routing_sidecar() -> None:
    got = manifests(response("pd"))
    prefill = got["workload-prefill"]["spec"]["template"]
    decode = got["workload-decode"]["spec"]["template"]
    assert prefill["metadata"]["labels"][labels.PHASE] == "Prefill"
    assert prefill["metadata"]["labels"]["llm-d.ai/role"] == "prefill"
    assert decode["metadata"]["labels"][labels.PHASE] == "Decode"
    assert decode["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert prefill["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert "initContainers" not in prefill["spec"]
    (sidecar,) = decode["spec"]["initContainers"]
    assert sidecar["image"] == serving.ROUTING_SIDECAR_IMAGE
    assert sidecar["restartPolicy"] == "Always"
    assert "--port=8000" in sidecar["args"]
    assert "--vllm-port=8200" in sidecar["args"]
    assert engine_container(decode)["readinessProbe"]["httpGet"]["port"] == 8200
    assert env(engine_container(decode))["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "status.podIP"}
    }


def test_pd_endpoint_picker_config_and_template_are_honoured() -> None:
    got = manifests(run(pd_with_picker(), PD.required))
    config = yaml.safe_load(picker_config(got))
    assert config["plugins"] == [{"type": "random-picker"}]
    assert config["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    pod = got["serving-epp-deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "picker"
    assert container["image"] == "registry.example.com/epp:v1"
    assert container["args"][0].startswith("--pool-name=")
    assert container["args"][-1] == "--v=4"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


def test_pd_gang_decode_engine_gets_the_sidecar_on_its_leader_only() -> None:
    got = manifests(response("pd-gang-decode"))
    templates = got["workload-decode"]["spec"]["leaderWorkerTemplate"]
    assert got["workload-decode"]["kind"] == "LeaderWorkerSet"
    assert templates["leaderTemplate"]["spec"]["initContainers"][0]["name"] == "routing-sidecar"
    assert "initContainers" not in templates["workerTemplate"]["spec"]
    assert templates["leaderTemplate"]["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert "llm-d.ai/role" not in templates["workerTemplate"]["metadata"]["labels"]
    assert templates["workerTemplate"]["metadata"]["labels"][labels.PHASE] == "Decode"


def test_pd_decode_engine_on_the_sidecar_port_is_fatal() -> None:
    rsp = response("pd-decode-on-sidecar-port")
    assert "spec.engines[1].members[0].template.spec.containers" in fatal(rsp)
    assert "routing sidecar listens on 8000" in fatal(rsp)
    assert not rsp.desired.resources


# --- modelCacheRef and env from a Secret ---------------------------------------------------


def test_cache_is_mounted_read_only_and_user_fields_pass_through() -> None:
    got = manifests(response("cache"))
    pod = got["workload-qwen3-8b"]["spec"]["template"]
    assert pod["spec"]["volumes"] == [
        {
            "name": "model-cache",
            "persistentVolumeClaim": {"claimName": "qwen3-8b-weights", "readOnly": True},
        }
    ]
    engine = engine_container(pod)
    assert engine["volumeMounts"] == [
        {"name": "model-cache", "mountPath": "/models", "readOnly": True}
    ]
    user = CACHE.xr["spec"]["engines"][0]["members"][0]["template"]
    assert engine["args"] == user["spec"]["containers"][0]["args"]
    assert [e for e in engine["env"] if not e["name"].startswith("MODELPLANE_")] == user["spec"][
        "containers"
    ][0]["env"]
    assert engine["resources"]["limits"] == {"memory": "32Gi"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["metadata"]["labels"]["team"] == "search"
    assert got["workload-qwen3-8b"]["spec"]["replicas"] == 2


@pytest.mark.parametrize("name", CACHE_WAITS)
def test_workloads_wait_for_the_model_cache(name: str) -> None:
    rsp = response(name)
    assert fatal(rsp) == ""
    got = composed(rsp)
    assert "workload-qwen3-8b" not in got
    assert {"rct-qwen3-8b-standalone", *SURFACE} <= set(got)
    wants = CACHE_WAITS[name][1]
    assert f"engine qwen3-8b waits for {wants}" in condition(rsp, "WorkloadsReady").message


# --- a cluster that cannot be reached yet ----------------------------------------------------


@pytest.mark.parametrize("name", UNREACHABLE)
def test_unreachable_cluster_composes_nothing(name: str) -> None:
    rsp = response(name)
    assert fatal(rsp) == ""
    assert not rsp.desired.resources
    cond = condition(rsp, "WorkloadsReady")
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == "MissingDependency"
    assert UNREACHABLE[name][1] in cond.message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert status(rsp)["engines"] == [{"name": "qwen3-8b", "copies": 1, "availableCopies": 0}]


def test_nothing_is_composed_until_the_cluster_prepares_the_namespace() -> None:
    rsp = response("namespace-not-prepared")
    assert fatal(rsp) == ""
    assert not rsp.desired.resources
    cond = condition(rsp, "WorkloadsReady")
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.message == (
        "namespace ml-team is not prepared on InferenceCluster eks-l4 yet (the endpoint "
        "picker's ServiceAccount and RoleBinding): nothing is composed until it is"
    )
    assert condition(rsp, "Bound").status == fnv1.STATUS_CONDITION_TRUE
    assert rsp.meta.ttl.seconds == 5  # the cluster's status changing does not call it
    assert "workload-qwen3-8b" in response("namespace-prepared").desired.resources


def test_a_replica_that_composed_keeps_composing_when_its_namespace_is_not_listed() -> None:
    rsp = response("ready-namespaces-unlisted")
    assert fatal(rsp) == ""
    assert "workload-qwen3-8b" in rsp.desired.resources
    assert condition(rsp, "WorkloadsReady").status == fnv1.STATUS_CONDITION_TRUE


def test_endpoint_waits_for_the_gateway_address() -> None:
    assert status(response("gateway-no-address"))["endpoint"] == ""
    assert (
        status(response("gateway-ipv6"))["endpoint"]
        == "http://[2001:db8::7]/ml-team/qwen3-8b-eks-l4-0"
    )


def test_unknown_pool_is_a_warning() -> None:
    rsp = response("pool-unknown")
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert warnings == ["engine qwen3-8b: node pool gpu-l4 is not among the cluster's pools"]
    assert "workload-qwen3-8b" in rsp.desired.resources


def test_endpoint_picker_under_unified_is_honoured() -> None:
    xr = qwen_serving({"router": "EndpointPicker", "endpointPicker": PICKER_FOR_UNIFIED})
    rsp = run(xr, QWEN.required)
    assert [r.message for r in rsp.results] == []
    got = manifests(rsp)
    written = yaml.safe_load(picker_config(got))
    config = PICKER_FOR_UNIFIED["config"]
    assert written == {**serving.UNIFIED_EPP_CONFIG, **config}  # top-level keys replace
    (container,) = got["serving-epp-deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/epp:v1"
    assert container["args"][-1] == "--v=2"
    assert container["args"][0] == "--pool-name=qwen3-8b-eks-l4-0"


def test_router_unset_and_endpoint_picker_render_the_same() -> None:
    assert manifests(response("unified-router-endpoint-picker")) == manifests(response("qwen"))


def test_unified_engines_must_share_one_http_port() -> None:
    rsp = response("unified-two-http-ports")
    assert "spec.engines: under Unified serving every engine serves on one http port" in fatal(rsp)


# --- invalid input: every XRD rule is also the function's --------------------------------------


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_input_is_fatal_with_the_field_path(path: pathlib.Path) -> None:
    (xr,) = render.load_yaml_docs(path)
    expected = xr["metadata"]["annotations"]["plnt.work/expect-error"]
    rsp = response(f"invalid-{path.stem}")
    assert expected in fatal(rsp)
    assert fatal(rsp).startswith("invalid input: spec")
    assert not rsp.desired.resources


def test_invalid_cases_cover_every_cel_rule_of_the_xrd() -> None:
    xrd = yaml.safe_load((REPO / "apis" / "modelreplicas" / "definition.yaml").read_text())
    messages = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            messages.extend(v["message"] for v in node.get("x-kubernetes-validations") or [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(xrd)
    expected = {
        render.load_yaml_docs(p)[0]["metadata"]["annotations"]["plnt.work/expect-error"]
        for p in INVALID
    }
    assert len(messages) == 9
    for message in messages:
        assert any(e in message for e in expected), f"no invalid case for: {message}"


# --- only bound replicas render --------------------------------------------------------------


def test_an_unbound_replica_composes_nothing_and_says_it_awaits_the_binder() -> None:
    rsp = response("unbound")
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_FALSE, "AwaitingBinding")
    assert "awaiting the binder" in bound.message
    assert condition(rsp, "WorkloadsReady").reason == "AwaitingBinding"
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]


def test_the_ledger_binds_without_any_annotation() -> None:
    assert binding.BINDING not in (QWEN.xr["metadata"].get("annotations") or {})
    rsp = response("bound-by-the-ledger")
    assert condition(rsp, "Bound").reason == "Bound"
    assert "workload-qwen3-8b" in composed(rsp)


def test_a_refused_replica_composes_nothing_and_says_why() -> None:
    rsp = response("refused")
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert bound.reason == "BindingRefused"
    assert bound.message == "the binder refused it: pool gpu-l4: not enough free gpu"


@pytest.mark.parametrize("case", UNBACKED, ids=[c.name for c in UNBACKED])
def test_a_binding_the_ledger_does_not_back_renders_nothing_and_warns(case: Unbacked) -> None:
    rsp = response(case.name)
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_FALSE, case.reason)
    assert case.says in bound.message
    assert condition(rsp, "WorkloadsReady").reason == case.reason
    warnings = _warnings(rsp)
    assert len(warnings) == 1 and case.reason in warnings[0] and case.says in warnings[0]


def test_a_ledger_outside_the_binders_namespace_binds_nothing() -> None:
    with pytest.raises(ledger_parse.UnreadableLedgerError) as read:
        ledger_parse.cluster_ledger_of(MOVED, "eks-l4")
    assert read.value.reason == ledger_parse.LEDGER_MISPLACED
    rsp = response("ledger-outside-the-binders-namespace")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").reason == "BindingForged"


def test_a_binding_for_another_spec_does_not_count() -> None:
    # The binder committed one GPU; the spec now asks for two: not bound until re-committed.
    rsp = response("ledger-commits-another-spec")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").reason == "AwaitingBinding"


def test_a_bound_replica_says_so() -> None:
    rsp = response("qwen")
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_TRUE, "Bound")
    assert bound.message == "its devices are committed on cluster eks-l4"
    assert composed(rsp)  # and renders its workloads


def test_workloads_condition_says_what_each_engine_waits_for() -> None:
    ready = fn.EngineProgress({"name": "a"})
    done = fn.workloads_condition([ready, ready])
    assert (done.status, done.reason, done.message) == (
        True,
        "Available",
        "every copy of 2 engine(s) is available",
    )
    waiting = fn.workloads_condition(
        [fn.EngineProgress({}, "a waits"), fn.EngineProgress({}, "b waits")]
    )
    assert (waiting.status, waiting.reason, waiting.message) == (
        False,
        "Waiting",
        "a waits; b waits",
    )
    pulling = fn.workloads_condition([fn.EngineProgress({}, "a stages", pulling=True), ready])
    assert (pulling.status, pulling.reason) == (False, "PullingWeights")


def test_staging_wait_tells_downloading_from_loading() -> None:
    import types

    from functions.model_replica.staging import Staging

    engine = types.SimpleNamespace(name="llm", copies=2)
    workload = {"kind": "Deployment", "metadata": {"name": "r-llm"}}
    stage = Staging(uri="hf://org/model", path="/models/model")
    loading = fn.staging_wait(engine, workload, stage, staged=True)
    assert loading == (
        "engine llm is loading its weights (staged into /models/model): its Deployment r-llm "
        "has pods, 0/2 copies available"
    )
    pulling = fn.staging_wait(engine, workload, stage, staged=False)
    assert pulling.startswith("engine llm stages its weights from ")
    assert pulling.endswith(
        "into /models/model before it starts: its Deployment r-llm has pods, 0/2 copies available"
    )


def test_the_picker_config_text_is_the_same_in_every_process() -> None:
    """The user's config arrives as a protobuf Struct, whose map order follows the process's
    string hashing: the flag text must not, or each function restart would roll the picker out
    again."""
    script = (
        "from tests.functions.test_model_replica import PD, manifests, pd_with_picker, "
        "picker_config, run; print(picker_config(manifests(run(pd_with_picker(), PD.required))))"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for seed in range(4)
    }
    assert len(texts) == 1
