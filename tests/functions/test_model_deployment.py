"""The ModelDeployment function end to end through `plnt render`: placement, pins, status.

Each case's whole response is in tests/functions/responses/model_deployment/; the tests named for
a rule read the field it is about.
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import fn
from plnt import cluster_health, xp
from plnt.capacity import binding
from plnt.revision import revision
from plnt_host import render
from tests.functions import tables
from tests.support import binder_annotation
from tests.support import request as observing

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FLEET = render.load_folder(EXAMPLES / "fleet")
# Only this function's step: the canary gate (the next step) is tested on its own.
SCHEDULE_ONLY = {
    key: {**comp, "spec": {**comp["spec"], "pipeline": comp["spec"]["pipeline"][:1]}}
    for key, comp in render.compositions().items()
    if key == ("modelplane.ai/v1alpha1", "ModelDeployment")
}


def scenario(name: str) -> render.Scenario:
    return render.load_scenario(EXAMPLES / name)


def run(
    xr: dict[str, Any],
    observed: list[dict[str, Any]] = (),
    required: list[dict[str, Any]] | None = None,
) -> render.Rendered:
    s = render.Scenario(
        xr=xr,
        required=FLEET if required is None else required,
        observed=list(observed),
        path=EXAMPLES,
    )
    return render.render(s, catalogue=SCHEDULE_ONLY)


def condition(out: render.Rendered, typ: str) -> dict[str, Any]:
    return next(c for c in out.xr["status"]["conditions"] if c["type"] == typ)


def of_kind(out: render.Rendered, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in out.composed if o["kind"] == kind}


def as_observed(objs: list[dict[str, Any]], ready: bool = True) -> list[dict[str, Any]]:
    """What Crossplane would observe after applying `objs`."""
    out = []
    for obj in objs:
        seen = copy.deepcopy(obj)
        seen["metadata"].pop("ownerReferences", None)
        seen["status"] = {"conditions": [{"type": "Ready", "status": str(ready)}]}
        out.append(seen)
    return out


# --- the cases: the examples, changed, and a second reconcile ----------------------------------

# The failover grace periods' clock, pinned so that a response never depends on when it runs:
# well after every outage the examples and fleet record.
NOW = cluster_health.seconds("2026-06-01T00:00:00Z") or 0.0


def run_function_at_now(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    clock = fn.clock
    fn.clock = lambda: NOW
    try:
        return fn.run_function(req)
    finally:
        fn.clock = clock


def example_case(name: str) -> tables.Case:
    s = scenario(name)
    return tables.Case(name, observing(s.xr, s.observed), tuple(s.required))


def qwen3_with(change: Any) -> dict[str, Any]:
    xr = copy.deepcopy(scenario("deploy-qwen3-8b").xr)
    change(xr["spec"])
    return xr


def qwen3_case(
    name: str,
    xr: dict[str, Any],
    observed: list[dict[str, Any]] = (),
    required: list[dict[str, Any]] = FLEET,
) -> tables.Case:
    return tables.Case(name, observing(xr, observed), tuple(required))


def invalid_selector(spec: dict[str, Any]) -> None:
    devices = spec["engines"][0]["members"][0]["nodeSelector"]["devices"]
    devices[0]["selectors"] = [{"cel": "device.attributes[ == "}]


@functools.cache
def qwen3_first() -> render.Rendered:
    return render.render(scenario("deploy-qwen3-8b"))


def qwen3_applied(ready: bool = True) -> list[dict[str, Any]]:
    """What Crossplane observes once the example's first render is applied."""
    return as_observed(qwen3_first().composed, ready)


def _with_workloads_reason(
    observed: list[dict[str, Any]], reasons: dict[int, tuple[bool, str]]
) -> list[dict[str, Any]]:
    """`observed` with the i-th ModelReplica (by name) Ready or not, with that WorkloadsReady."""
    replicas = sorted(
        (o for o in observed if o["kind"] == "ModelReplica"), key=lambda o: o["metadata"]["name"]
    )
    for i, (ready, reason) in reasons.items():
        replicas[i]["status"]["conditions"] = [
            {"type": "Ready", "status": str(ready)},
            {"type": "WorkloadsReady", "status": str(ready), "reason": reason},
        ]
    return observed


