"""function-model-service through its real run_function: weights, canary shares, backends.

Each case's whole response is in tests/functions/responses/model_service/; the tests named for a
rule read the field it is about. The weights math is checked on hand-worked tables and, with
hypothesis, on random services: integers that always sum to 1000, each within one unit of its
exact share, deterministic.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from collections.abc import Callable
from fractions import Fraction

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.model_service import fn, weights
from plnt import xp
from plnt_host import render
from tests.functions import tables
from tests.support import request

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples/model-service"
SCENARIO = render.load_scenario(EXAMPLE)


@dataclasses.dataclass
class Out:
    desired: dict[str, dict]
    status: dict
    conditions: dict[str, fnv1.Condition]
    warnings: list[str]


COMPOSITION = render.compositions()[("modelplane.ai/v1alpha1", "ModelService")]


def run(xr: dict, required: list[dict], observed: list[dict] | None = None) -> Out:
    """The Composition's pipeline, each step re-run with what it required until stable, as
    Crossplane does (test_model_service_in_cluster's tests run it)."""
    state, results, conditions, _ = render.run_pipeline(COMPOSITION, xr, observed or [], required)
    return Out(
        desired={n: xp.to_dict(r.resource) for n, r in state.resources.items()},
        status=xp.to_dict(state.composite.resource).get("status", {}),
        conditions={c.type: c for c in conditions},
        warnings=[r.message for _, r in results if r.severity == fnv1.SEVERITY_WARNING],
    )


def weights_of(out: Out) -> dict[str, int]:
    return {w["endpoint"]: w["weight"] for w in out.status["weights"]}


# --- the cases: the example, changed -----------------------------------------------------------


def required_with(change: Callable[[list[dict]], list[dict] | None]) -> list[dict]:
    """The example's required resources, changed in place or replaced by what `change` returns."""
    required = copy.deepcopy(SCENARIO.required)
    return change(required) or required


def the(kind: str, required: list[dict]) -> dict:
    (obj,) = [o for o in required if o["kind"] == kind]
    return obj


def without(names_or_kinds: set[str]) -> list[dict]:
    return [
        o
        for o in SCENARIO.required
        if o["kind"] not in names_or_kinds and o["metadata"]["name"] not in names_or_kinds
    ]


def only_canary_revision(required: list[dict]) -> None:
    deployment = the("ModelDeployment", required)
    deployment["status"]["revisions"] = {"canary": deployment["status"]["revisions"]["canary"]}


def canary_run(spec_run: str) -> Callable[[list[dict]], None]:
    """No canary revision; the deployment took up run r-1 and its spec names `spec_run`."""

    def change(required: list[dict]) -> None:
        deployment = the("ModelDeployment", required)
        deployment["status"]["revisions"].pop("canary")
        deployment["spec"].setdefault("canary", {})["runId"] = spec_run
        deployment["status"].setdefault("canary", {})["run"] = "r-1"

    return change


def gateway(addresses: object = None, *, status: bool = True) -> dict:
    gw = copy.deepcopy(the("Gateway", SCENARIO.required))
    if not status:
        del gw["status"]
    elif addresses is not None:
        gw["status"]["addresses"] = addresses
    return gw


def hosted_endpoint_with(spec: dict) -> list[dict]:
    hosted = copy.deepcopy(
        next(o for o in SCENARIO.required if o["metadata"]["name"] == "hosted-qwen3-8b")
    )
    hosted["spec"] = spec
    return [*without({"hosted-qwen3-8b"}), hosted]


def with_deployment_alone() -> dict:
    xr = copy.deepcopy(SCENARIO.xr)
    xr["spec"]["endpoints"] = xr["spec"]["endpoints"][:1]
    return xr


REFUSED_ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {
        "name": "qwen3-8b",
        "namespace": "ml-team",
        "annotations": {xp.COMPOSITION_RESOURCE_NAME: "route"},
    },
    "status": {
        "parents": [
            {
                "parentRef": {"name": "plnt-gateway", "namespace": "plnt-system"},
                "controllerName": "istio.io/gateway-controller",
                "conditions": [
                    {
                        "type": "Accepted",
                        "status": "False",
                        "reason": "NotAllowedByListeners",
                        "message": "no listener allows routes from namespace ml-team",
                    }
                ],
            }
        ]
    },
}


