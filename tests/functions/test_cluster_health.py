"""A cluster whose API server does not answer, as the functions see it: the InferenceCluster is
not Ready and says what failed; its replicas' endpoints leave the routes; the ModelDeployment's
and the WorkflowRun's conditions name the degraded cluster and why (plnt.cluster_health)."""

from __future__ import annotations

import copy
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import fn as deployment_fn
from functions.workflow_run import fn as workflow_run
from functions.workflow_run import phases
from plnt import cluster_health
from plnt_host import render
from tests.functions import test_inference_cluster as ic
from tests.functions.test_model_deployment import FLEET, as_observed, condition, of_kind, run
from tests.functions.test_model_deployment import scenario as deploy_scenario

SINCE = "2026-12-05T11:30:02Z"
DOWN = cluster_health.Record(
    False, cluster_health.TIMED_OUT, "GET https://10.0.0.9:6443/readyz: no answer within 5s", SINCE
)


def annotated(obj: dict[str, Any], record: cluster_health.Record) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[cluster_health.ANNOTATION] = (
        record.to_annotation()
    )
    return out


def test_an_unreachable_cluster_is_not_ready_and_says_what_failed() -> None:
    xr = annotated(ic.READY.xr, DOWN)
    rsp = ic.run(xr, ic.READY.required, ic.READY.observed)
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    (reachable,) = [c for c in rsp.conditions if c.type == "Reachable"]
    assert reachable.status == fnv1.STATUS_CONDITION_FALSE
    assert reachable.reason == cluster_health.TIMED_OUT
    assert reachable.message == (
        f"the API server has not answered since {SINCE}: GET https://10.0.0.9:6443/readyz: "
        "no answer within 5s"
    )


def test_a_reachable_cluster_says_so_and_stays_ready() -> None:
    up = cluster_health.Record(True, cluster_health.REACHABLE, "answers /readyz", SINCE)
    rsp = ic.run(annotated(ic.READY.xr, up), ic.READY.required, ic.READY.observed)
    assert rsp.desired.composite.ready != fnv1.READY_FALSE
    (reachable,) = [c for c in rsp.conditions if c.type == "Reachable"]
    assert reachable.status == fnv1.STATUS_CONDITION_TRUE


def test_a_cluster_never_probed_has_no_reachable_condition() -> None:
    rsp = ic.run(ic.READY.xr, ic.READY.required, ic.READY.observed)
    assert not [c for c in rsp.conditions if c.type == "Reachable"]


def _fleet_with(cluster: str, record: cluster_health.Record) -> list[dict[str, Any]]:
    return [
        annotated(o, record)
        if o["kind"] == "InferenceCluster" and o["metadata"]["name"] == cluster
        else o
        for o in FLEET
    ]


def test_the_replica_on_a_silent_cluster_leaves_the_routes_and_is_named(monkeypatch) -> None:
    # a minute into the outage: within the grace period, nothing is replaced yet
    monkeypatch.setattr(deployment_fn, "clock", lambda: (cluster_health.seconds(SINCE) or 0) + 60)
    first = render.render(deploy_scenario("deploy-qwen3-8b"))
    xr = deploy_scenario("deploy-qwen3-8b").xr
    on_l4 = next(
        r["metadata"]["name"]
        for r in of_kind(first, "ModelReplica").values()
        if r["spec"]["clusterName"] == "lab-l4"
    )
    # the InferenceCluster still says Ready (Crossplane has not reconciled it yet): the
    # published health alone takes its replica out of the routes
    out = run(xr, as_observed(first.composed), required=_fleet_with("lab-l4", DOWN))
    assert on_l4 in of_kind(out, "ModelReplica")  # kept, pinned
    assert on_l4 not in of_kind(out, "ModelEndpoint")
    assert len(of_kind(out, "ModelEndpoint")) == 2
    ready = condition(out, "ReplicasReady")
    assert (ready["status"], ready["reason"]) == ("False", "ClusterDegraded")
    assert out.xr["status"]["replicas"]["ready"] == 2
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("False", "ClusterDegraded")
    assert health["message"] == (
        f"{on_l4} on lab-l4 (TimedOut: API server not answering: GET https://10.0.0.9:6443/readyz: "
        f"no answer within 5s, since {SINCE}): no endpoint; fails over in 4m00s"
    )


def test_the_endpoint_returns_with_the_cluster() -> None:
    first = render.render(deploy_scenario("deploy-qwen3-8b"))
    xr = deploy_scenario("deploy-qwen3-8b").xr
    up = cluster_health.Record(True, cluster_health.REACHABLE, "answers /readyz", SINCE)
    out = run(xr, as_observed(first.composed), required=_fleet_with("lab-l4", up))
    assert len(of_kind(out, "ModelEndpoint")) == 3
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("True", "Healthy")


def _deployment(ready: dict[str, Any], serving: int, health: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama"},
        "status": {
            "revisions": {"stable": "abc"},
            "replicas": {"total": 2, "ready": serving},
            "conditions": [ready, health],
        },
    }


DEGRADED = {
    "type": "ClustersHealthy",
    "status": "False",
    "reason": "ClusterDegraded",
    "message": "replicas llama-abc-0 on lab-h100 have no endpoint; cluster lab-h100: TimedOut",
}


def test_a_run_keeps_serving_while_one_of_its_clusters_is_degraded() -> None:
    not_all = {"type": "ReplicasReady", "status": "False", "reason": "ClusterDegraded"}
    assert phases.serving(_deployment(not_all, 1, DEGRADED))
    assert not phases.serving(_deployment(not_all, 0, DEGRADED))  # nothing serves
    waiting = {"type": "ReplicasReady", "status": "False", "reason": "Waiting"}
    assert not phases.serving(_deployment(waiting, 1, DEGRADED))


def test_a_run_says_which_cluster_is_degraded() -> None:
    said = workflow_run.clusters_health(_deployment({}, 1, DEGRADED))
    assert said is not None
    assert (said.type, said.status, said.reason) == ("ClustersHealthy", False, "ClusterDegraded")
    assert said.message == DEGRADED["message"]
    assert workflow_run.clusters_health({"status": {}}) is None
    before = workflow_run.endpoints_digest(_deployment({}, 1, {**DEGRADED, "status": "True"}))
    assert before != workflow_run.endpoints_digest(_deployment({}, 1, DEGRADED))
