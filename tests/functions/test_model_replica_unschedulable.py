"""A bound replica whose pods the kube-scheduler cannot place.

While an engine has fewer available copies than it wants and its workload has created pods,
the replica watches the engine's pods (an ObservedObjectCollection); a pod whose PodScheduled
condition is False with reason Unschedulable makes WorkloadsReady say so, with the scheduler's
message verbatim, and a Warning result (Crossplane's event on the ModelReplica).

Each case's whole response is in tests/functions/responses/model_replica/ (its name starting
`unschedulable-`); the tests named for a rule read the field it is about.
"""

from __future__ import annotations

import copy

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn, staging
from plnt import conditions
from tests.functions import tables
from tests.functions.test_model_replica import GANG, READY, bound_case, composed, condition, run
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


def starting(name: str, *pods: dict, status: dict = STARTING, xr: dict = READY.xr) -> tables.Case:
    """The ready example, its workload in `status` (starting), `pods` observed."""
    observed = observed_workload(READY, "workload-qwen3-8b", "Deployment", status)
    return bound_case(name, xr, [*READY.required, *pods], observed)


def with_copies(xr: dict, copies: int) -> dict:
    out = copy.deepcopy(xr)
    out["spec"]["engines"][0]["copies"] = copies
    return out


SCHEDULED = [{"type": "PodScheduled", "status": "True"}]
RUNNING = {"running": {"startedAt": "2026-12-02T00:00:00Z"}}
MESSAGES = {"unschedulable-no-devices": NO_DEVICES, "unschedulable-taint": TAINTED}
PENDING = {  # case: the pod's conditions, pending for another reason than the scheduler's
    "unschedulable-pending-no-conditions-yet": [],
    "unschedulable-pending-gated": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ],
}
PLACED = {  # case: the conditions of a pod on a node
    "unschedulable-placed-scheduled": SCHEDULED,
    "unschedulable-placed-other-condition-type": [
        *SCHEDULED,
        {**UNSCHEDULABLE, "type": "Ready"},
    ],
}
GANG_OBSERVED = observed_workload(
    GANG, "workload-llama-405b", "LeaderWorkerSet", {"replicas": 1, "readyReplicas": 0}
)
GANG_COLLECTION = "llama-405b-coreweave-h100-0-llama-405b-pods"
GANG_LEADER = "llama-405b-0"