def with_granted_hostnames_and_path() -> dict:
    xr = copy.deepcopy(SCENARIO.xr)
    xr["spec"]["hostnames"] = ["models.example.com"]
    xr["spec"]["path"] = "/qwen"
    xr["spec"]["gatewayRef"] = {"name": "edge", "namespace": "gateways"}
    return xr


GRANT = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "InferenceGrant",
    "metadata": {"name": "ml-team"},
    "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml-team"}},
        "routes": {
            "paths": ["/qwen"],
            "hostnames": ["*.example.com"],
            "gateways": [{"namespace": "gateways", "name": "edge"}],
        },
    },
}

# Endpoints pointing inside the platform: (case, url, why the warning gives).
INSIDE = [
    (
        "endpoint-in-cluster-dns",
        "http://kube-dns.kube-system.svc.cluster.local:53",
        "an in-cluster or local host name",
    ),
    ("endpoint-localhost", "http://localhost:15000", "an in-cluster or local host name"),
    (
        "endpoint-loopback",
        "http://127.0.0.1:15000",
        "an address inside the platform (127.0.0.1, in 127.0.0.0/8)",
    ),
    (
        "endpoint-link-local",
        "http://169.254.169.254/latest",
        "an address inside the platform (169.254.169.254, in 169.254.0.0/16)",
    ),
]
# Gateway statuses of the wrong shape: (case, status.addresses).
BAD_ADDRESSES = [
    ("gateway-addresses-true", True),
    ("gateway-addresses-null", [None]),
    ("gateway-address-a-number", [{"value": 7}]),
    ("gateway-addresses-a-number", 3),
]


def our_endpoints(required: list[dict]) -> list[dict]:
    return [o for o in required if o["kind"] == "ModelEndpoint" and fn.deployment_of(o)]


def stable_endpoint_names() -> list[str]:
    """The example's endpoints of its stable revision, left behind by a promotion."""
    promoted = the("ModelDeployment", SCENARIO.required)["status"]["revisions"]["canary"]
    return [
        o["metadata"]["name"]
        for o in our_endpoints(SCENARIO.required)
        if o["metadata"]["labels"].get("modelplane.ai/revision") != promoted
    ]


def promoted(required: list[dict]) -> None:
    deployment = the("ModelDeployment", required)
    deployment["status"]["revisions"] = {"stable": deployment["status"]["revisions"]["canary"]}


def promoted_old_gone(required: list[dict]) -> list[dict]:
    promoted(required)
    return [o for o in required if o["metadata"]["name"] not in stable_endpoint_names()]


def promoted_none_up(required: list[dict]) -> list[dict]:
    promoted(required)
    old = stable_endpoint_names()
    return [
        o
        for o in required
        if o["kind"] != "ModelEndpoint" or o["metadata"]["name"] in old or not fn.deployment_of(o)
    ]


def service_case(
    name: str, xr: dict = SCENARIO.xr, required: list[dict] = SCENARIO.required, observed=()
) -> tables.Case:
    return tables.Case(name, request(xr, observed), tuple(required))