# ReplicasReady, the i-th replica Ready or not with that WorkloadsReady reason:
# (reasons, status, reason, message of the replicas' names in order)
PULLING = [
    pytest.param(
        {0: (False, "PullingWeights")},
        "False",
        "PullingWeights",
        "0 of 3 replicas ready; pulling weights: {0}",
        id="one-pulling",
    ),
    pytest.param(
        {0: (True, "Available"), 1: (False, "PullingWeights"), 2: (False, "PullingWeights")},
        "False",
        "PullingWeights",
        "1 of 3 replicas ready; pulling weights: {1}, {2}",
        id="two-pulling-one-ready",
    ),
    pytest.param(
        {0: (False, "Waiting")},
        "False",
        "Waiting",
        "0 of 3 replicas ready",
        id="none-pulling",
    ),
    pytest.param(
        {0: (False, "Starting"), 1: (False, "Starting"), 2: (False, "Starting")},
        "False",
        "Starting",
        "0 of 3 replicas ready; engines starting: {0}, {1}, {2}",
        id="all-starting",
    ),
    pytest.param(
        {0: (False, "Starting"), 1: (False, "Waiting"), 2: (True, "Available")},
        "False",
        "Waiting",
        "1 of 3 replicas ready",
        id="one-starting-one-not-yet",
    ),
    pytest.param(
        {0: (False, "Starting"), 1: (False, "PullingWeights"), 2: (False, "Starting")},
        "False",
        "PullingWeights",
        "0 of 3 replicas ready; pulling weights: {1}",
        id="pulling-wins-over-starting",
    ),
    pytest.param(
        {0: (True, "PullingWeights")},  # a stale reason on a Ready replica is not pulling
        "False",
        "Waiting",
        "1 of 3 replicas ready",
        id="ready-replica-ignored",
    ),
]
STATUS = {"True": fnv1.STATUS_CONDITION_TRUE, "False": fnv1.STATUS_CONDITION_FALSE}


def _answered(objs: list[dict[str, Any]], answer: dict[str, dict[str, str]]) -> list[dict]:
    """Observed replicas with the binder's annotations, by replica name."""
    out = as_observed(objs)
    for obj in out:
        obj["metadata"].setdefault("annotations", {}).update(
            answer.get(obj["metadata"]["name"], {})
        )
    return out


def binder_answers() -> dict[str, dict[str, str]]:
    """The binder committing each replica of the example's first render."""
    replicas = of_kind(qwen3_first(), "ModelReplica")
    return {n: {binding.BINDING: binder_annotation(o)} for n, o in replicas.items()}


def lost_on_lab_l4() -> str:
    replicas = of_kind(qwen3_first(), "ModelReplica")
    return next(n for n, o in replicas.items() if o["spec"]["clusterName"] == "lab-l4")


def refused_on_lab_l4() -> dict[str, dict[str, str]]:
    lost = lost_on_lab_l4()
    state = binding.state_of(of_kind(qwen3_first(), "ModelReplica")[lost])
    answers = binder_answers()
    answers[lost] = {
        binding.REFUSED: binding.refusal_json(state.digest, "pool l4: not enough free gpu")
    }
    return answers


def over_committed_first() -> dict[str, dict[str, str]]:
    answers = binder_answers()
    victim = sorted(answers)[0]
    answers[victim][binding.OVER_COMMITTED] = "pool h100: 1 of its 1 pods no longer fit"
    return answers


