"""A WorkflowRun whose ModelDeployment's ReplicasReady reason is Unschedulable: the
phase is what the rules give; the message is the scheduler's, not "starting engines"."""

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
            "first revision b: the replicas are placed; their weights stage before the engines "
            "start: its replicas are not ready",
            id="after-pending-waiting",
        ),
        pytest.param(
            "PullingWeights", True, f"starting first revision b: {SAID}", id="after-pulling"
        ),
    ],
)
def test_a_first_rollout_that_stages_weights_says_the_scheduler_under_pulling_weights(
    previous: str, unschedulable: bool, message: str
) -> None:
    """Nothing has started while a pod cannot be placed: with weights to stage, staging is
    what comes next, and the message is the scheduler's."""
    ready = UNSCHEDULABLE if unschedulable else WAITING
    md = _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, ready, _AWAITING)
    phase = phases.derive(md, None, written={"phase": previous}, stages_weights=True)
    assert (phase.name, phase.message) == ("PullingWeights", message)


def test_without_weights_to_stage_an_unplaceable_first_revision_is_deploying() -> None:
    md = _md(_FIRST, {"state": "Waiting"}, _SCHEDULED, UNSCHEDULABLE, _AWAITING)
    phase = phases.derive(md, None, written={"phase": "Validating"}, stages_weights=False)
    assert (phase.name, phase.message) == ("Deploying", f"starting first revision b: {SAID}")