TABLE = tables.Table(
    "model_service",
    fn.run_function,
    (
        service_case("example"),
        service_case("deployment-absent", required=without({"ModelDeployment"})),
        service_case("no-stable-revision", required=required_with(only_canary_revision)),
        service_case(
            "no-stable-revision-selected-alone",
            with_deployment_alone(),
            required_with(only_canary_revision),
        ),
        service_case("canary-run-taken-up", required=required_with(canary_run("r-1"))),
        service_case("canary-run-not-taken-up", required=required_with(canary_run("r-2"))),
        service_case("replica-degraded", required=without({"qwen3-8b-lab-l4-0"})),
        service_case("gateway-without-status", required=[gateway(status=False)]),
        service_case("gateway-missing", required=without({"Gateway"})),
        service_case("route-refused", observed=[REFUSED_ROUTE]),
        service_case(
            "hostnames-and-path-granted",
            with_granted_hostnames_and_path(),
            [*SCENARIO.required, GRANT],
        ),
        service_case("endpoint-invalid", required=hosted_endpoint_with({"url": "ftp://nope"})),
        *(
            service_case(name, required=hosted_endpoint_with({"url": url}))
            for name, url, _ in INSIDE
        ),
        service_case("revision-promoted", required=required_with(promoted)),
        service_case("revision-promoted-old-gone", required=required_with(promoted_old_gone)),
        service_case("revision-promoted-none-up", required=required_with(promoted_none_up)),
        *(
            service_case(name, required=[*without({"Gateway"}), gateway(addresses)])
            for name, addresses in BAD_ADDRESSES
        ),
    ),
)
response = TABLE.response_named


def outcome(name: str) -> Out:
    rsp = response(name)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return Out(
        desired={n: xp.to_dict(r.resource) for n, r in rsp.desired.resources.items()},
        status=xp.to_dict(rsp.desired.composite.resource).get("status", {}),
        conditions={c.type: c for c in rsp.conditions},
        warnings=[r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING],
    )


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


# --- the example --------------------------------------------------------------------------


def test_example_splits_by_group_weight_and_canary_percent() -> None:
    out = outcome("example")
    assert weights_of(out) == {
        "hosted-qwen3-8b": 333,
        "qwen3-8b-coreweave-h100-0": 317,
        "qwen3-8b-lab-l4-0": 317,
        "qwen3-8b-coreweave-h100-1": 33,
    }
    percents = {w["endpoint"]: w["percent"] for w in out.status["weights"]}
    assert percents["qwen3-8b-coreweave-h100-1"] == 3.3
    assert out.status["url"] == "http://198.51.100.7/ml-team/qwen3-8b"
    assert out.conditions["Routed"].status == fnv1.STATUS_CONDITION_TRUE


def test_the_route_carries_the_same_weights_as_status() -> None:
    out = outcome("example")
    route = out.desired["route"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "plnt-gateway",
            "namespace": "plnt-system",
        }
    ]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/ml-team/qwen3-8b"}}]
    by_backend = {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}
    assert sum(by_backend.values()) == 1000
    assert by_backend == {f"ep-qwen3-8b-{name}": w for name, w in weights_of(out).items()}


def test_backends_per_kind_of_host() -> None:
    out = outcome("example").desired
    hosted = out["ep-qwen3-8b-hosted-qwen3-8b-service"]
    assert hosted["spec"] == {
        "type": "ExternalName",
        "externalName": "api.inference.example.com",
        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "appProtocol": "https"}],
    }
    tls = out["ep-qwen3-8b-hosted-qwen3-8b-tls"]
    assert tls["kind"] == "BackendTLSPolicy"
    assert tls["spec"]["validation"] == {
        "hostname": "api.inference.example.com",
        "wellKnownCACertificates": "System",
    }
    ip_backed = out["ep-qwen3-8b-qwen3-8b-coreweave-h100-0-service"]
    assert "type" not in ip_backed["spec"] and "selector" not in ip_backed["spec"]
    eps = out["ep-qwen3-8b-qwen3-8b-coreweave-h100-0-endpointslice"]
    assert eps["metadata"]["labels"] == {
        "kubernetes.io/service-name": "ep-qwen3-8b-qwen3-8b-coreweave-h100-0"
    }
    assert eps["endpoints"][0]["addresses"] == ["203.0.113.10"]
    dns_backed = out["ep-qwen3-8b-qwen3-8b-lab-l4-0-service"]
    assert dns_backed["spec"]["externalName"] == "gateway.lab-l4.example.internal"
    assert "ep-qwen3-8b-qwen3-8b-lab-l4-0-endpointslice" not in out
    refs = {r["name"]: r for r in out["route"]["spec"]["rules"][0]["backendRefs"]}
    ip_rewrite = refs["ep-qwen3-8b-qwen3-8b-coreweave-h100-0"]["filters"][0]["urlRewrite"]
    assert ip_rewrite == {
        "path": {
            "type": "ReplacePrefixMatch",
            "replacePrefixMatch": "/ml-team/qwen3-8b-coreweave-h100-0/",
        }
    }
    hosted_rewrite = refs["ep-qwen3-8b-hosted-qwen3-8b"]["filters"][0]["urlRewrite"]
    assert hosted_rewrite["hostname"] == "api.inference.example.com"
    assert hosted_rewrite["path"]["replacePrefixMatch"] == "/"


