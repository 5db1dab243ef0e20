"""A bound replica whose pods the kube-scheduler cannot place.

While an engine has fewer available copies than it wants and its workload has created pods,
the replica watches the engine's pods (an ObservedObjectCollection); a pod whose PodScheduled
condition is False with reason Unschedulable makes WorkloadsReady say so, with the scheduler's
message verbatim, and a Warning result (Crossplane's event on the ModelReplica).
"""

from __future__ import annotations

import copy

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn, staging
from plnt import conditions
from tests.functions.test_model_replica import GANG, READY, composed, condition, run
from tests.functions.test_model_replica_weights import (
    S3,
    STARTING,
    observed_workload,
    warnings,
    with_weights,
)

COLLECTION = "qwen3-8b-eks-l4-0-qwen3-8b-pods"
POD = "qwen3-8b-eks-l4-0-qwen3-8b-7d9f8c6b5-x2k4q"
# what the kube-scheduler writes, verbatim: DRA claims it cannot allocate, and a taint
NO_DEVICES = (
    "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are "
    "available: 1 Preemption is not helpful for scheduling."
)
TAINTED = (
    "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}. "
    "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
)
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": NO_DEVICES,
}
WAITS = "engine qwen3-8b waits for its Deployment qwen3-8b-eks-l4-0-qwen3-8b: 0/1 copies available"


def pod(
    name: str = POD,
    conds: list[dict] | None = None,
    init_state: dict | None = None,
    collection: str = COLLECTION,
) -> dict:
    """The observe-only Object provider-kubernetes keeps for one pod of a collection."""
    status: dict = {"phase": "Pending", "conditions": conds or []}
    if init_state is not None:
        status["initContainerStatuses"] = [{"name": staging.INIT_CONTAINER, "state": init_state}]
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {
            "name": f"{collection}-{name[-5:]}",
            "namespace": "ml-team",
            "labels": {"kubernetes.crossplane.io/owned-by-collection": collection},
        },
        "status": {
            "atProvider": {
                "manifest": {"kind": "Pod", "metadata": {"name": name}, "status": status}
            }
        },
    }


def starting(xr: dict, *pods: dict, status: dict = STARTING) -> fnv1.RunFunctionResponse:
    observed = observed_workload(READY, "workload-qwen3-8b", "Deployment", status)
    return run(xr, [*READY.required, *pods], observed)


@pytest.mark.parametrize("message", [NO_DEVICES, TAINTED], ids=["no-devices", "taint"])
def test_an_unschedulable_pod_says_the_schedulers_message(message: str) -> None:
    rsp = starting(READY.xr, pod(conds=[{**UNSCHEDULABLE, "message": message}]))
    said = f"engine qwen3-8b: pod {POD} cannot be scheduled: {message}"
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.status, cond.reason, cond.message) == (
        fnv1.STATUS_CONDITION_FALSE,
        "Unschedulable",
        said,
    )
    assert warnings(rsp) == [said]
    # the pods of an engine without a weights init container are watched too
    assert composed(rsp)["pods-qwen3-8b"]["kind"] == "ObservedObjectCollection"
    assert rsp.desired.resources["workload-qwen3-8b"].ready == fnv1.READY_FALSE
    # and read again within seconds: a change to their Objects does not call the function
    assert rsp.meta.ttl.ToMilliseconds() == 10_000


def test_a_serving_replica_watches_no_pods_and_asks_for_the_rest_ttl() -> None:
    rsp = starting(READY.xr, status={"replicas": 1, "availableReplicas": 1})
    assert "pods-qwen3-8b" not in composed(rsp)
    assert rsp.meta.ttl.ToMilliseconds() == fn.REST_TTL_S * 1000


def test_the_first_unschedulable_pod_by_name_is_named() -> None:
    later = POD[:-5] + "zzzzz"
    earlier = POD[:-5] + "aaaaa"
    rsp = starting(
        READY.xr,
        pod(later, [UNSCHEDULABLE]),
        pod(earlier, [{**UNSCHEDULABLE, "message": TAINTED}]),
    )
    assert condition(rsp, conditions.WORKLOADS_READY).message == (
        f"engine qwen3-8b: pod {earlier} cannot be scheduled: {TAINTED}"
    )


def test_one_copy_available_and_one_unschedulable_is_unschedulable() -> None:
    xr = copy.deepcopy(READY.xr)
    xr["spec"]["engines"][0]["copies"] = 2
    rsp = starting(xr, pod(conds=[UNSCHEDULABLE]), status={"replicas": 2, "availableReplicas": 1})
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.reason == "Unschedulable"
    assert cond.message == f"engine qwen3-8b: pod {POD} cannot be scheduled: {NO_DEVICES}"