QWEN3 = scenario("deploy-qwen3-8b").xr
TABLE = tables.Table(
    "model_deployment",
    run_function_at_now,
    (
        *(example_case(name) for name in ("deploy-qwen3-8b", "deploy-shortfall", "deploy-gang")),
        *(example_case(name) for name in ("deploy-pd", "deploy-pinned")),
        qwen3_case("qwen3-applied", QWEN3, qwen3_applied()),
        qwen3_case(
            "qwen3-scaled-down", qwen3_with(lambda s: s.update(replicas=1)), qwen3_applied()
        ),
        qwen3_case(
            "shortfall-without-research",
            scenario("deploy-shortfall").xr,
            required=[o for o in FLEET if o["kind"] != "ModelReplica"],
        ),
        qwen3_case("invalid-selector", qwen3_with(invalid_selector)),
        qwen3_case(
            "no-matching-clusters",
            qwen3_with(
                lambda s: s.update(
                    clusterSelector={"matchLabels": {"modelplane.ai/region": "mars"}}
                )
            ),
        ),
        qwen3_case(
            "cluster-selector-expressions",
            qwen3_with(
                lambda s: s.update(
                    clusterSelector={
                        "matchExpressions": [
                            {
                                "key": "modelplane.ai/provider",
                                "operator": "In",
                                "values": ["coreweave"],
                            }
                        ]
                    }
                )
            ),
        ),
        qwen3_case("twenty-replicas", qwen3_with(lambda s: s.update(replicas=20))),
        *(
            qwen3_case(
                f"pulling-{case.id}",
                QWEN3,
                _with_workloads_reason(qwen3_applied(ready=False), case.values[0]),
            )
            for case in PULLING
        ),
        qwen3_case("binder-committed", QWEN3, _answered(qwen3_first().composed, binder_answers())),
        qwen3_case("binder-refused", QWEN3, _answered(qwen3_first().composed, refused_on_lab_l4())),
        qwen3_case(
            "binder-over-committed",
            QWEN3,
            _answered(qwen3_first().composed, over_committed_first()),
        ),
    ),
)
response = TABLE.response_named