def test_no_credentials_reach_anything_composed_or_status() -> None:
    out = outcome("example")
    text = yaml.safe_dump([out.desired, out.status])
    assert "hosted-inference-api-key" not in text
    assert "token" not in text


def test_without_a_deployment_its_canary_endpoints_count_as_stable() -> None:
    got = weights_of(outcome("deployment-absent"))
    assert got["qwen3-8b-coreweave-h100-1"] == got["qwen3-8b-coreweave-h100-0"] == 222
    assert sum(got.values()) == 1000


def test_a_deployment_without_a_stable_revision_gets_no_traffic() -> None:
    """Its first revision is being smoke-tested (or failed): nothing it runs has passed the
    latency gate, so its endpoints are held and the other group takes everything."""
    out = outcome("no-stable-revision")
    assert weights_of(out) == {"hosted-qwen3-8b": 1000}
    assert not [n for n in out.desired if n.startswith("ep-qwen3-8b-qwen3-8b-")]  # no backends

    # with only the deployment selected, nothing is routed, and the condition says why
    out = outcome("no-stable-revision-selected-alone")
    assert out.status["weights"] == []
    cond = out.conditions["Routed"]
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "NoEndpoints")
    assert cond.message == (
        "3 endpoint(s) of a first rollout wait for the latency gate (qwen3-8b-coreweave-h100-0, "
        "qwen3-8b-coreweave-h100-1, qwen3-8b-lab-l4-0); the route answers 503"
    )


def test_a_canary_in_flight_asks_to_be_called_again_soon() -> None:
    """Its endpoints and the gate's verdict are required resources, which Crossplane does not
    watch: while a routed deployment rolls out (a canary revision, or a canary run it has not
    taken up yet), the response's TTL is CANARY_TTL_S (else the SDK's default), so the canary
    takes its share before a fast gate promotes it."""

    def ttl(name: str) -> float:
        return response(name).meta.ttl.ToMilliseconds() / 1000

    assert ttl("example") == fn.CANARY_TTL_S
    assert ttl("canary-run-taken-up") > 10 * fn.CANARY_TTL_S
    # a new run in the spec, before the deployment has taken it up (no canary revision yet)
    assert ttl("canary-run-not-taken-up") == fn.CANARY_TTL_S


def test_a_degraded_replicas_endpoint_is_absent_and_its_share_moves() -> None:
    got = weights_of(outcome("replica-degraded"))
    assert "qwen3-8b-lab-l4-0" not in got
    # exact 333.3 / 633.3 / 33.3: the unit left over goes to the first name on a tie
    assert got == {
        "hosted-qwen3-8b": 334,
        "qwen3-8b-coreweave-h100-0": 633,
        "qwen3-8b-coreweave-h100-1": 33,
    }


def test_no_endpoints_means_not_routed_and_a_route_without_backends() -> None:
    out = outcome("gateway-without-status")
    cond = out.conditions["Routed"]
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == "NoEndpoints"
    assert out.desired["route"]["spec"]["rules"][0]["backendRefs"] == []
    assert out.status["weights"] == []
    assert "url" not in out.status, "no Gateway address and no hostname: no URL yet"


