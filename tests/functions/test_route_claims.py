"""Which paths, hostnames and Gateways a namespace's ModelService may claim, through the real
ModelService function.

Every row is a ModelService of team-a (one public endpoint of its own) with the InferenceGrants
and the other namespaces' HTTPRoutes the control plane holds: either the route is composed, or
nothing is and `Routed` is False with the reason and a message naming what is in the way (the
owner, for an overlap). ml-team's own route is `/ml-team/qwen3-8b` on plnt-system/plnt-gateway,
as examples/model-service composes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import routes, xp
from plnt_host import render

TEAM = "team-a"
SERVICE = render.compositions()[("modelplane.ai/v1alpha1", "ModelService")]
OLD, NEW = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"


def namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
    }


def grant(namespace: str = TEAM, **granted: Any) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceGrant",
        "metadata": {"name": f"{namespace}-routes"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "routes": granted,
        },
    }


def http_route(
    namespace: str,
    name: str,
    path: str,
    *,
    created: str = OLD,
    hostnames: list[str] | None = None,
    gateway: tuple[str, str] = ("plnt-system", "plnt-gateway"),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "namespace": gateway[0],
                "name": gateway[1],
            }
        ],
        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}]}],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": spec,
    }


ML_TEAM_ROUTE = http_route("ml-team", "qwen3-8b", "/ml-team/qwen3-8b", created=NEW)
BASE: list[dict[str, Any]] = [
    namespace(TEAM),
    namespace("ml-team"),
    {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "hosted", "namespace": TEAM, "labels": {"app": "hosted"}},
        "spec": {"url": "https://api.inference.example.com"},
    },
    ML_TEAM_ROUTE,
]


@dataclasses.dataclass
class Case:
    id: str
    spec: dict[str, Any]
    required: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    reason: str | None = None  # None: the route is composed
    message: str = ""
    ours_created: str | None = None  # team-a's route as observed, when it exists already


def service(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "chat", "namespace": TEAM},
        "spec": {"endpoints": [{"selector": {"matchLabels": {"app": "hosted"}}}], **spec},
    }


REFUSED = [
    Case(
        "another-namespaces-path",
        {"path": "/ml-team/qwen3-8b/v1"},
        reason="PathNotPermitted",
        message="spec.path /ml-team/qwen3-8b/v1 is outside /team-a/",
    ),
    Case("the-root", {"path": "/"}, reason="PathNotPermitted", message="outside /team-a/"),
    Case("a-prefix-sharing-letters", {"path": "/team-ab/x"}, reason="PathNotPermitted"),
    Case(
        "dot-segments",
        {"path": "/team-a/../ml-team/qwen3-8b"},
        reason="PathNotPermitted",
        message="a . or .. element",
    ),
    Case("percent-encoded", {"path": "/team-a/%2e%2e/ml-team"}, reason="PathNotPermitted"),
    Case("empty-segment", {"path": "/team-a//x"}, reason="PathNotPermitted"),
    Case(
        "another-teams-hostname",
        {"hostnames": ["ml.example.com"]},
        reason="HostnameNotPermitted",
        message="spec.hostnames ml.example.com is not granted to namespace team-a",
    ),
    Case(
        "a-wildcard-wider-than-granted",
        {"hostnames": ["*.example.com"]},
        [grant(hostnames=["*.team-a.example.com"])],
        reason="HostnameNotPermitted",
    ),
    Case(
        "any-gateway",
        {"gatewayRef": {"namespace": "ml-team", "name": "private"}},
        reason="GatewayNotPermitted",
        message="spec.gatewayRef ml-team/private is not granted to namespace team-a",
    ),
    Case(
        "a-grant-into-another-namespaces-prefix",
        {"path": "/ml-team/qwen3-8b/v1"},
        [grant(paths=["/ml-team"])],
        reason="RouteConflict",
        message=(
            "spec.path /ml-team/qwen3-8b/v1 overlaps HTTPRoute ml-team/qwen3-8b of namespace "
            "ml-team on Gateway plnt-system/plnt-gateway, which owns it"
        ),
    ),
    Case(
        "a-shared-prefix-held-by-an-older-route",
        {"path": "/shared/qwen/v1"},
        [
            grant(paths=["/shared"]),
            grant("ml-team", paths=["/shared"]),
            http_route("ml-team", "shared-qwen", "/shared/qwen", created=OLD),
        ],
        reason="RouteConflict",
        message="overlaps HTTPRoute ml-team/shared-qwen of namespace ml-team",
    ),
    Case(
        "a-granted-root-over-another-namespaces-home",
        {"path": "/", "hostnames": ["api.example.com"]},
        [grant(paths=["/"], hostnames=["api.example.com"])],
        reason="RouteConflict",
        message="overlaps HTTPRoute ml-team/qwen3-8b",
    ),
]

COMPOSED = [
    Case("the-default-path", {}),
    Case("under-its-own-namespace", {"path": "/team-a/chat/v1"}),
    Case("its-own-namespace-exactly", {"path": "/team-a"}),
    Case("a-granted-prefix", {"path": "/shared/x"}, [grant(paths=["/shared"])]),
    Case(
        "a-shared-prefix-it-held-first",
        {"path": "/shared/qwen/v1"},
        [
            grant(paths=["/shared"]),
            grant("ml-team", paths=["/shared"]),
            http_route("ml-team", "shared-qwen", "/shared/qwen", created=NEW),
        ],
        ours_created=OLD,
    ),
    Case(
        "a-granted-hostname",
        {"hostnames": ["api.team-a.example.com", "*.chat.team-a.example.com"]},
        [grant(hostnames=["*.team-a.example.com"])],
    ),
    Case(
        "a-granted-gateway-another-namespace-uses-too",
        {"path": "/shared/x", "gatewayRef": {"namespace": "gateways", "name": "edge"}},
        [
            grant(paths=["/shared"], gateways=[{"namespace": "gateways", "name": "edge"}]),
            http_route("ml-team", "shared-x", "/shared/x"),  # on plnt-gateway, not edge
        ],
    ),
    Case(
        "an-overlapping-path-on-other-hostnames",
        {"path": "/shared/x", "hostnames": ["a.example.com"]},
        [
            grant(paths=["/shared"], hostnames=["a.example.com"]),
            http_route("ml-team", "shared-x", "/shared", hostnames=["ml.example.com"]),
        ],
    ),
    Case(
        "another-namespaces-route-in-its-home-is-no-owner",
        {"path": "/team-a/x"},
        [http_route("team-b", "intruder", "/team-a/x", created=OLD)],
    ),
]


def render_case(case: Case) -> tuple[dict[str, dict], dict[str, fnv1.Condition], dict]:
    observed = []
    if case.ours_created:
        ours = http_route(TEAM, "chat", case.spec.get("path", "/team-a/chat"), created=OLD)
        ours["metadata"]["annotations"] = {xp.COMPOSITION_RESOURCE_NAME: "route"}
        observed.append(ours)
    state, _, conditions, _ = render.run_pipeline(
        SERVICE, service(case.spec), observed, [*BASE, *case.required]
    )
    desired = {n: xp.to_dict(r.resource) for n, r in state.resources.items()}
    status = xp.to_dict(state.composite.resource).get("status", {})
    return desired, {c.type: c for c in conditions}, status


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_a_claim_the_platform_did_not_grant_or_another_namespace_owns_is_refused(
    case: Case,
) -> None:
    desired, conditions, status = render_case(case)
    assert desired == {}, "nothing is composed: no route takes the traffic"
    routed = conditions["Routed"]
    assert (routed.status, routed.reason) == (fnv1.STATUS_CONDITION_FALSE, case.reason)
    assert case.message in routed.message
    assert "url" not in status


@pytest.mark.parametrize("case", COMPOSED, ids=[c.id for c in COMPOSED])
def test_a_claim_of_its_own_or_granted_and_unowned_is_composed(case: Case) -> None:
    desired, conditions, _ = render_case(case)
    route = desired["route"]
    (rule,) = route["spec"]["rules"]
    want = case.spec.get("path", "/team-a/chat")
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": want}}]
    assert route["spec"].get("hostnames", []) == case.spec.get("hostnames", [])
    assert conditions["Routed"].reason not in {c.reason for c in REFUSED}


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("/ml-team/qwen3-8b", "/ml-team/qwen3-8b/v1", True),
        ("/ml-team/qwen3-8b/", "/ml-team/qwen3-8b", True),
        ("/ml-team/qwen3-8b", "/ml-team/qwen3-8bx", False),
        ("/", "/anything", True),
        ("/a/b", "/a/c", False),
        (None, "/a", True),
    ],
)
def test_paths_overlap_element_by_element(a: str | None, b: str, overlap: bool) -> None:
    assert routes.paths_overlap(a, b) is overlap
    assert routes.paths_overlap(b, a) is overlap


@pytest.mark.parametrize(
    ("a", "b", "intersect"),
    [
        ([], ["ml.example.com"], True),
        (["*.example.com"], ["ml.example.com"], True),
        (["*.example.com"], ["a.b.example.com"], True),
        (["*.example.com"], ["*.ml.example.com"], True),
        (["*.example.com"], ["example.com"], False),
        (["a.example.com"], ["b.example.com"], False),
    ],
)
def test_hostnames_intersect_as_gateway_api_reads_them(
    a: list[str], b: list[str], intersect: bool
) -> None:
    assert routes.hostnames_intersect(a, b) is intersect
    assert routes.hostnames_intersect(b, a) is intersect
