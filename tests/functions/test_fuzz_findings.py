"""Regressions for what the property-based fuzzer (tests/fuzz) found in CoreWeaveCluster,
InferenceClass, InferenceCluster and ModelDeployment: each case failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from functions.inference_cluster import stack
from functions.model_deployment import scheduler
from plnt import xp
from plnt.models import coreweave_cluster, inference_class, inference_cluster, model_deployment

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
    cluster = {"status": {"gateway": {"address": address}}}
    assert scheduler.gateway_address(cluster) == host


def test_a_pool_without_a_name_offers_no_capacity() -> None:
    cluster = {
        "metadata": {"name": "lab"},
        "status": {
            "pools": [{"className": "l4", "nodeCapacity": 3}, {"name": "a", "nodeCapacity": 1}]
        },
    }
    assert [p.name for p in scheduler.cluster_of(cluster).pools] == ["a"]


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