def test_a_missing_gateway_is_named_in_routed() -> None:
    """The control-plane Gateway is a prerequisite: waiting on it says so, never silently."""
    out = outcome("gateway-missing")
    cond = out.conditions["Routed"]
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == "MissingDependency"
    assert cond.message == (
        "Gateway plnt-system/plnt-gateway not found: the route has no Gateway to attach to. "
        "plnt does not create the control-plane Gateway: create it (docs/model-service.md) or "
        "set spec.gatewayRef to one that exists"
    )
    assert out.desired["route"]["spec"]["parentRefs"][0]["name"] == "plnt-gateway"
    assert sum(weights_of(out).values()) == weights.TOTAL  # the route is ready to attach


def test_a_route_the_gateway_refuses_is_named_in_routed() -> None:
    out = outcome("route-refused")
    cond = out.conditions["Routed"]
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "NotAccepted")
    assert cond.message == (
        "Gateway plnt-system/plnt-gateway does not accept the route: NotAllowedByListeners: "
        "no listener allows routes from namespace ml-team"
    )


def test_hostnames_and_path_override_the_defaults_where_the_platform_grants_them() -> None:
    out = outcome("hostnames-and-path-granted")
    route = out.desired["route"]
    assert route["spec"]["hostnames"] == ["models.example.com"]
    assert route["spec"]["parentRefs"][0]["name"] == "edge"
    assert route["spec"]["parentRefs"][0]["namespace"] == "gateways"
    assert out.status["url"] == "http://models.example.com/qwen"


def test_an_invalid_hand_made_endpoint_gets_no_traffic_and_a_warning() -> None:
    out = outcome("endpoint-invalid")
    assert "hosted-qwen3-8b" not in weights_of(out)
    assert out.warnings == ["ModelEndpoint hosted-qwen3-8b has an invalid spec; it gets no traffic"]


def test_everything_composed_is_owned_by_the_service_in_its_namespace() -> None:
    out = render.render(SCENARIO)
    assert len(out.composed) == 8
    for obj in out.composed:
        assert obj["metadata"]["namespace"] == "ml-team"
        (owner,) = [r for r in obj["metadata"]["ownerReferences"] if r["controller"]]
        assert (owner["kind"], owner["name"]) == ("ModelService", "qwen3-8b")


# --- weights math -----------------------------------------------------------------------------

E = weights.Endpoint
G = weights.Group

WEIGHT_CASES = [
    ("one endpoint", [G(1, (E("a"),))], {}, {"a": 1000}),
    ("three equal", [G(1, (E("a"), E("b"), E("c")))], {}, {"a": 334, "b": 333, "c": 333}),
    ("groups 3:1", [G(3, (E("a"),)), G(1, (E("b"),))], {}, {"a": 750, "b": 250}),
    (
        "canary 5% of one deployment",
        [G(1, (E("s1", "d"), E("s2", "d"), E("c1", "d", canary=True)))],
        {"d": 5},
        {"s1": 475, "s2": 475, "c1": 50},
    ),
    (
        "canary without a percent is stable",
        [G(1, (E("s1", "d"), E("c1", "d", canary=True)))],
        {},
        {"s1": 500, "c1": 500},
    ),
    (
        "only canary endpoints take the whole share",
        [G(1, (E("c1", "d", canary=True),))],
        {"d": 10},
        {"c1": 1000},
    ),
    ("an empty group gives its share away", [G(5, ()), G(1, (E("a"),))], {}, {"a": 1000}),
    (
        "a zero-weight group gets nothing",
        [G(0, (E("z"),)), G(1, (E("a"),))],
        {},
        {"z": 0, "a": 1000},
    ),
    ("selected twice adds up", [G(1, (E("a"), E("b"))), G(1, (E("a"),))], {}, {"a": 750, "b": 250}),
    ("nothing selected", [G(1, ())], {}, {}),
]


@pytest.mark.parametrize(
    ("groups", "canary", "want"), [c[1:] for c in WEIGHT_CASES], ids=[c[0] for c in WEIGHT_CASES]
)
def test_weights_table(groups, canary, want) -> None:
    assert weights.integer_weights(weights.shares(groups, canary)) == want


