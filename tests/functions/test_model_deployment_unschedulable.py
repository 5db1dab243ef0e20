"""ReplicasReady when the kube-scheduler cannot place a replica's pods.

A not-ready ModelReplica whose WorkloadsReady reason is Unschedulable makes ReplicasReady say
so (reason Unschedulable, more urgent than PullingWeights), naming the first replicas with their
WorkloadsReady messages, and a Warning result (Crossplane's event on the ModelDeployment).
"""

from __future__ import annotations

from typing import Any

from plnt_host import render
from tests.functions.test_model_deployment import (
    as_observed,
    condition,
    of_kind,
    run,
    scenario,
)
from tests.functions.test_model_deployment_canary import (  # noqa: F401 (a fixture)
    _mark,
    stable,
    start_canary,
    with_status,
)

NO_DEVICES = (
    "engine qwen3-8b: pod qwen3-8b-eks-l4-0-qwen3-8b-7d9f8c6b5-x2k4q cannot be scheduled: "
    "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are "
    "available: 1 Preemption is not helpful for scheduling."
)
TAINTED = (
    "engine qwen3-8b: pod qwen3-8b-lab-l4-1-qwen3-8b-5c4b3a2d1-9xq7z cannot be scheduled: "
    "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}. "
    "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
)


def workloads(ready: bool, reason: str, message: str = "") -> list[dict[str, str]]:
    return [
        {"type": "Ready", "status": str(ready)},
        {"type": "WorkloadsReady", "status": str(ready), "reason": reason, "message": message},
    ]


def rendered(*states: list[dict[str, str]]) -> tuple[render.Rendered, list[str]]:
    """deploy-qwen3-8b (3 replicas) once its replicas report `states`, in name order."""
    first = render.render(scenario("deploy-qwen3-8b"))
    names = sorted(of_kind(first, "ModelReplica"))
    observed = as_observed(first.composed, ready=False)
    for name, conds in zip(names, states, strict=False):
        _mark(observed, lambda o, n=name: o["metadata"]["name"] == n, conds)
    return run(scenario("deploy-qwen3-8b").xr, observed), names


def warnings(out: render.Rendered) -> list[str]:
    return [r["message"] for r in out.results if r["severity"] == "SEVERITY_WARNING"]


def test_an_unschedulable_replica_says_the_schedulers_message() -> None:
    out, names = rendered(workloads(False, "Unschedulable", NO_DEVICES))
    ready = condition(out, "ReplicasReady")
    said = f"0 of 3 replicas ready; replica {names[0]}: {NO_DEVICES}"
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Unschedulable", said)
    assert f"Unschedulable: {said}" in warnings(out)


def test_unschedulable_wins_over_pulling_weights() -> None:
    out, names = rendered(
        workloads(False, "PullingWeights", "engine qwen3-8b stages its weights"),
        workloads(False, "Unschedulable", TAINTED),
    )
    ready = condition(out, "ReplicasReady")
    assert (ready["reason"], ready["message"]) == (
        "Unschedulable",
        f"0 of 3 replicas ready; replica {names[1]}: {TAINTED}",
    )


def test_at_most_two_replicas_messages_then_a_count() -> None:
    out, names = rendered(
        workloads(True, "Available"),
        workloads(False, "Unschedulable", NO_DEVICES),
        workloads(False, "Unschedulable", TAINTED),
    )
    assert condition(out, "ReplicasReady")["message"] == (
        f"1 of 3 replicas ready; replica {names[1]}: {NO_DEVICES}; replica {names[2]}: {TAINTED}"
    )
    out, names = rendered(*[workloads(False, "Unschedulable", NO_DEVICES)] * 3)
    ready = condition(out, "ReplicasReady")
    assert ready["message"] == (
        f"0 of 3 replicas ready; replica {names[0]}: {NO_DEVICES}; "
        f"replica {names[1]}: {NO_DEVICES}; and 1 more replica(s) cannot be scheduled"
    )
    assert names[2] not in ready["message"]


def test_a_ready_replica_with_a_stale_unschedulable_reason_is_ignored() -> None:
    out, _ = rendered(workloads(True, "Unschedulable", NO_DEVICES))
    ready = condition(out, "ReplicasReady")
    assert (ready["reason"], ready["message"]) == ("Waiting", "1 of 3 replicas ready")
    assert not [w for w in warnings(out) if w.startswith("Unschedulable")]


def test_pulling_weights_is_unchanged_without_an_unschedulable_replica() -> None:
    out, names = rendered(workloads(False, "PullingWeights", "engine qwen3-8b stages"))
    ready = condition(out, "ReplicasReady")
    assert (ready["reason"], ready["message"]) == (
        "PullingWeights",
        f"0 of 3 replicas ready; pulling weights: {names[0]}",
    )
    assert not [w for w in warnings(out) if w.startswith("Unschedulable")]


def test_an_unschedulable_canary_replica_is_a_warning_only(stable: Any) -> None:  # noqa: F811
    """ReplicasReady counts the stable revision; a canary replica's wait is still told."""
    changed, observed, rev_a, rev_b = start_canary(stable)
    _mark(
        observed,
        lambda o: o["metadata"]["labels"]["modelplane.ai/revision"] == rev_b,
        workloads(False, "Unschedulable", NO_DEVICES),
    )
    canary = sorted(
        o["metadata"]["name"]
        for o in observed
        if o["kind"] == "ModelReplica"
        and o["metadata"]["labels"]["modelplane.ai/revision"] == rev_b
    )
    xr = with_status(changed, revisions={"stable": rev_a, "canary": rev_b})
    out = run(xr, observed)
    assert condition(out, "ReplicasReady")["reason"] == "Available"
    assert f"Unschedulable: revision {rev_b}: replica {canary[0]}: {NO_DEVICES}" in warnings(out)
