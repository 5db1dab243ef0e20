"""A replica whose pods stay unschedulable on a healthy cluster (its pool lost the nodes it ran
on) counts as degraded: ClustersHealthy carries the kube-scheduler's words, and past
`spec.failover.after` a replacement is placed where capacity still exists (capacity follows the
nodes, plnt.capacity.pool_nodes), the stuck replica held until it serves. The scenario is
examples/deploy-failover with lab-l4 answering again."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from functions.model_deployment import failover
from functions.model_deployment import fn as deployment_fn
from functions.model_deployment import replicas as rep
from plnt import cluster_health
from plnt.capacity import pool_nodes
from plnt_host import render
from tests.functions.test_model_deployment import EXAMPLES, SCHEDULE_ONLY, condition, of_kind

SCENARIO = render.load_scenario(EXAMPLES / "deploy-failover")
STUCK_SINCE = "2026-01-01T00:00:00Z"
SINCE = cluster_health.seconds(STUCK_SINCE) or 0.0
GRACE = 300.0
STUCK, HEALTHY, REPLACEMENT = "qwen3-8b-gfcbja-0", "qwen3-8b-gfcbja-1", "qwen3-8b-gfcbja-2"
WORDS = (
    "engine qwen3-8b: pod qwen3-8b-gfcbja-0-0 cannot be scheduled: 0/1 nodes are available: "
    "1 node(s) didn't match Pod's node affinity/selector"
)


@pytest.fixture
def at(monkeypatch: pytest.MonkeyPatch):
    """Sets the function's clock: `at(seconds after the pods became unschedulable)`."""

    def set_clock(offset: float) -> None:
        monkeypatch.setattr(deployment_fn, "clock", lambda: SINCE + offset)

    return set_clock


def required(ready_nodes: pool_nodes.Record | None) -> list[dict[str, Any]]:
    """The scenario's fleet with lab-l4 answering, and its pools' nodes as counted."""
    out = copy.deepcopy(SCENARIO.required)
    for obj in out:
        if obj["kind"] == "InferenceCluster" and obj["metadata"]["name"] == "lab-l4":
            up = cluster_health.Record(True, "Reachable", "answers /readyz", STUCK_SINCE)
            annotations = obj["metadata"]["annotations"]
            annotations[cluster_health.ANNOTATION] = up.to_annotation()
            if ready_nodes is not None:
                annotations[pool_nodes.ANNOTATION] = ready_nodes.to_annotation()
    return out


def observed(stuck: bool, *, since: str | None = STUCK_SINCE) -> list[dict[str, Any]]:
    """The scenario's replicas as observed: STUCK not Ready, its pods unschedulable."""
    out = copy.deepcopy(SCENARIO.observed)
    for obj in out:
        if obj["metadata"]["name"] == STUCK and stuck:
            workloads = {"type": "WorkloadsReady", "status": "False", "reason": "Unschedulable",
                         "message": WORDS}  # fmt: skip
            if since is not None:
                workloads["lastTransitionTime"] = since
            obj["status"]["conditions"] = [
                {"type": "Ready", "status": "False", "reason": "Creating"},
                workloads,
            ]
    return out


def step(
    seen: list[dict[str, Any]],
    ready_nodes: pool_nodes.Record | None = None,
    selector: dict[str, str] | None = None,
) -> render.Rendered:
    xr = copy.deepcopy(SCENARIO.xr)
    if selector:
        xr["spec"]["clusterSelector"] = {"matchLabels": selector}
    s = render.Scenario(xr=xr, required=required(ready_nodes), observed=seen, path=EXAMPLES)
    return render.render(s, catalogue=SCHEDULE_ONLY)


def replicas(out: render.Rendered) -> dict[str, str]:
    return {n: o["spec"]["clusterName"] for n, o in of_kind(out, "ModelReplica").items()}


# lab-l4 lost three of its four L4 nodes: the one left is the stuck replica's
ONE_LEFT = pool_nodes.Record({"l4": (1, 1)}, STUCK_SINCE)