endpoint_names = st.sampled_from([f"ep{i}" for i in range(12)])
endpoints = st.builds(
    E, endpoint_names, st.one_of(st.none(), st.sampled_from(["d1", "d2"])), st.booleans()
)
groups = st.lists(
    st.builds(
        G,
        st.integers(0, 1000),
        st.lists(endpoints, max_size=6, unique_by=lambda e: e.name).map(tuple),
    ),
    min_size=1,
    max_size=5,
)
percents = st.fixed_dictionaries({"d1": st.integers(0, 100), "d2": st.integers(0, 100)})


@settings(max_examples=300, deadline=None)
@given(groups, percents)
def test_weights_always_sum_to_the_total_and_stay_within_one_unit(gs, pct) -> None:
    # an endpoint is one object: the same name has the same labels in every group
    first = {}
    gs = [G(g.weight, tuple(first.setdefault(e.name, e) for e in g.endpoints)) for g in gs]
    exact = weights.shares(gs, pct)
    got = weights.integer_weights(exact)
    assert set(got) == {e.name for g in gs for e in g.endpoints}
    live = any(g.weight > 0 and g.endpoints for g in gs)
    assert sum(got.values()) == (weights.TOTAL if live else 0)
    for name, share in exact.items():
        assert abs(got[name] - share * weights.TOTAL) < 1
        assert got[name] >= 0
    assert weights.integer_weights(dict(reversed(list(exact.items())))) == got
    assert sum(exact.values()) == (Fraction(1) if live else 0)


@pytest.mark.parametrize(("name", "why"), [(name, why) for name, _, why in INSIDE])
def test_endpoints_pointing_inside_the_cluster_or_at_the_proxy_are_refused(
    name: str, why: str
) -> None:
    out = outcome(name)
    assert "hosted-qwen3-8b" not in weights_of(out)
    assert not [n for n in out.desired if "hosted" in n]
    (warning,) = out.warnings
    assert warning.startswith(f"ModelEndpoint hosted-qwen3-8b points at {why}")


@pytest.mark.parametrize(
    ("canary", "want"),
    [
        ({"trafficPercent": 5}, 5),
        ({"trafficPercent": 100.0}, 100),  # a protobuf Struct number
        ({"trafficPercent": 150}, 0),  # past the XRD's bounds: no split, never a negative share
        ({"trafficPercent": 0}, 0),
        ({"trafficPercent": True}, 0),
        ({"trafficPercent": "5"}, 0),
        ({}, 0),
        ("canary", 0),
    ],
)
def test_a_deployment_canary_percent_is_read_within_the_xrd_bounds(
    canary: object, want: int
) -> None:
    from functions.model_service import fn

    assert fn._canary_percent({"spec": {"canary": canary}}) == want


def test_a_revision_promoted_away_takes_no_share_while_its_replicas_go() -> None:
    """After a promotion the old revision's endpoints linger while its replicas are deleted;
    counted as stable they took half the deployment's share (seen live). They take none while an
    endpoint of a revision the deployment reports is there, and keep serving if none is."""
    old = stable_endpoint_names()
    assert old, "the example has endpoints of the stable revision"
    got = weights_of(outcome("revision-promoted"))  # the gate passed: promoted
    assert not set(old) & set(got), got
    assert sum(got.values()) == 1000
    # exactly as if the old endpoints were already gone
    assert got == weights_of(outcome("revision-promoted-old-gone"))

    # with no endpoint of the promoted revision up yet, the old ones keep serving
    got = weights_of(outcome("revision-promoted-none-up"))
    assert set(old) <= set(got) and all(got[n] > 0 for n in old), got


@pytest.mark.parametrize("name", [name for name, _ in BAD_ADDRESSES])
def test_a_gateway_status_of_the_wrong_shape_has_no_address(name: str) -> None:
    """The Gateway is anyone's to write (a fuzzed fleet found these crashing)."""
    out = outcome(name)
    assert "url" not in out.status, "no usable Gateway address and no hostname: no URL yet"
    assert sum(weights_of(out).values()) == weights.TOTAL
