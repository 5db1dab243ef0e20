"""Failover through the ModelDeployment function (examples/deploy-failover): a replica whose
cluster stays degraded past `spec.failover.after` gets a replacement on a healthy cluster, is
kept until the replacement serves and then released; a cluster that comes back first has the
surplus retired, the starting replacement before any serving replica; within the grace period,
or with failover off, nothing moves. And the pure rules beneath (failover.py, keep_pins)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from functions.model_deployment import failover
from functions.model_deployment import fn as deployment_fn
from functions.model_deployment import replicas as rep
from plnt import cluster_health
from plnt.capacity import offer, scheduling
from plnt.models import model_deployment
from plnt_host import render
from tests.functions.test_model_deployment import EXAMPLES, SCHEDULE_ONLY, condition, of_kind

SCENARIO = render.load_scenario(EXAMPLES / "deploy-failover")
SINCE = cluster_health.seconds("2026-01-01T00:00:00Z") or 0.0
GRACE = 300.0
DEGRADED, HEALTHY, REPLACEMENT = "qwen3-8b-gfcbja-0", "qwen3-8b-gfcbja-1", "qwen3-8b-gfcbja-2"


@pytest.fixture
def at(monkeypatch: pytest.MonkeyPatch):
    """Sets the function's clock: `at(seconds after the outage began)`."""

    def set_clock(offset: float) -> None:
        monkeypatch.setattr(deployment_fn, "clock", lambda: SINCE + offset)

    return set_clock


def observed(out: render.Rendered, ready: set[str]) -> list[dict[str, Any]]:
    """What Crossplane observes after applying `out`: the named replicas and their endpoints
    Ready, everything else not."""
    seen = []
    for composed in out.composed:
        obj = copy.deepcopy(composed)
        obj["metadata"].pop("ownerReferences", None)
        is_ready = obj["metadata"]["name"] in ready
        obj["status"] = {"conditions": [{"type": "Ready", "status": str(is_ready)}]}
        seen.append(obj)
    return seen


def required(healthy: bool) -> list[dict[str, Any]]:
    """The scenario's fleet with lab-l4 Unreachable, or answering again."""
    out = copy.deepcopy(SCENARIO.required)
    if healthy:
        for obj in out:
            if obj["kind"] == "InferenceCluster" and obj["metadata"]["name"] == "lab-l4":
                up = cluster_health.Record(
                    True, "Reachable", "answers /readyz", "2026-01-02T00:00:00Z"
                )
                obj["metadata"]["annotations"][cluster_health.ANNOTATION] = up.to_annotation()
    return out


def step(xr: dict[str, Any], seen: list[dict[str, Any]], healthy: bool = False) -> render.Rendered:
    s = render.Scenario(xr=xr, required=required(healthy), observed=seen, path=EXAMPLES)
    return render.render(s, catalogue=SCHEDULE_ONLY)


def first(at, offset: float = GRACE + 1) -> render.Rendered:
    at(offset)
    return step(SCENARIO.xr, SCENARIO.observed)


def replicas(out: render.Rendered) -> dict[str, str]:
    return {n: o["spec"]["clusterName"] for n, o in of_kind(out, "ModelReplica").items()}


def test_within_the_grace_period_nothing_moves(at) -> None:
    out = first(at, GRACE - 60)
    assert replicas(out) == {DEGRADED: "lab-l4", HEALTHY: "coreweave-h100"}
    assert DEGRADED not in of_kind(out, "ModelEndpoint")
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("False", "ClusterDegraded")
    assert f"{DEGRADED} on lab-l4 (TimedOut: API server not answering" in health["message"]
    assert health["message"].endswith("no endpoint; fails over in 1m00s")


