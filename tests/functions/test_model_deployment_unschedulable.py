"""ReplicasReady when the kube-scheduler cannot place a replica's pods.

A not-ready ModelReplica whose WorkloadsReady reason is Unschedulable makes ReplicasReady say
so (reason Unschedulable, more urgent than PullingWeights), naming the first replicas with their
WorkloadsReady messages, and a Warning result (Crossplane's event on the ModelDeployment).

Each unschedulable- case's whole response is in tests/functions/responses/model_deployment/;
the tests named for a rule read the field it is about.
"""

from __future__ import annotations

from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt_host import render
from tests.functions import tables
from tests.functions.test_model_deployment import (
    FLEET,
    QWEN3,
    condition,
    condition_of,
    qwen3_applied,
    qwen3_first,
    run,
    run_function_at_now,
)
from tests.functions.test_model_deployment_canary import (  # noqa: F401 (a fixture)
    _mark,
    stable,
    start_canary,
    with_status,
)
from tests.support import request as observing

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


def names() -> list[str]:
    """deploy-qwen3-8b's 3 replicas, in name order."""
    return sorted(
        o["metadata"]["name"] for o in qwen3_first().composed if o["kind"] == "ModelReplica"
    )


def reporting(name: str, *states: list[dict[str, str]]) -> tables.Case:
    """deploy-qwen3-8b once its replicas report `states`, in name order."""
    observed = qwen3_applied(ready=False)
    for replica, conds in zip(names(), states, strict=False):
        _mark(observed, lambda o, n=replica: o["metadata"]["name"] == n, conds)
    return tables.Case(f"unschedulable-{name}", observing(QWEN3, observed), tuple(FLEET))


TABLE = tables.Table(
    "model_deployment",
    run_function_at_now,
    (
        reporting("one", workloads(False, "Unschedulable", NO_DEVICES)),
        reporting(
            "over-pulling",
            workloads(False, "PullingWeights", "engine qwen3-8b stages its weights"),
            workloads(False, "Unschedulable", TAINTED),
        ),
        reporting(
            "two-and-ready",
            workloads(True, "Available"),
            workloads(False, "Unschedulable", NO_DEVICES),
            workloads(False, "Unschedulable", TAINTED),
        ),
        reporting("three", *[workloads(False, "Unschedulable", NO_DEVICES)] * 3),
        reporting("stale-on-ready", workloads(True, "Unschedulable", NO_DEVICES)),
        reporting("none-pulling", workloads(False, "PullingWeights", "engine qwen3-8b stages")),
    ),
)


def response(name: str) -> fnv1.RunFunctionResponse:
    return TABLE.response_named(f"unschedulable-{name}")


def warnings_of(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]


def warnings(out: render.Rendered) -> list[str]:
    return [r["message"] for r in out.results if r["severity"] == "SEVERITY_WARNING"]


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_an_unschedulable_replica_says_the_schedulers_message() -> None:
    rsp = response("one")
    ready = condition_of(rsp, "ReplicasReady")
    said = f"0 of 3 replicas ready; replica {names()[0]}: {NO_DEVICES}"
    assert (ready.status, ready.reason, ready.message) == (
        fnv1.STATUS_CONDITION_FALSE,
        "Unschedulable",
        said,
    )
    assert f"Unschedulable: {said}" in warnings_of(rsp)


def test_unschedulable_wins_over_pulling_weights() -> None:
    ready = condition_of(response("over-pulling"), "ReplicasReady")
    assert (ready.reason, ready.message) == (
        "Unschedulable",
        f"0 of 3 replicas ready; replica {names()[1]}: {TAINTED}",
    )


def test_at_most_two_replicas_messages_then_a_count() -> None:
    first, second, third = names()
    assert condition_of(response("two-and-ready"), "ReplicasReady").message == (
        f"1 of 3 replicas ready; replica {second}: {NO_DEVICES}; replica {third}: {TAINTED}"
    )
    assert condition_of(response("three"), "ReplicasReady").message == (
        f"0 of 3 replicas ready; replica {first}: {NO_DEVICES}; "
        f"replica {second}: {NO_DEVICES}; and 1 more replica(s) cannot be scheduled"
    )


def test_a_ready_replica_with_a_stale_unschedulable_reason_is_ignored() -> None:
    rsp = response("stale-on-ready")
    ready = condition_of(rsp, "ReplicasReady")
    assert (ready.reason, ready.message) == ("Waiting", "1 of 3 replicas ready")
    assert not [w for w in warnings_of(rsp) if w.startswith("Unschedulable")]


def test_pulling_weights_is_unchanged_without_an_unschedulable_replica() -> None:
    rsp = response("none-pulling")
    ready = condition_of(rsp, "ReplicasReady")
    assert (ready.reason, ready.message) == (
        "PullingWeights",
        f"0 of 3 replicas ready; pulling weights: {names()[0]}",
    )
    assert not [w for w in warnings_of(rsp) if w.startswith("Unschedulable")]


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