TABLE = tables.Table(
    "model_replica",
    fn.run_function,
    (
        *(
            starting(name, pod(conds=[{**UNSCHEDULABLE, "message": message}]))
            for name, message in MESSAGES.items()
        ),
        starting("unschedulable-serving", status={"replicas": 1, "availableReplicas": 1}),
        starting(
            "unschedulable-first-by-name",
            pod(POD[:-5] + "zzzzz", [UNSCHEDULABLE]),
            pod(POD[:-5] + "aaaaa", [{**UNSCHEDULABLE, "message": TAINTED}]),
        ),
        starting(
            "unschedulable-one-of-two-copies",
            pod(conds=[UNSCHEDULABLE]),
            status={"replicas": 2, "availableReplicas": 1},
            xr=with_copies(READY.xr, 2),
        ),
        *(starting(name, pod(conds=conds)) for name, conds in PENDING.items()),
        *(starting(name, pod(conds=conds)) for name, conds in PLACED.items()),
        starting(
            "unschedulable-one-placed-one-not",
            pod(conds=SCHEDULED),
            pod(name=POD[:-5] + "zzzzz", conds=[]),
            status={"replicas": 2, "availableReplicas": 0},
        ),
        starting(
            "unschedulable-staging-pod",
            pod(conds=SCHEDULED, init_state=RUNNING),
            xr=with_weights(READY.xr, uri=S3),
        ),
        starting(
            "unschedulable-staging-pod-unschedulable",
            pod(conds=[UNSCHEDULABLE]),
            xr=with_weights(READY.xr, uri=S3),
        ),
        starting(
            "unschedulable-other-collection",
            pod(conds=[UNSCHEDULABLE], collection="someone-elses-pods"),
        ),
        starting(
            "unschedulable-no-pods-created", pod(conds=[UNSCHEDULABLE]), status={"replicas": 0}
        ),
        starting(
            "unschedulable-every-copy-available",
            pod(conds=[UNSCHEDULABLE]),
            status={"replicas": 1, "availableReplicas": 1},
        ),
        bound_case(
            "unschedulable-gang-leader",
            GANG.xr,
            [
                *GANG.required,
                pod(
                    GANG_LEADER,
                    [{**UNSCHEDULABLE, "message": TAINTED}],
                    collection=GANG_COLLECTION,
                ),
            ],
            GANG_OBSERVED,
        ),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


@pytest.mark.parametrize("name", MESSAGES)
def test_an_unschedulable_pod_says_the_schedulers_message(name: str) -> None:
    message = MESSAGES[name]
    rsp = response(name)
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
    rsp = response("unschedulable-serving")
    assert "pods-qwen3-8b" not in composed(rsp)
    assert rsp.meta.ttl.ToMilliseconds() == fn.REST_TTL_S * 1000


def test_the_first_unschedulable_pod_by_name_is_named() -> None:
    earlier = POD[:-5] + "aaaaa"
    rsp = response("unschedulable-first-by-name")
    assert condition(rsp, conditions.WORKLOADS_READY).message == (
        f"engine qwen3-8b: pod {earlier} cannot be scheduled: {TAINTED}"
    )


def test_one_copy_available_and_one_unschedulable_is_unschedulable() -> None:
    rsp = response("unschedulable-one-of-two-copies")
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.reason == "Unschedulable"
    assert cond.message == f"engine qwen3-8b: pod {POD} cannot be scheduled: {NO_DEVICES}"


@pytest.mark.parametrize("name", PENDING)
def test_pods_pending_for_other_reasons_keep_todays_message(name: str) -> None:
    rsp = response(name)
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (conditions.WAITING, WAITS)
    assert warnings(rsp) == []


@pytest.mark.parametrize("name", PLACED)
def test_placed_pods_of_an_engine_that_stages_nothing_are_starting(name: str) -> None:
    """Its pods are on nodes and nothing is downloaded first: the engine itself starts."""
    rsp = response(name)
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (
        conditions.STARTING,
        "engine qwen3-8b is starting: its Deployment qwen3-8b-eks-l4-0-qwen3-8b has pods on "
        "nodes, 0/1 copies available",
    )
    assert warnings(rsp) == []


def test_one_pod_placed_and_one_not_is_waiting_not_starting() -> None:
    rsp = response("unschedulable-one-placed-one-not")
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.WAITING


def test_a_staging_pod_still_says_pulling_weights() -> None:
    rsp = response("unschedulable-staging-pod")
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
    rsp = response("unschedulable-staging-pod-unschedulable")
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.reason == "Unschedulable"
    assert cond.message == f"engine qwen3-8b: pod {POD} cannot be scheduled: {NO_DEVICES}"


def test_an_unschedulable_pod_of_another_collection_does_not_count() -> None:
    rsp = response("unschedulable-other-collection")
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == (conditions.WAITING, WAITS)


def test_no_pods_created_yet_watches_nothing() -> None:
    rsp = response("unschedulable-no-pods-created")
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.WAITING
    assert "pods-qwen3-8b" not in rsp.desired.resources
    assert "pods-qwen3-8b" not in rsp.requirements.resources


def test_every_copy_available_watches_nothing() -> None:
    rsp = response("unschedulable-every-copy-available")
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.AVAILABLE
    assert "pods-qwen3-8b" not in rsp.desired.resources
    assert warnings(rsp) == []


def test_a_gang_whose_leader_cannot_be_scheduled() -> None:
    first = run(GANG.xr, GANG.required, GANG_OBSERVED)
    wanted = first.requirements.resources["pods-llama-405b"]
    collection = wanted.match_labels.labels["kubernetes.crossplane.io/owned-by-collection"]
    assert collection == GANG_COLLECTION  # the collection the case's pod is in
    leader = GANG_LEADER
    rsp = response("unschedulable-gang-leader")
    said = f"engine llama-405b: pod {leader} cannot be scheduled: {TAINTED}"
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.reason, cond.message) == ("Unschedulable", said)
    assert warnings(rsp) == [said]