def composed(rsp: fnv1.RunFunctionResponse, kind: str) -> dict[str, dict[str, Any]]:
    objs = (xp.to_dict(r.resource) for r in rsp.desired.resources.values())
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def condition_of(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    (cond,) = [c for c in rsp.conditions if c.type == typ]
    return cond


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_qwen3_spreads_three_replicas_over_three_clusters() -> None:
    out = render.render(scenario("deploy-qwen3-8b"))
    replicas = of_kind(out, "ModelReplica")
    assert sorted(r["spec"]["clusterName"] for r in replicas.values()) == [
        "coreweave-h100",
        "coreweave-l40s",
        "lab-l4",
    ]
    rev = revision(scenario("deploy-qwen3-8b").xr["spec"])
    assert sorted(replicas) == [f"qwen3-8b-{rev[:6]}-{i}" for i in range(3)]
    on_l4 = next(r for r in replicas.values() if r["spec"]["clusterName"] == "lab-l4")
    member = on_l4["spec"]["engines"][0]["members"][0]
    assert member["nodePoolName"] == "l4"
    assert "nodeSelector" not in member
    assert member["deviceRequests"] == [
        {
            "name": "gpu",
            "count": 1,
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [
                {"cel": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'}
            ],
        }
    ]
    labels = on_l4["metadata"]["labels"]
    assert {k: labels[k] for k in labels if k.startswith("modelplane.ai/")} == {
        "modelplane.ai/deployment": "qwen3-8b",
        "modelplane.ai/revision": rev,
        "modelplane.ai/cluster": "lab-l4",
    }
    endpoints = of_kind(out, "ModelEndpoint")
    assert sorted(endpoints) == sorted(replicas)
    ep = endpoints[on_l4["metadata"]["name"]]
    assert ep["spec"]["url"] == f"http://198.51.100.7/ml-team/{on_l4['metadata']['name']}"
    assert ep["metadata"]["labels"]["modelplane.ai/api"] == "OpenAI"
    assert ep["metadata"]["labels"]["modelplane.ai/cluster"] == "lab-l4"
    status = out.xr["status"]
    assert status["replicas"] == {"total": 3, "ready": 0}
    assert status["revisions"] == {"stable": rev}
    assert [p["cluster"] for p in status["placements"]] == [
        replicas[p["replica"]]["spec"]["clusterName"] for p in status["placements"]
    ]
    scheduled = condition(out, "ReplicasScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("True", "Scheduled")
    assert scheduled["message"] == "placed 3 of 3 replicas"
    assert condition(out, "Ready")["status"] == "False"


def test_shortfall_reports_placed_count_and_per_cluster_reasons() -> None:
    out = render.render(scenario("deploy-shortfall"))
    replicas = of_kind(out, "ModelReplica")
    # four H100 nodes, one held by the research team's replica: three fit
    assert [r["spec"]["clusterName"] for r in replicas.values()] == ["coreweave-h100"] * 3
    cond = condition(out, "ReplicasScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientCapacity")
    msg = cond["message"]
    assert msg.startswith("placed 3 of 6 replicas; ")
    assert "cluster coreweave-h100: engine llama-405b: " in msg
    # 8-GPU pods ran out of GPUs, said in devices
    assert "pool h100: not enough free gpu (need 8 on one node, 0 of 32 free in the pool)" in msg
    assert "cluster coreweave-l40s: " in msg and "false on device gpu" in msg
    assert "cluster lab-l4: " in msg and "device gpu has 1 per node, 8 requested" in msg
    assert out.xr["status"]["replicas"]["total"] == 3


def test_gang_lands_on_the_h100_cluster_with_both_members_pinned() -> None:
    out = render.render(scenario("deploy-gang"))
    (replica,) = of_kind(out, "ModelReplica").values()
    assert replica["spec"]["clusterName"] == "coreweave-h100"
    members = replica["spec"]["engines"][0]["members"]
    assert [(m["role"], m["nodePoolName"]) for m in members] == [
        ("Leader", "h100"),
        ("Worker", "h100"),
    ]
    assert all(m["deviceRequests"][0]["count"] == 8 for m in members)
    assert all(len(m["deviceRequests"][0]["selectors"]) == 2 for m in members)
    # the demand the binder commits; gang pods take a whole node each
    assert json.loads(replica["metadata"]["annotations"]["plnt.work/pool-demand"]) == {
        "h100": [[1, {"device:gpu": 8}, True], [1, {"device:gpu": 8}, True]]
    }


def test_prefill_decode_engines_share_one_cluster() -> None:
    out = render.render(scenario("deploy-pd"))
    (replica,) = of_kind(out, "ModelReplica").values()
    assert [e["name"] for e in replica["spec"]["engines"]] == ["prefill", "decode"]
    assert replica["spec"]["serving"]["mode"] == "PrefillDecode"
    (placement,) = out.xr["status"]["placements"]
    assert placement["cluster"] == replica["spec"]["clusterName"]
    assert [e["name"] for e in placement["engines"]] == ["prefill", "decode"]


def test_pinned_replica_stays_on_degraded_cluster_without_endpoint() -> None:
    out = render.render(scenario("deploy-pinned"))
    replicas = of_kind(out, "ModelReplica")
    assert replicas["qwen3-8b-gfcbja-0"]["spec"]["clusterName"] == "lab-l4"
    assert "qwen3-8b-gfcbja-2" not in replicas  # its cluster gpu-east is gone
    assert replicas["qwen3-8b-gfcbja-3"]["spec"]["clusterName"] == "coreweave-l40s"
    endpoints = of_kind(out, "ModelEndpoint")
    assert sorted(endpoints) == ["qwen3-8b-gfcbja-1", "qwen3-8b-gfcbja-3"]
    ready = condition(out, "ReplicasReady")
    assert ready["status"] == "False"
    assert out.xr["status"]["replicas"] == {"total": 3, "ready": 1}


@pytest.mark.parametrize(
    ("name", "ttl"),
    [
        ("binder-committed", fn.REST_TTL_S),  # every replica bound and Ready: at rest
        ("qwen3-applied", fn.DEFAULT_TTL_S),  # Ready, but the binder has not committed them
        ("binder-refused", fn.DEFAULT_TTL_S),
        ("pulling-one-pulling", fn.DEFAULT_TTL_S),  # a replica still pulling its weights
        ("deploy-pinned", fn.DEFAULT_TTL_S),  # a replica on a degraded cluster
    ],
)
def test_a_deployment_at_rest_is_called_again_rarely(name: str, ttl: float) -> None:
    assert response(name).meta.ttl.ToMilliseconds() == ttl * 1000


def test_a_kept_replica_leaves_crossplanes_own_spec_to_its_reconciler() -> None:
    """spec.crossplane of a ModelReplica is written by the replica's own reconciler (its
    references to what it composed). Applied back from an older observation, it would replace
    newer references, and a resource composed since would never be deleted: seen live, a pod
    collection outlived the replica's start."""
    first = render.render(scenario("deploy-qwen3-8b"))
    observed = as_observed(first.composed)
    refs = [{"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object", "name": "o"}]
    for obj in observed:
        if obj["kind"] == "ModelReplica":
            obj["spec"]["crossplane"] = {
                "compositionRef": {"name": "modelreplicas.modelplane.ai"},
                "compositionRevisionRef": {"name": "modelreplicas.modelplane.ai-d2aac11"},
                "resourceRefs": refs,
            }
    second = run(scenario("deploy-qwen3-8b").xr, observed)
    kept = of_kind(second, "ModelReplica")
    assert kept.keys() == of_kind(first, "ModelReplica").keys()
    for name, obj in kept.items():
        assert "crossplane" not in obj["spec"], name
        assert obj["spec"] == of_kind(first, "ModelReplica")[name]["spec"]


def test_names_and_pins_are_stable_across_reconciles() -> None:
    first = render.render(scenario("deploy-qwen3-8b"))
    xr = scenario("deploy-qwen3-8b").xr
    second = run(xr, as_observed(first.composed))
    assert of_kind(second, "ModelReplica").keys() == of_kind(first, "ModelReplica").keys()
    for name, obj in of_kind(second, "ModelReplica").items():
        assert obj["spec"] == of_kind(first, "ModelReplica")[name]["spec"]
    assert second.xr["status"]["replicas"] == {"total": 3, "ready": 3}
    assert condition(second, "ReplicasReady")["status"] == "True"


def test_scaling_down_keeps_the_lowest_indexes() -> None:
    rsp = response("qwen3-scaled-down")
    (name,) = composed(rsp, "ModelReplica")
    assert name.endswith("-0")
    assert list(composed(rsp, "ModelEndpoint")) == [name]


def test_replicas_of_other_namespaces_take_capacity() -> None:
    assert len(composed(response("shortfall-without-research"), "ModelReplica")) == 4
    assert len(composed(response("deploy-shortfall"), "ModelReplica")) == 3


def test_invalid_selector_sets_invalid_node_selector() -> None:
    rsp = response("invalid-selector")
    cond = condition_of(rsp, "ReplicasScheduled")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "InvalidNodeSelector")
    assert "spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel" in cond.message
    assert composed(rsp, "ModelReplica") == {}


def test_no_matching_clusters() -> None:
    cond = condition_of(response("no-matching-clusters"), "ReplicasScheduled")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "NoMatchingClusters")
    assert cond.message.startswith("placed 0 of 3 replicas; no InferenceCluster matches")


def test_cluster_selector_expressions() -> None:
    replicas = composed(response("cluster-selector-expressions"), "ModelReplica")
    assert {r["spec"]["clusterName"] for r in replicas.values()} == {
        "coreweave-h100",
        "coreweave-l40s",
    }


@pytest.mark.parametrize(
    ("patch", "expect"),
    [
        (
            {"engines": [{"name": "a", "members": [{"role": "Worker", "template": {}}]}]},
            "spec.engines",
        ),
        ({"replicas": 1001}, "spec.replicas"),
    ],
)
def test_invalid_spec_is_fatal(patch: dict, expect: str) -> None:
    xr = copy.deepcopy(scenario("deploy-qwen3-8b").xr)
    xr["spec"].update(patch)
    with pytest.raises(render.PipelineError, match=expect):
        run(xr)


def test_fleet_examples_are_not_scenarios() -> None:
    assert not (EXAMPLES / "fleet" / "xr.yaml").exists()
    kinds = sorted({o["kind"] for o in FLEET})
    assert kinds == ["Gateway", "InferenceClass", "InferenceCluster", "ModelReplica"]
    for name in ("deploy-qwen3-8b", "deploy-gang", "deploy-pd", "deploy-shortfall"):
        required = scenario(name).required
        assert {o["metadata"]["name"] for o in required} == {o["metadata"]["name"] for o in FLEET}
    assert yaml.safe_load((EXAMPLES / "deploy-pinned" / "xr.yaml").read_text())["kind"] == (
        "ModelDeployment"
    )


DEMAND = '{"h100":[[1,{"device:gpu":4},false]]}'


def test_fleet_objects_are_read_through_their_shapes() -> None:
    from google.protobuf import struct_pb2

    from plnt.capacity import reading

    mr = copy.deepcopy(next(o for o in FLEET if o["kind"] == "ModelReplica"))
    mr["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    mr["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    mr["metadata"]["annotations"]["plnt.work/pool-demand"] = DEMAND
    s = struct_pb2.Struct()
    s.update(mr)
    got = reading.read(s, reading.REPLICA)
    assert set(got["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert got["metadata"]["annotations"] == {"plnt.work/pool-demand": DEMAND}
    (member,) = got["spec"]["engines"][0]["members"]
    assert member == {
        "role": "Standalone",
        "nodePoolName": "h100",
        "deviceRequests": [{"name": "gpu", "count": 4, "deviceClassName": "gpu.nvidia.com"}],
    }
    cluster = next(o for o in FLEET if o["kind"] == "InferenceCluster")
    s = struct_pb2.Struct()
    s.update(cluster)
    got = reading.read(s, reading.CLUSTER)
    unread = ("providerConfigRef", "namespaces")
    assert got["status"] == {k: v for k, v in cluster["status"].items() if k not in unread}
    # status reports the pools, the spec only which autoscale; no fence declared
    assert got["spec"] == {
        "nodePools": [
            {k: v for k, v in p.items() if k in ("name", "maxNodeCount")}
            for p in cluster["spec"]["nodePools"]
        ]
    }
    del cluster["status"]["pools"]
    s = struct_pb2.Struct()
    s.update(cluster)
    assert reading.read(s, reading.CLUSTER)["spec"] == {"nodePools": cluster["spec"]["nodePools"]}


@pytest.mark.parametrize(("reasons", "status", "reason", "message"), PULLING)
def test_replicas_ready_says_pulling_weights_when_a_replica_does(
    reasons: dict[int, tuple[bool, str]], status: str, reason: str, message: str
) -> None:
    names = sorted(of_kind(qwen3_first(), "ModelReplica"))
    (case,) = [c for c in PULLING if c.values[0] is reasons]
    ready = condition_of(response(f"pulling-{case.id}"), "ReplicasReady")
    assert (ready.status, ready.reason) == (STATUS[status], reason)
    assert ready.message == message.format(*names)


def test_one_gpu_replicas_share_eight_gpu_nodes_in_render() -> None:
    """20 one-GPU replicas fit the example fleet (4 L4 nodes, 2 x 8 L40S, and 4 x 8
    H100 less the research team's whole node); counted in nodes only 9 would."""
    rsp = response("twenty-replicas")
    replicas = composed(rsp, "ModelReplica")
    assert len(replicas) == 20
    by_cluster: dict[str, int] = {}
    for r in replicas.values():
        by_cluster[r["spec"]["clusterName"]] = by_cluster.get(r["spec"]["clusterName"], 0) + 1
        demand = json.loads(r["metadata"]["annotations"]["plnt.work/pool-demand"])
        assert list(demand.values()) == [[[1, {"device:gpu": 1}, False]]]
    assert by_cluster["lab-l4"] == 4  # one L4 per node
    assert by_cluster["coreweave-h100"] + by_cluster["coreweave-l40s"] == 16  # shared nodes
    assert condition_of(rsp, "ReplicasScheduled").status == fnv1.STATUS_CONDITION_TRUE


# --- the binder's answers on the ModelDeployment ---------------------------------------------


def test_new_replicas_are_proposals_until_the_binder_commits_them() -> None:
    out = render.render(scenario("deploy-qwen3-8b"))
    cond = condition(out, "ReplicasBound")
    assert (cond["status"], cond["reason"]) == ("False", "AwaitingBinding")
    assert cond["message"] == "bound 0 of 3 replicas; awaiting the binder: 3 new"
    assert condition(out, "Ready")["status"] == "False"

    cond = condition_of(response("binder-committed"), "ReplicasBound")
    assert (cond.status, cond.reason, cond.message) == (
        fnv1.STATUS_CONDITION_TRUE,
        "Bound",
        "bound 3 of 3 replicas",
    )


def test_a_refused_replica_is_released_placed_again_and_the_refusal_stays_loud() -> None:
    lost = lost_on_lab_l4()
    rsp = response("binder-refused")
    now = composed(rsp, "ModelReplica")
    assert lost not in now  # released
    assert len(now) == 3  # and another placed in its stead
    cond = condition_of(rsp, "ReplicasBound")
    assert cond.reason == "BindingRefused"
    assert f"{lost} on lab-l4: pool l4: not enough free gpu" in cond.message
    scheduled = condition_of(rsp, "ReplicasScheduled").message
    assert f"{lost} released (the binder refused it: pool l4: not enough free gpu)" in scheduled


def test_an_over_committed_replica_is_reported_on_its_deployment() -> None:
    victim = sorted(binder_answers())[0]
    rsp = response("binder-over-committed")
    cond = condition_of(rsp, "ReplicasBound")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "OverCommitted")
    assert f"{victim}: pool h100: 1 of its 1 pods no longer fit" in cond.message
    assert victim in composed(rsp, "ModelReplica")  # reported, not evicted


def test_report_of_a_first_rollout_awaiting_its_verdict() -> None:
    """The status stage alone, on a plan and schedules, with no render: nothing serves yet, so
    the XR is not Ready, the Canary condition awaits the gate and no warning is raised."""
    from collections import Counter

    from functions.model_deployment import revisions
    from plnt.capacity import scheduling
    from plnt.models.model_deployment import ModelDeploymentSpec

    raw = scenario("deploy-canary").xr["spec"]
    spec = ModelDeploymentSpec.model_validate(raw)
    plan = revisions.plan(spec, "rev-1", {}, Counter())
    assert (plan.outcome, plan.mode) == ("AwaitingVerdict", revisions.FIRST_ROLLOUT)
    unplaced = scheduling.Schedule([], [], [], spec.replicas, scheduling.SCHEDULED, "")
    said = fn.report(spec, plan, {"rev-1": unplaced}, fn.Composed(), {})
    assert said.status["replicas"] == {"total": 0, "ready": 0}
    assert said.status["revisions"] == {"canary": "rev-1"}
    assert [(c.type, c.status, c.reason) for c in said.conditions] == [
        ("ReplicasScheduled", True, "Scheduled"),
        ("ReplicasReady", False, "Waiting"),
        ("Canary", False, "AwaitingVerdict"),
        ("ReplicasBound", True, said.conditions[-1].reason),
    ]
    assert said.conditions[1].message == f"0 of {spec.replicas} replicas ready"
    assert (said.warnings, said.ready) == ([], False)