@pytest.mark.parametrize(
    "conds",
    [
        pytest.param([], id="no-conditions-yet"),
        pytest.param(
            [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
            id="gated",
        ),
    ],
)
def test_pods_pending_for_other_reasons_keep_todays_message(conds: list[dict]) -> None:
    rsp = starting(READY.xr, pod(conds=conds))
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (conditions.WAITING, WAITS)
    assert warnings(rsp) == []


@pytest.mark.parametrize(
    "conds",
    [
        pytest.param([{"type": "PodScheduled", "status": "True"}], id="scheduled"),
        pytest.param(
            [{"type": "PodScheduled", "status": "True"}, {**UNSCHEDULABLE, "type": "Ready"}],
            id="other-condition-type",
        ),
    ],
)
def test_placed_pods_of_an_engine_that_stages_nothing_are_starting(conds: list[dict]) -> None:
    """Its pods are on nodes and nothing is downloaded first: the engine itself starts."""
    rsp = starting(READY.xr, pod(conds=conds))
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (
        conditions.STARTING,
        "engine qwen3-8b is starting: its Deployment qwen3-8b-eks-l4-0-qwen3-8b has pods on "
        "nodes, 0/1 copies available",
    )
    assert warnings(rsp) == []


def test_one_pod_placed_and_one_not_is_waiting_not_starting() -> None:
    scheduled = pod(conds=[{"type": "PodScheduled", "status": "True"}])
    waiting = pod(name=POD[:-5] + "zzzzz", conds=[])
    rsp = starting(READY.xr, scheduled, waiting, status={"replicas": 2, "availableReplicas": 0})
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.WAITING


def test_a_staging_pod_still_says_pulling_weights() -> None:
    scheduled = [{"type": "PodScheduled", "status": "True"}]
    running = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
    rsp = starting(with_weights(READY.xr, uri=S3), pod(conds=scheduled, init_state=running))
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (
        conditions.PULLING_WEIGHTS,
        "engine qwen3-8b stages its weights from s3://plnt-models/qwen3-8b/bf16 into /models "
        "before it starts: its Deployment qwen3-8b-eks-l4-0-qwen3-8b has pods, 0/1 copies "
        "available",
    )
    assert warnings(rsp) == []


def test_an_unschedulable_staging_pod_is_unschedulable_not_pulling() -> None:
    """It never starts its init container: the scheduler, not the download, is the wait."""
    rsp = starting(with_weights(READY.xr, uri=S3), pod(conds=[UNSCHEDULABLE]))
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.reason == "Unschedulable"
    assert cond.message == f"engine qwen3-8b: pod {POD} cannot be scheduled: {NO_DEVICES}"


def test_an_unschedulable_pod_of_another_collection_does_not_count() -> None:
    rsp = starting(READY.xr, pod(conds=[UNSCHEDULABLE], collection="someone-elses-pods"))
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (conditions.WAITING, WAITS)


def test_no_pods_created_yet_watches_nothing() -> None:
    rsp = starting(READY.xr, pod(conds=[UNSCHEDULABLE]), status={"replicas": 0})
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.WAITING
    assert "pods-qwen3-8b" not in rsp.desired.resources
    assert "pods-qwen3-8b" not in rsp.requirements.resources


def test_every_copy_available_watches_nothing() -> None:
    rsp = starting(
        READY.xr, pod(conds=[UNSCHEDULABLE]), status={"replicas": 1, "availableReplicas": 1}
    )
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.AVAILABLE
    assert "pods-qwen3-8b" not in rsp.desired.resources
    assert warnings(rsp) == []


def test_a_gang_whose_leader_cannot_be_scheduled() -> None:
    observed = observed_workload(
        GANG, "workload-llama-405b", "LeaderWorkerSet", {"replicas": 1, "readyReplicas": 0}
    )
    first = run(GANG.xr, GANG.required, observed)
    wanted = first.requirements.resources["pods-llama-405b"]
    collection = wanted.match_labels.labels["kubernetes.crossplane.io/owned-by-collection"]
    leader = "llama-405b-0"
    stuck = pod(leader, [{**UNSCHEDULABLE, "message": TAINTED}], collection=collection)
    rsp = run(GANG.xr, [*GANG.required, stuck], observed)
    said = f"engine llama-405b: pod {leader} cannot be scheduled: {TAINTED}"
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == ("Unschedulable", said)
    assert warnings(rsp) == [said]