def test_within_the_grace_period_the_scheduler_words_are_reported(at) -> None:
    at(GRACE - 60)
    out = step(observed(stuck=True), ONE_LEFT)
    assert replicas(out) == {STUCK: "lab-l4", HEALTHY: "coreweave-h100"}
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("False", "Unschedulable")
    assert health["message"] == (
        f"{STUCK} on lab-l4 (Unschedulable: {WORDS}, since {STUCK_SINCE}): not serving; "
        "fails over in 1m00s"
    )
    assert STUCK in of_kind(out, "ModelEndpoint")  # its cluster is healthy: still routed
    ready = condition(out, "ReplicasReady")
    assert (ready["reason"], WORDS in ready["message"]) == ("Unschedulable", True)


def test_past_the_grace_period_a_replacement_goes_where_nodes_exist(at) -> None:
    at(GRACE + 1)
    out = step(observed(stuck=True), ONE_LEFT)
    placed = replicas(out)
    assert placed[STUCK] == "lab-l4" and placed[HEALTHY] == "coreweave-h100"
    # lab-l4's one Ready node is the stuck replica's: the replacement goes elsewhere
    assert placed[REPLACEMENT] not in ("lab-l4", None)
    replacement = of_kind(out, "ModelReplica")[REPLACEMENT]
    assert replacement["metadata"]["annotations"][rep.REPLACES] == STUCK
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("False", "FailingOver")
    assert health["message"].startswith(f"{STUCK} on lab-l4 (Unschedulable: {WORDS}")
    assert condition(out, "ReplicasScheduled")["message"] == (
        f"placed 2 of 2 replicas; held until replacements serve: {STUCK} on lab-l4"
    )


def test_capacity_that_is_gone_is_not_offered_to_the_replacement(at) -> None:
    """With only lab-l4 left to the selector: its four nodes Ready, the replacement goes there;
    one node left (the stuck replica's), it cannot, and the shortfall says why."""
    at(GRACE + 1)
    on_prem = {"modelplane.ai/provider": "on-prem"}
    whole = step(observed(stuck=True), pool_nodes.Record({"l4": (4, 4)}, STUCK_SINCE), on_prem)
    assert replicas(whole)[REPLACEMENT] == "lab-l4"
    out = step(observed(stuck=True), ONE_LEFT, on_prem)
    assert REPLACEMENT not in replicas(out)
    scheduled = condition(out, "ReplicasScheduled")
    assert scheduled["status"] == "False"
    assert (
        "cluster lab-l4: engine qwen3-8b: pool l4: not enough free gpu (need 1 on one node, "
        "0 of 1 free in the pool), 1 of 4 nodes Ready (1 exist) on the workload cluster since "
        f"{STUCK_SINCE}"
    ) in scheduled["message"]


def test_pods_that_are_placed_again_end_the_degradation(at) -> None:
    at(GRACE + 1)
    out = step(observed(stuck=False), ONE_LEFT)
    assert replicas(out) == {STUCK: "lab-l4", HEALTHY: "coreweave-h100"}
    assert condition(out, "ClustersHealthy")["reason"] == "Healthy"


def test_stuck_with_no_time_on_record_never_fails_over(at) -> None:
    at(10 * GRACE)
    out = step(observed(stuck=True, since=None), ONE_LEFT)
    assert set(replicas(out)) == {STUCK, HEALTHY}
    assert condition(out, "ClustersHealthy")["message"].endswith("not serving; failover is off")


def test_what_counts_as_stuck() -> None:
    def replica(*conditions: dict[str, str]) -> dict[str, Any]:
        return {"status": {"conditions": list(conditions)}}

    unsched = {"type": "WorkloadsReady", "status": "False", "reason": "Unschedulable",
               "message": "m", "lastTransitionTime": STUCK_SINCE}  # fmt: skip
    assert failover.stuck(replica(unsched)) == failover.Stuck(SINCE, "m")
    assert failover.stuck(replica({"type": "Ready", "status": "True"}, unsched)) is None
    assert failover.stuck(replica({**unsched, "reason": "PullingWeights"})) is None
    assert failover.stuck(replica({**unsched, "status": "True"})) is None
    assert failover.stuck(None) is None
    found = failover.degraded([(STUCK, "lab-l4")], {}, GRACE, {STUCK: failover.Stuck(SINCE, "m")})
    assert found == []  # not a cluster on the fleet: not this module's to judge
