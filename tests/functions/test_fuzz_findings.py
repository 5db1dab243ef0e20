"""Regressions for what the property-based fuzzer (tests/fuzz) found in CoreWeaveCluster,
InferenceClass, InferenceCluster, ModelDeployment, ModelEndpoint, ModelService and
ModelReplica: each case failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from functions.inference_cluster import stack
from functions.model_replica import replica as model_replica_objects
from functions.model_replica import workloads
from plnt import targets, xp
from plnt.capacity import scheduling
from plnt.capacity.offer import cluster_of
from plnt.models import (
    coreweave_cluster,
    inference_class,
    inference_cluster,
    model_deployment,
    model_endpoint,
    model_replica,
)
from plnt_host import render

CLASS = {
    "devices": [
        {
            "name": "gpu",
            "driver": "gpu.nvidia.com",
            "deviceClassName": "gpu.nvidia.com",
            "attributes": {"driverVersion": {"version": "570.148.8"}},
        }
    ],
    "provisioning": {
        "provider": "CoreWeave",
        "coreweave": {"instanceType": "gd-8xh100ib-i128", "acceleratorType": "nvidia-h100"},
    },
}
CLUSTER = {
    "cluster": {"source": "CoreWeave", "coreweave": {"zone": "US-EAST-04A"}},
    "nodePools": [{"name": "h100", "className": "nvidia-h100-8x", "nodeCount": 2}],
}
COREWEAVE = {
    "zone": "US-EAST-04A",
    "nodePools": [
        {"name": "gpu", "role": "GPU", "instanceType": "gd-8xh100ib-i128", "gpu": {}},
    ],
}
ENGINE = {
    "name": "qwen",
    "members": [
        {
            "nodeSelector": {"devices": [{"name": "gpu"}]},
            "template": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
        }
    ],
}


def parse_class(spec: dict[str, Any]) -> None:
    inference_class.parse(spec)


def parse_cluster(spec: dict[str, Any]) -> None:
    inference_cluster.parse(spec)


def parse_coreweave(spec: dict[str, Any]) -> None:
    xp.parse(coreweave_cluster.CoreWeaveClusterSpec, spec, "spec")


def parse_deployment(spec: dict[str, Any]) -> None:
    model_deployment.check(xp.parse(model_deployment.ModelDeploymentSpec, spec, "spec"))


def parse_endpoint(spec: dict[str, Any]) -> None:
    xp.parse(model_endpoint.ModelEndpointSpec, spec, "spec")


def parse_replica(spec: dict[str, Any]) -> None:
    xp.parse(model_replica.ModelReplicaSpec, spec, "spec")


def replica(pool: str, engine: str = "qwen", **template: Any) -> dict[str, Any]:
    member = {
        "role": "Standalone",
        "nodePoolName": pool,
        "deviceRequests": [{"name": "gpu", "count": 1, "deviceClassName": "gpu.nvidia.com"}],
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}, **template},
    }
    return {"clusterName": "lab-l4", "engines": [{"name": engine, "members": [member]}]}


def version(value: str) -> dict[str, Any]:
    device = {**CLASS["devices"][0], "attributes": {"driverVersion": {"version": value}}}
    return {**CLASS, "devices": [device]}


def class_accelerator(value: str) -> dict[str, Any]:
    coreweave = {"instanceType": "gd-8xh100ib-i128", "acceleratorType": value}
    return {**CLASS, "provisioning": {"provider": "CoreWeave", "coreweave": coreweave}}


def pool_accelerator(value: str) -> dict[str, Any]:
    pool = {**COREWEAVE["nodePools"][0], "gpu": {"acceleratorType": value}}
    return {**COREWEAVE, "nodePools": [pool]}


def deployment(**fields: Any) -> dict[str, Any]:
    return {"engines": [ENGINE], **fields}


# (parser, spec the XRD rejects, the field the Fatal must name)
REJECTED = [
    (parse_class, version("570.148.8\n"), "spec.devices[0].attributes.driverVersion.version"),
    (parse_class, {**CLASS, "devices": [{**CLASS["devices"][0], "name": "gpu\n"}]}, "name"),
    (parse_class, {**CLASS, "devices": [{**CLASS["devices"][0], "count": True}]}, "count"),
    (parse_class, class_accelerator("nvidia h100"), "spec.provisioning.coreweave.acceleratorType"),
    (parse_coreweave, pool_accelerator("a/b"), "spec.nodePools[0].gpu.acceleratorType"),
    (
        parse_cluster,
        {**CLUSTER, "nodePools": [{**CLUSTER["nodePools"][0], "nodeCount": False}]},
        "spec.nodePools[0].nodeCount",
    ),
    (parse_deployment, deployment(replicas=True), "spec.replicas"),
    (
        parse_deployment,
        deployment(
            canary={
                "trafficPercent": 10,
                "smokeTest": {"prompts": 1001, "ttftBudgetMs": 500, "tpotBudgetMs": 50},
            }
        ),
        "spec.canary.smokeTest.prompts",
    ),
    (
        parse_deployment,
        deployment(autoscaling={"targetTokensPerSecond": 100, "minReplicas": 1001}),
        "spec.autoscaling.minReplicas",
    ),
    (
        parse_deployment,
        deployment(clusterSelector={"matchExpressions": [{"key": "", "operator": "Exists"}]}),
        "spec.clusterSelector.matchExpressions[0].key",
    ),
    # A host that is no DNS name became an HTTPRoute urlRewrite.hostname its CRD refuses.
    (parse_endpoint, {"url": "https://api.inference.example.com-"}, "spec.url"),
    (parse_endpoint, {"url": "https://./v1"}, "spec.url"),
    (parse_endpoint, {"url": "https://a..b"}, "spec.url"),
    (parse_endpoint, {"url": "https://example.com./v1"}, "spec.url"),
    (parse_endpoint, {"url": "https://" + "a" * 254}, "spec.url"),
    (parse_endpoint, {"url": "http://[:::]/v1"}, "spec.url"),
    # The URL's path became an HTTPRoute replacePrefixMatch past its 1024 characters.
    (parse_endpoint, {"url": "http://203.0.113.10/" + "v" * 1024}, "spec.url"),
    (parse_endpoint, {"url": "http://203.0.113.10", "rewritePath": "/" * 1025}, "spec.rewritePath"),
    # The pool name becomes a nodeSelector label value, which these are not.
    (parse_replica, replica("Pool_"), "spec.engines[0].members[0].nodePoolName"),
    (parse_replica, replica("x" * 64), "spec.engines[0].members[0].nodePoolName"),
    (parse_replica, replica("pool\n"), "spec.engines[0].members[0].nodePoolName"),
    # The engine name labels the engine's pods (and is shared with ModelDeployment).
    (parse_replica, replica("gpu", engine=":"), "spec.engines[0].name"),
    (parse_deployment, {"engines": [{**ENGINE, "name": "qwen\n"}]}, "spec.engines[0].name"),
    # Template labels and annotations pass to the pods unchanged, so ObjectMeta rules apply.
    *(
        (parse_replica, replica("gpu", metadata={field: value}), f"metadata.{field}")
        for field, value in [
            ("labels", {"team": "search\n"}),
            ("labels", {"team": "x" * 64}),
            ("labels", {"a/b/c": "x"}),
            ("labels", {"-team": "x"}),
            ("annotations", {"Bad.Prefix/x": "x"}),
        ]
    ),
]


@pytest.mark.parametrize(("parse", "spec", "field"), REJECTED)
def test_input_the_xrd_rejects_is_invalid_input_naming_the_field(parse, spec, field) -> None:
    with pytest.raises(xp.InvalidInput) as err:
        parse(spec)
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("parse", "spec"),
    [
        (parse_class, CLASS),
        (parse_cluster, CLUSTER),
        (parse_coreweave, pool_accelerator("nvidia-h100_sxm.5")),
        (parse_deployment, deployment(replicas=3)),
        (parse_endpoint, {"url": "https://API.Inference.example.com:8443/v1"}),
        (parse_endpoint, {"url": "http://[2001:db8::1]/v1"}),
        (parse_endpoint, {"url": "http://203.0.113.10"}),
        (parse_endpoint, {"url": "http://203.0.113.10/" + "v" * 1023}),
        (parse_replica, replica("x" * 63)),
        (parse_replica, replica("gpu-l4", engine="Qwen3_8B.fp8")),
        (
            parse_replica,
            replica("gpu", metadata={"labels": {"a.b/c": "", "t": "x" * 63}, "annotations": {}}),
        ),
    ],
)
def test_the_valid_neighbours_still_parse(parse, spec) -> None:
    parse(spec)


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("10.0.0.7", "10.0.0.7"),
        ("fd00::7", "[fd00::7]"),
        ("gw.lab.example.com", "gw.lab.example.com"),
        ("?", None),
        ("gw.example.com-", None),
        (".", None),
        ("a b", None),
        ("", None),
    ],
)
def test_gateway_address_is_a_url_host_or_nothing(address: str, host: str | None) -> None:
    assert scheduling.url_host(address) == host


def test_a_pool_without_a_name_offers_no_capacity() -> None:
    cluster = {
        "metadata": {"name": "lab"},
        "status": {
            "pools": [{"className": "l4", "nodeCapacity": 3}, {"name": "a", "nodeCapacity": 1}]
        },
    }
    assert [p.name for p in cluster_of(cluster).pools] == ["a"]


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        ([{"type": "IPAddress", "value": "10.0.0.7"}], "10.0.0.7"),
        ([True], ""),
        (7, ""),
        ([], ""),
    ],
)
def test_gateway_address_trusts_no_shape_of_the_read_back_gateway(addresses, expected) -> None:
    observed = {"status": {"atProvider": {"manifest": {"status": {"addresses": addresses}}}}}
    assert stack.gateway_address(observed) == expected


@pytest.mark.parametrize("host", [".", "api.example.com-", "-api.example.com", "a" * 254, "a_b"])
def test_model_service_refuses_a_host_that_is_no_dns_name_or_ip(host: str) -> None:
    refused = targets.refusal(f"http://{host}/", None, targets.Policy(namespace="ml-team"))
    assert refused == f"neither a DNS name nor an IP address ({host})"


def test_an_endpoint_with_an_unusable_host_gets_no_traffic_and_a_warning() -> None:
    """Defence in depth: such an endpoint reaching ModelService (its XRD now refuses it) is left
    out with a warning, never composed into an HTTPRoute its CRD refuses."""
    scenario = render.load_scenario(render.REPO_ROOT / "examples/model-service")
    bad_url = "https://api.inference.example.com-"
    required = [
        {**obj, "spec": {**obj["spec"], "url": bad_url}}
        if obj["metadata"]["name"] == "hosted-qwen3-8b"
        else obj
        for obj in scenario.required
    ]
    composition = render.compositions()[(scenario.xr["apiVersion"], scenario.xr["kind"])]
    desired, results, _, _ = render.run_pipeline(
        composition, scenario.xr, scenario.observed, required
    )
    warnings = [r.message for _, r in results if "hosted-qwen3-8b" in r.message]
    assert warnings, [r.message for _, r in results]
    route = next(
        xp.to_dict(r.resource)
        for r in desired.resources.values()
        if xp.to_dict(r.resource).get("kind") == "HTTPRoute"
    )
    assert "api.inference.example.com-" not in str(route)


@pytest.mark.parametrize(
    ("status", "available"),
    [
        (5, 0),
        ([], 0),
        ({"availableReplicas": "3"}, 0),
        ({"availableReplicas": True}, 0),
        ({"availableReplicas": -1.0}, 0),
        ({"availableReplicas": 1.5}, 0),
        ({"availableReplicas": float("inf")}, 0),
        ({"availableReplicas": 2.0}, 2),
        ({"availableReplicas": 3}, 3),
    ],
)
def test_an_observed_workload_status_is_read_without_trusting_its_shape(status, available) -> None:
    """The observed manifest is what the cluster returned: a status of the wrong shape made
    ModelReplica raise AttributeError (an internal error)."""
    manifest = {"kind": "Deployment", "status": status}
    assert workloads.available_copies(manifest) == available
    assert workloads.created_copies({"kind": ["Deployment"], "status": {"replicas": 1}}) == 0


@pytest.mark.parametrize(
    "observed",
    [
        None,
        {"status": []},
        {"status": {"atProvider": 1}},
        {"status": {"atProvider": {"manifest": "x"}}},
    ],
)
def test_an_observed_object_without_a_manifest_map_reads_as_never_observed(observed) -> None:
    assert model_replica_objects.observed_manifest(observed) == {}
