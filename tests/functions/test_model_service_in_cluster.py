"""A ModelService's in-cluster endpoint (spec.service), through the real run_function: the
Service, its EndpointSlice at the Gateway, the route on the Service's in-cluster names, the
names no other namespace may take and the objects it never takes over."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_service import in_cluster
from plnt import names, routes
from plnt.grants import Grant
from tests.functions.test_model_service import SCENARIO, Out, run

UID = "0b5e6c1a-2f4d-4e8b-9a7c-3d1e5f7a9b20"
FQDN = "qwen3-8b.ml-team.svc.cluster.local"
ENDPOINT = f"{FQDN}:8000"
ACCEPTED = {
    "parents": [
        {
            "parentRef": {"name": "plnt-gateway", "namespace": "plnt-system"},
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}],
        }
    ]
}


def xr() -> dict[str, Any]:
    out = copy.deepcopy(SCENARIO.xr)
    out["metadata"]["uid"] = UID
    out["spec"]["service"] = {"name": "qwen3-8b"}
    return out


def observed(out: Out, *keys: str) -> list[dict[str, Any]]:
    """What ``out`` composed under ``keys``, as the next reconcile observes it."""
    seen = []
    for key in keys:
        obj = copy.deepcopy(out.desired[key])
        obj["metadata"].setdefault("namespace", "ml-team")
        obj["metadata"]["ownerReferences"] = [{"controller": True, "uid": UID}]
        obj["metadata"]["annotations"] = {"crossplane.io/composition-resource-name": key}
        if obj["kind"] == "HTTPRoute":
            obj["status"] = ACCEPTED
        seen.append(obj)
    return seen


IN_CLUSTER = (in_cluster.SERVICE, in_cluster.SLICE, in_cluster.ROUTE)


def test_a_service_on_8000_leads_through_the_gateway_to_the_same_backends() -> None:
    out = run(xr(), SCENARIO.required)
    svc, eps, route = (out.desired[k] for k in IN_CLUSTER)
    assert svc == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "qwen3-8b"},
        "spec": {
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP", "appProtocol": "http"}]
        },
    }
    assert "selector" not in svc["spec"]  # its endpoints are the Gateway, not pods
    assert eps["metadata"]["labels"] == {"kubernetes.io/service-name": "qwen3-8b"}
    assert eps["endpoints"] == [{"addresses": ["198.51.100.7"], "conditions": {"ready": True}}]
    assert eps["ports"] == [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"}]
    assert route["metadata"]["name"] == "qwen3-8b.svc"
    assert route["spec"]["hostnames"] == [FQDN, "qwen3-8b.ml-team.svc"]
    assert route["spec"]["parentRefs"] == out.desired["route"]["spec"]["parentRefs"]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    # the same endpoints, the same weights as the path route
    (path_rule,) = out.desired["route"]["spec"]["rules"]
    assert rule["backendRefs"] == path_rule["backendRefs"]
    # not observed yet: no endpoint in status
    assert "endpoint" not in out.status
    assert out.conditions["InClusterEndpoint"].status == fnv1.STATUS_CONDITION_FALSE


def test_the_endpoint_is_in_status_once_its_objects_exist_and_the_route_is_accepted() -> None:
    first = run(xr(), SCENARIO.required)
    out = run(xr(), SCENARIO.required, observed(first, *IN_CLUSTER))
    assert out.status["endpoint"] == ENDPOINT
    cond = out.conditions["InClusterEndpoint"]
    assert cond.status == fnv1.STATUS_CONDITION_TRUE
    assert "Service ml-team/qwen3-8b reaches the route through Gateway" in cond.message
    # its own objects, read back as required resources, are not someone else's
    seen = observed(first, *IN_CLUSTER)
    again = run(xr(), [*SCENARIO.required, *seen[:2]], seen)
    assert again.status["endpoint"] == ENDPOINT


def test_without_spec_service_nothing_in_cluster_is_composed() -> None:
    out = run(SCENARIO.xr, SCENARIO.required)
    assert not set(IN_CLUSTER) & set(out.desired)
    assert "InClusterEndpoint" not in out.conditions


@pytest.mark.parametrize("kind", ["Service", "EndpointSlice", "HTTPRoute"])
def test_an_object_of_its_names_it_does_not_control_is_never_taken_over(kind: str) -> None:
    first = run(xr(), SCENARIO.required)
    key = {"Service": in_cluster.SERVICE, "EndpointSlice": in_cluster.SLICE}.get(
        kind, in_cluster.ROUTE
    )
    theirs = copy.deepcopy(first.desired[key])
    theirs["metadata"]["namespace"] = "ml-team"
    theirs["metadata"]["ownerReferences"] = [{"controller": True, "uid": "someone-else"}]
    out = run(xr(), [*SCENARIO.required, theirs])
    assert not set(IN_CLUSTER) & set(out.desired)
    assert "endpoint" not in out.status
    cond = out.conditions["InClusterEndpoint"]
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "NameTaken")
    name = theirs["metadata"]["name"]
    assert f"{kind} ml-team/{name} exists and is not this ModelService's" in cond.message
    assert out.status["url"] == "http://198.51.100.7/ml-team/qwen3-8b"  # the route still serves


def test_another_namespaces_route_on_its_names_does_not_take_them() -> None:
    """A route of another namespace listing the Service's names (a too-broad grant) loses them:
    they are the namespace's own, whichever route is older."""
    other = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": "grab",
            "namespace": "team-b",
            "creationTimestamp": "2020-01-01T00:00:00Z",
        },
        "spec": {
            "parentRefs": [{"name": "plnt-gateway", "namespace": "plnt-system"}],
            "hostnames": ["*.svc.cluster.local"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}],
        },
    }
    out = run(xr(), [*SCENARIO.required, other])
    assert set(IN_CLUSTER) <= set(out.desired)
    assert routes.owner(
        routes.Route("team-b", "grab", ("*.svc.cluster.local",), ("/",)),
        "/",
        [routes.Route("ml-team", "qwen3-8b.svc", (FQDN, "qwen3-8b.ml-team.svc"), ("/",))],
    ) == routes.Route("ml-team", "qwen3-8b.svc", (FQDN, "qwen3-8b.ml-team.svc"), ("/",))