def test_past_the_grace_period_a_replacement_is_placed_and_the_degraded_one_kept(at) -> None:
    out = first(at)
    placed = replicas(out)
    assert placed[DEGRADED] == "lab-l4" and placed[HEALTHY] == "coreweave-h100"
    assert placed[REPLACEMENT] not in ("lab-l4",)
    replacement = of_kind(out, "ModelReplica")[REPLACEMENT]
    assert replacement["metadata"]["annotations"][rep.REPLACES] == DEGRADED
    scheduled = condition(out, "ReplicasScheduled")
    assert scheduled["status"] == "True"
    assert scheduled["message"] == (
        f"placed 2 of 2 replicas; held until replacements serve: {DEGRADED} on lab-l4"
    )
    health = condition(out, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("False", "FailingOver")
    assert (
        f"failing over to {REPLACEMENT} on {placed[REPLACEMENT]} (starting); kept until it serves"
        in health["message"]
    )
    assert out.xr["status"]["replicas"]["total"] == 2  # the held one does not count


def test_the_degraded_replica_is_released_once_its_replacement_serves(at) -> None:
    placing = first(at)
    xr = {**SCENARIO.xr, "status": placing.xr["status"]}
    starting = step(xr, observed(placing, {HEALTHY, DEGRADED}))
    assert set(replicas(starting)) == {DEGRADED, HEALTHY, REPLACEMENT}  # starting: still held
    assert REPLACEMENT not in of_kind(starting, "ModelEndpoint")  # not routed while it starts
    ready = step(xr, observed(starting, {HEALTHY, DEGRADED, REPLACEMENT}))
    assert REPLACEMENT in of_kind(ready, "ModelEndpoint")  # Ready: it joins the routes
    assert DEGRADED in of_kind(ready, "ModelReplica")  # until its endpoint is, still held
    served = step(xr, observed(ready, {HEALTHY, DEGRADED, REPLACEMENT}))
    assert replicas(served) == {
        HEALTHY: "coreweave-h100",
        REPLACEMENT: replicas(placing)[REPLACEMENT],
    }
    assert sorted(of_kind(served, "ModelEndpoint")) == [HEALTHY, REPLACEMENT]
    assert (
        f"{DEGRADED} released (failed over from cluster lab-l4: its replacement serves)"
        in (condition(served, "ReplicasScheduled")["message"])
    )
    health = condition(served, "ClustersHealthy")
    assert (health["status"], health["reason"]) == ("True", "FailedOver")
    assert (
        f"failed over to {REPLACEMENT} on {replicas(placing)[REPLACEMENT]} (serving); released"
        in (health["message"])
    )
    assert [r["message"] for r in served.results if "FailedOver" in r["message"]] == [
        f"FailedOver: {DEGRADED} on lab-l4 released; its replacement serves"
    ]
    # and once it is gone, the deployment is healthy
    after = step(xr, observed(served, {HEALTHY, REPLACEMENT}))
    assert condition(after, "ClustersHealthy")["reason"] == "Healthy"


def test_a_cluster_back_before_the_replacement_serves_retires_the_replacement(at) -> None:
    placing = first(at)
    xr = {**SCENARIO.xr, "status": placing.xr["status"]}
    back = step(xr, observed(placing, {HEALTHY, DEGRADED}), healthy=True)
    assert replicas(back) == {DEGRADED: "lab-l4", HEALTHY: "coreweave-h100"}
    assert sorted(of_kind(back, "ModelEndpoint")) == [DEGRADED, HEALTHY]
    assert condition(back, "ClustersHealthy")["reason"] == "Healthy"


def test_with_failover_off_nothing_moves(at) -> None:
    at(10 * GRACE)
    xr = copy.deepcopy(SCENARIO.xr)
    xr["spec"]["failover"] = {"after": "0s"}
    out = step(xr, SCENARIO.observed)
    assert replicas(out) == {DEGRADED: "lab-l4", HEALTHY: "coreweave-h100"}
    assert condition(out, "ClustersHealthy")["message"].endswith("no endpoint; failover is off")


def test_a_replacement_that_cannot_be_placed_is_a_loud_shortfall(at) -> None:
    at(GRACE + 1)
    xr = copy.deepcopy(SCENARIO.xr)
    # only lab-l4 and coreweave-h100 may take it, and the H100 cluster is made full
    xr["spec"]["clusterSelector"] = {"matchLabels": {"modelplane.ai/region": "eu-west"}}
    out = step(xr, SCENARIO.observed)
    placed = replicas(out)
    if len(placed) == 3:
        pytest.skip("the eu-west clusters had room: the fleet changed")
    scheduled = condition(out, "ReplicasScheduled")
    assert scheduled["status"] == "False"
    assert scheduled["message"].startswith(
        f"placed 1 of 2 replicas; held until replacements serve: {DEGRADED} on lab-l4; "
    )
    assert "cluster lab-l4: not Ready" in scheduled["message"]
    health = condition(out, "ClustersHealthy")
    assert "failing over to no replacement placed yet" in health["message"]


def test_the_function_is_called_again_when_the_grace_period_ends() -> None:
    found = failover.degraded([(DEGRADED, "lab-l4")], _clusters(), GRACE)
    assert failover.next_due(found, SINCE + GRACE - 20) == pytest.approx(20)
    assert failover.next_due(found, SINCE + GRACE + 1) is None


def _clusters() -> dict[str, offer.Cluster]:
    return {
        c.name: c
        for c in (offer.cluster_of(o) for o in SCENARIO.required if o["kind"] == "InferenceCluster")
    }


# --- the pure rules ------------------------------------------------------------------------


def _placed(name: str, cluster: str) -> scheduling.PlacedReplica:
    return scheduling.PlacedReplica("ns", name, "d", "r", cluster, {}, ())


def _cluster(name: str, ready: bool) -> offer.Cluster:
    return offer.Cluster(name, {}, ready, ())


CLUSTERS = {"a": _cluster("a", False), "b": _cluster("b", True), "c": _cluster("c", True)}


def test_keep_pins_holds_a_failed_replica_until_the_others_serve_enough() -> None:
    a0, b1, c2 = _placed("d-r-0", "a"), _placed("d-r-1", "b"), _placed("d-r-2", "c")
    failed = frozenset({"d-r-0"})
    # before a replacement: the failed one is held, one more is wanted
    kept, released, held = scheduling.keep_pins([a0, b1], CLUSTERS, 2, failed=failed,
                                               serving=frozenset({"d-r-1"}))  # fmt: skip
    assert ([r.name for r in kept], released, held) == (["d-r-1", "d-r-0"], [], [a0])
    # the replacement starts: still held
    kept, released, held = scheduling.keep_pins([a0, b1, c2], CLUSTERS, 2, failed=failed,
                                               serving=frozenset({"d-r-1"}))  # fmt: skip
    assert (held, released) == ([a0], [])
    # it serves: released
    kept, released, held = scheduling.keep_pins([a0, b1, c2], CLUSTERS, 2, failed=failed,
                                               serving=frozenset({"d-r-1", "d-r-2"}))  # fmt: skip
    assert ([r.name for r in kept], released, held) == (["d-r-1", "d-r-2"], [a0], [])


def test_keep_pins_retires_what_does_not_serve_before_what_does() -> None:
    clusters = {**CLUSTERS, "a": _cluster("a", True)}  # the cluster is back
    a0, b1, c2 = _placed("d-r-0", "a"), _placed("d-r-1", "b"), _placed("d-r-2", "c")
    serving = frozenset({"d-r-0", "d-r-1"})  # the replacement d-r-2 still starts
    kept, released, _ = scheduling.keep_pins([a0, b1, c2], clusters, 2, serving=serving)
    assert ([r.name for r in kept], released) == (["d-r-0", "d-r-1"], [c2])


def test_the_grace_period_parses_and_zero_turns_it_off() -> None:
    assert model_deployment.duration_seconds("5m") == 300
    assert model_deployment.duration_seconds("1h30m") == 5400
    assert model_deployment.duration_seconds("0s") == 0
    found = failover.degraded([("x", "a")], {"a": _cluster("a", False)}, 0)
    assert found[0].due is None and not failover.failed(found, 1e12)


def test_a_workflow_run_passes_its_grace_period_down() -> None:
    folder = EXAMPLES / "workflowrun-llama-70b"
    seed = render.load_scenario(folder)
    xr = copy.deepcopy(seed.xr)
    xr["spec"]["failover"] = {"after": "45s"}
    out = render.render(dataclasses.replace(seed, xr=xr))
    md = next(o for o in out.composed if o["kind"] == "ModelDeployment")
    assert md["spec"]["failover"] == {"after": "45s"}
