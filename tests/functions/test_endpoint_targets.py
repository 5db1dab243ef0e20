"""Where a tenant's ModelEndpoint may send the platform's gateway, through both real functions.

Each row is one endpoint URL in namespace team-a: the ModelEndpoint function must say Valid
False (TargetRefused) with the reason, and a ModelService of team-a selecting it must give it no
traffic and compose no backend for it; or, for a target the platform allows, Valid True and
traffic. The fleet: one InferenceCluster whose gateway is 203.0.113.10 (ml-team's and team-a's
replicas behind it, paths /<namespace>/<replica>), the control-plane Gateway at 198.51.100.7,
Namespaces ml-team and team-a.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_endpoint import fn as endpoint_fn
from plnt import targets, xp
from plnt_host import render

TEAM = "team-a"
FLEET_GATEWAY = "203.0.113.10"
CONTROL_PLANE_GATEWAY = "198.51.100.7"
SERVICE = render.compositions()[("modelplane.ai/v1alpha1", "ModelService")]


def namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
    }


FLEET: list[dict[str, Any]] = [
    namespace("ml-team"),
    namespace(TEAM),
    {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "coreweave-h100"},
        "spec": {},
        "status": {"gateway": {"address": FLEET_GATEWAY}},
    },
    {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "plnt-gateway", "namespace": "plnt-system"},
        "spec": {
            "gatewayClassName": "istio",
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
        },
        "status": {"addresses": [{"type": "IPAddress", "value": CONTROL_PLANE_GATEWAY}]},
    },
]


def grant(**endpoints: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceGrant",
        "metadata": {"name": TEAM},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TEAM}},
            "endpoints": endpoints,
        },
    }


def endpoint(url: str, rewrite: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"url": url}
    if rewrite:
        spec["rewritePath"] = rewrite
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "target", "namespace": TEAM, "labels": {"app": "target"}},
        "spec": spec,
    }


SERVICE_XR = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelService",
    "metadata": {"name": "svc", "namespace": TEAM},
    "spec": {"endpoints": [{"selector": {"matchLabels": {"app": "target"}}}]},
}


def endpoint_verdict(ep: dict[str, Any], required: list[dict[str, Any]]) -> fnv1.Condition:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(ep)
    rsp, _ = render.run_with_requirements(
        endpoint_fn.run_function, req, required, "function-model-endpoint"
    )
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return next(c for c in rsp.conditions if c.type == "Valid")


def service_weights(ep: dict[str, Any], required: list[dict[str, Any]]) -> tuple[dict, list]:
    state, _, _, _ = render.run_pipeline(SERVICE, SERVICE_XR, [], [*required, ep])
    status = xp.to_dict(state.composite.resource).get("status", {})
    weights = {w["endpoint"]: w["weight"] for w in status.get("weights", [])}
    return weights, sorted(state.resources)


def non_canonical(host: str, means: str) -> str:
    return f"an IPv4 address written in a non-canonical form ({host}, read as {means})"


REFUSED = [
    # targets inside the platform, each spelled as a user would write it
    ("http://10.96.0.1/", None, "an address inside the platform (10.96.0.1, in 10.0.0.0/8)"),
    ("https://kubernetes.default/", None, "a Service name in namespace default"),
    ("http://plnt-reconciler.plnt-system:8080/", None, "a Service name in namespace plnt-system"),
    ("http://metadata.google.internal/", None, "a cloud metadata or internal host name"),
    (
        "http://[::ffff:169.254.169.254]/",
        None,
        "an address inside the platform (::ffff:a9fe:a9fe, which is 169.254.169.254",
    ),
    # the same addresses spelled the ways resolvers and URL parsers read them
    ("http://2852039166/", None, non_canonical("2852039166", "169.254.169.254")),
    ("http://0251.0376.0251.0376/", None, non_canonical("0251.0376.0251.0376", "169.254.169.254")),
    ("http://0xa9fea9fe/", None, non_canonical("0xa9fea9fe", "169.254.169.254")),
    ("http://127.1:15000/", None, non_canonical("127.1", "127.0.0.1")),
    ("http://010.0.0.1/", None, non_canonical("010.0.0.1", "8.0.0.1")),
    ("http://[::ffff:a9fe:a9fe]/", None, "which is 169.254.169.254"),
    ("http://[64:ff9b::a9fe:a9fe]/", None, "which is 169.254.169.254"),
    ("http://[2002:a9fe:a9fe::1]/", None, "which is 169.254.169.254"),
    ("http://[::1]:15000/", None, "an address inside the platform (::1, in ::1/128)"),
    ("http://[fd00:ec2::254]/", None, "in fc00::/7"),
    ("http://[fe80::1]/", None, "in fe80::/10"),
    ("http://192.168.1.10/", None, "in 192.168.0.0/16"),
    ("http://172.20.0.5/", None, "in 172.16.0.0/12"),
    ("http://100.100.100.200/", None, "in 100.64.0.0/10"),  # Alibaba Cloud's metadata
    ("http://0.0.0.0:8080/", None, "in 0.0.0.0/8"),
    # in-cluster and cloud-internal names
    ("http://kube-dns.kube-system.svc/", None, "an in-cluster or local host name"),
    ("http://api.team-b.svc.cluster.local/", None, "an in-cluster or local host name"),
    ("http://10-0-0-1.default.pod/", None, "an in-cluster or local host name"),
    ("http://kubernetes/", None, "a single-label name the cluster's DNS search domains resolve"),
    ("http://qwen3-8b.ml-team:8000/", None, "a Service name in namespace ml-team"),
    ("http://ip-10-0-0-1.ec2.internal/", None, "a cloud metadata or internal host name"),
    ("http://vm-1.c.my-project.internal/", None, "a cloud metadata or internal host name"),
    # another namespace's replicas behind the fleet's gateway, or its route on the control plane
    (
        f"http://{FLEET_GATEWAY}/ml-team/qwen3-8b-coreweave-h100-0",
        "/ml-team/qwen3-8b-coreweave-h100-0/",
        f"namespace ml-team's replicas on the platform's gateway {FLEET_GATEWAY}",
    ),
    (
        f"http://{FLEET_GATEWAY}/team-a/x",
        "/ml-team/qwen3-8b-coreweave-h100-0/",  # the rewrite is where requests go
        "namespace ml-team's replicas",
    ),
    (f"http://{FLEET_GATEWAY}/team-a/../ml-team/x", None, "a path the gateway may rewrite"),
    (f"http://{FLEET_GATEWAY}/team-a/%2e%2e/ml-team/x", None, "a path the gateway may rewrite"),
    (f"http://{FLEET_GATEWAY}/", None, "no namespace's replicas"),
    (
        f"http://{CONTROL_PLANE_GATEWAY}/ml-team/qwen3-8b",
        None,
        f"namespace ml-team's replicas on the platform's gateway {CONTROL_PLANE_GATEWAY}",
    ),
]


@pytest.mark.parametrize(("url", "rewrite", "why"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_target_inside_the_platform_or_of_another_namespace_is_refused(
    url: str, rewrite: str | None, why: str
) -> None:
    ep = endpoint(url, rewrite)
    valid = endpoint_verdict(ep, FLEET)
    assert (valid.status, valid.reason) == (fnv1.STATUS_CONDITION_FALSE, "TargetRefused")
    assert why in valid.message
    weights, composed = service_weights(ep, FLEET)
    assert weights == {}
    assert [n for n in composed if n != "route"] == []  # no backend Service stands for it


ALLOWED = [
    ("https://api.inference.example.com/v1", None, []),
    ("http://8.8.8.8/", None, []),
    ("http://[2001:db8::1]:8000/", None, []),
    (f"http://{FLEET_GATEWAY}/team-a/llama-0", "/team-a/llama-0/", []),
    (f"http://{CONTROL_PLANE_GATEWAY}/team-a/other-service", None, []),
    ("http://10.20.1.5:8000/", None, [grant(cidrs=["10.20.0.0/16"])]),
    ("http://[::ffff:10.20.1.5]:8000/", None, [grant(cidrs=["10.20.0.0/16"])]),
    (
        f"http://{FLEET_GATEWAY}/ml-team/qwen3-8b-coreweave-h100-0",
        "/ml-team/qwen3-8b-coreweave-h100-0/",
        [grant(replicaNamespaces=["ml-team"])],
    ),
]


@pytest.mark.parametrize(("url", "rewrite", "grants"), ALLOWED, ids=[r[0] for r in ALLOWED])
def test_a_target_outside_the_platform_or_granted_by_it_gets_traffic(
    url: str, rewrite: str | None, grants: list[dict[str, Any]]
) -> None:
    ep = endpoint(url, rewrite)
    valid = endpoint_verdict(ep, [*FLEET, *grants])
    assert valid.status == fnv1.STATUS_CONDITION_TRUE, valid.message
    weights, _ = service_weights(ep, [*FLEET, *grants])
    assert weights == {"target": 1000}


def test_a_grant_for_another_namespace_grants_this_one_nothing() -> None:
    other = copy.deepcopy(grant(cidrs=["10.20.0.0/16"], replicaNamespaces=["ml-team"]))
    other["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": "b"}}
    for url in ("http://10.20.1.5/", f"http://{FLEET_GATEWAY}/ml-team/qwen3-8b-coreweave-h100-0"):
        valid = endpoint_verdict(endpoint(url), [*FLEET, other])
        assert (valid.status, valid.reason) == (fnv1.STATUS_CONDITION_FALSE, "TargetRefused")


def test_an_invalid_grant_grants_nothing() -> None:
    broken = grant(cidrs=["10.20.0.0/99"])
    valid = endpoint_verdict(endpoint("http://10.20.1.5/"), [*FLEET, broken])
    assert (valid.status, valid.reason) == (fnv1.STATUS_CONDITION_FALSE, "TargetRefused")


@pytest.mark.parametrize(
    ("host", "want"),
    [
        ("2852039166", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.43518", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("1.2.3.4.5", "0.0.0.0"),  # no address: refused all the same
        ("256.1.1.1", "0.0.0.0"),
        ("09.1.1.1", "0.0.0.0"),
        ("example.com", None),
        ("1.example", None),
    ],
)
def test_legacy_ipv4_reads_a_host_as_inet_aton_does(host: str, want: str | None) -> None:
    got = targets.legacy_ipv4(host)
    assert (str(got) if got is not None else None) == want