def test_a_gateway_with_a_host_name_address_gets_no_in_cluster_endpoint() -> None:
    required = copy.deepcopy(SCENARIO.required)
    for obj in required:
        if obj["kind"] == "Gateway":
            obj["status"]["addresses"] = [{"type": "Hostname", "value": "lb.example.com"}]
    out = run(xr(), required)
    assert not set(IN_CLUSTER) & set(out.desired)
    cond = out.conditions["InClusterEndpoint"]
    assert cond.reason == "GatewayAddressNotIP"
    assert "lb.example.com" in cond.message


def test_the_listener_port_is_the_gateways_http_listener() -> None:
    required = copy.deepcopy(SCENARIO.required)
    for obj in required:
        if obj["kind"] == "Gateway":
            obj["spec"]["listeners"] = [
                {"name": "tls", "protocol": "HTTPS", "port": 443},
                {"name": "web", "protocol": "HTTP", "port": 8080},
            ]
    out = run(xr(), required)
    assert out.desired[in_cluster.SLICE]["ports"][0]["port"] == 8080


# --- names and hostnames -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("qwen3-8b", "qwen3-8b"),  # a DNS label: itself
        ("llama-3.1-70b-instruct", "llama-3-1-70b-instruct"),  # dots to dashes
        ("7b.chat", "m-7b-chat"),  # a Service name starts with a letter
        # too long: its first 54 characters and 8 hex of sha256 of the whole name
        ("a" * 60 + ".b.c", "a" * 54 + "-" + hashlib.sha256(b"a" * 60 + b".b.c").hexdigest()[:8]),
    ],
)
def test_service_names_are_the_name_or_a_deterministic_label(name: str, want: str) -> None:
    got = names.service_name(name)
    assert names.is_service_name(got)
    assert got == want
    assert names.service_name(name) == got  # deterministic


@pytest.mark.parametrize(
    ("hostname", "foreign"),
    [
        ("chat.team-a.svc.cluster.local", False),
        ("chat.team-a.svc", False),
        ("chat.team-b.svc.cluster.local", True),
        ("chat.team-b.svc", True),
        ("*.team-b.svc.cluster.local", True),
        ("*.svc.cluster.local", True),
        ("*.cluster.local", True),
        ("*.local", True),
        ("*.svc", True),
        ("pod.chat.team-b.svc.cluster.local", True),  # a headless Service's pod names
        ("chat.example.com", False),
        ("*.example.com", False),
    ],
)
def test_names_under_another_namespaces_svc_domain_are_foreign(
    hostname: str, foreign: bool
) -> None:
    assert routes.foreign_in_cluster_name("team-a", hostname) is foreign


def test_no_grant_gives_a_namespace_another_namespaces_in_cluster_names() -> None:
    grant = Grant(hostnames=("*.local",))
    refusal = routes.permission_refusal(
        "team-a", "/team-a/x", ["chat.team-b.svc.cluster.local"], ("plnt-system", "plnt-gateway"),
        grant,
    )  # fmt: skip
    assert refusal is not None
    assert refusal.reason == routes.HOSTNAME_NOT_PERMITTED
    assert "names Services of another namespace" in refusal.message


def test_an_in_cluster_route_overlaps_no_route_without_hostnames() -> None:
    """Gateway API gives a matching hostname precedence: the in-cluster route takes only requests
    addressed to its own names, so it and another namespace's path route leave each other be."""
    ours = routes.Route("team-a", "chat.svc", routes.in_cluster_hostnames("chat", "team-a"), ("/",))
    theirs = routes.Route("team-b", "x", (), ("/team-b/x",))
    granted = routes.Route("team-b", "y", (), ("/api",), created="2000-01-01T00:00:00Z")
    assert routes.owner(ours, "/", [theirs, granted]) is None
    assert routes.owner(theirs, "/team-b/x", [ours]) is None
    assert routes.owner(granted, "/api", [ours]) is None
