"""A WorkflowRun whose ModelDeployment's ReplicasReady reason is Unschedulable (issue 24, point
6): the phase is what the rules give; the message is the scheduler's, not "starting engines"."""

from __future__ import annotations

import pytest

from functions.workflow_run import phases
from tests.functions.test_workflow_run import _AWAITING, _FIRST, _SCHEDULED, _md

WHY = (
    "0 of 1 replicas ready; replica llama-abc12-0: engine vllm: pod llama-abc12-0-vllm-x2k4q "
    "cannot be scheduled: 0/1 nodes are available: 1 cannot allocate all claims. preemption: "
    "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)
UNSCHEDULABLE = {
    "type": "ReplicasReady",
    "status": "False",
    "reason": "Unschedulable",
    "message": WHY,
}
WAITING = {**UNSCHEDULABLE, "reason": "Waiting", "message": "0 of 1 replicas ready"}
SAID = f"the kube-scheduler cannot place the engines' pods: {WHY}"


def test_a_steady_revision_says_the_scheduler_not_starting_engines() -> None:
    md = {"status": {"revisions": {"stable": "a"}, "conditions": [_SCHEDULED, UNSCHEDULABLE]}}
    phase = phases.derive(md, None)
    assert (phase.name, phase.message) == ("Deploying", SAID)
    waiting = {"status": {"revisions": {"stable": "a"}, "conditions": [_SCHEDULED, WAITING]}}
    assert phases.derive(waiting, None).message == "starting engines: 0 of 1 replicas ready"


def test_a_first_revision_says_the_scheduler() -> None:
    md = _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, UNSCHEDULABLE, _AWAITING)
    phase = phases.derive(md, None)
    assert (phase.name, phase.message) == ("Deploying", f"starting first revision b: {SAID}")


@pytest.mark.parametrize(
    ("previous", "unschedulable", "message"),
    [
        pytest.param("Pending", True, f"starting first revision b: {SAID}", id="after-pending"),
        pytest.param(
            "Pending",
            False,
            "the replicas are created; their weights are staged before the engines start",
            id="after-pending-waiting",
        ),
        pytest.param(
            "PullingWeights", True, f"starting first revision b: {SAID}", id="after-pulling"
        ),
        pytest.param(
            "PullingWeights",
            False,
            "staging and loading model weights: 0 of 1 replicas ready",
            id="after-pulling-waiting",
        ),
    ],
)
def test_a_first_rollout_keeps_its_phase_and_says_the_scheduler(
    previous: str, unschedulable: bool, message: str
) -> None:
    ready = UNSCHEDULABLE if unschedulable else WAITING
    md = _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, ready, _AWAITING)
    phase = phases.derive(md, None, previous=previous, first_rollout=True)
    assert (phase.name, phase.message) == ("PullingWeights", message)
