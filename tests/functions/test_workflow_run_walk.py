"""The WorkflowRun's phase walk across an update, reconcile after reconcile.

Each reconcile runs the real function on the children's reports of the moment, and its written
status becomes the next reconcile's observed WorkflowRun, as Crossplane does. The children's
steps land between reconciles in every way they can (each seen by no reconcile, one or two);
kubectl's sequence (the phase each time it changes) must be exactly the seed's, for an update
whose new revision stages weights, one whose new revision stages nothing, a re-test in place
and a canary that fails. The function asks to be called again at once exactly while the phase
it wrote trails what it observed.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable

import pytest

from functions.workflow_run import fn, phases
from tests.functions.test_workflow_run import (
    _AWAITING,
    _FIRST,
    _PROMOTED,
    _READY,
    _ROUTED_SERVICE,
    _SCHEDULED,
    _STABLE,
    _URL,
    _children,
    _following,
    _md,
    run,
    seed,
    status,
)

PREVIOUS_RUN = "r-aaaaaaaaaa"
WAITING_GATE = {"revision": "b", "state": "Waiting", "message": "0 of 1 canary ModelReplicas ready"}
FIGURES = {
    "ttftMs": {"p50": 98.0, "p95": 131.2},
    "tpotMs": {"p50": 18.1, "p95": 20.4},
    "budgets": {"ttftMs": 250, "tpotMs": 40},
}
SEQUENCE = ["Validating", "PullingWeights", "Deploying", "SmokeTesting", "Promoting", "Ready"]
NOTHING_STAGED = ["Validating", "Deploying", "SmokeTesting", "Promoting", "Ready"]

Children = Callable[[int, str], dict[str, dict]]


def without_weights(xr: dict) -> dict:
    out = copy.deepcopy(xr)
    del out["spec"]["model"]["storageUri"]
    return out


def updated(weights: bool = True, **changes) -> dict:
    """The seed after `kubectl patch`: the last status is the previous run's, Ready."""
    xr = seed(**changes)
    xr = xr if weights else without_weights(xr)
    xr["metadata"]["generation"] = 2
    xr["status"] = {"phase": "Ready", "url": _URL, "workflowRunId": PREVIOUS_RUN}
    return xr


def _typed(md: dict, service: dict) -> dict[str, dict]:
    md, service = copy.deepcopy(md), copy.deepcopy(service)
    md["apiVersion"], md["kind"] = fn.COMPOSED_KINDS[fn.DEPLOYMENT]
    service["apiVersion"], service["kind"] = fn.COMPOSED_KINDS[fn.SERVICE]
    service.setdefault("metadata", {})["name"] = "llama"
    return {fn.DEPLOYMENT: md, fn.SERVICE: service}


def _lagging(service: dict, revisions: dict) -> dict:
    """The service as it reads while its weights are still those of `revisions`."""
    out = copy.deepcopy(service)
    out["status"]["deployments"] = [{"name": "llama", **revisions}]
    return out


def _canary(md: dict, **fields) -> dict:
    md["status"]["canary"].update(fields)
    return md


def canary_children(stage: int, run_id: str) -> dict[str, dict]:
    """What the children report at each step of an update that brings up revision b beside the
    stable a: 0 the previous run's steady deployment, 1 the canary placed (nothing started),
    2 staging its weights, 3 its engine starting, 4 ready and measured, 5 the verdict, 6
    promoted (the service still weighs a and b), 7 routed to b, 8 settled (Canary Stable)."""
    both = {"stable": "a", "canary": "b"}
    passed = {**FIGURES, "revision": "b", "run": run_id, "state": "Measured", "verdict": "Pass"}
    mode = {"mode": "Canary"}
    if stage == 0:
        md = _md({"stable": "a"}, None, _SCHEDULED, _READY, _STABLE, run_id=PREVIOUS_RUN)
        return _typed(md, _following(_ROUTED_SERVICE, md))
    if stage <= 5:
        gate = {
            1: WAITING_GATE,
            2: WAITING_GATE,
            3: WAITING_GATE,
            4: {"revision": "b", "run": run_id, "state": "Measuring"},
            5: passed,
        }[stage]
        readiness = {1: "Waiting", 2: "PullingWeights", 3: "Starting"}.get(stage, "Available")
        md = _md(both, gate, _SCHEDULED, _READY, _AWAITING, run_id=run_id)
        _canary(md, revision="b", trafficPercent=5, replicas=1, readiness=readiness, **mode)
        return _typed(md, _following(_ROUTED_SERVICE, md))
    canary_cond = _STABLE if stage == 8 else _PROMOTED
    md = _md({"stable": "b"}, passed, _SCHEDULED, _READY, canary_cond, run_id=run_id)
    _canary(md, revision="b", **mode)
    service = _lagging(_ROUTED_SERVICE, both) if stage == 6 else _following(_ROUTED_SERVICE, md)
    return _typed(md, service)


def unstaged_children(stage: int, run_id: str) -> dict[str, dict]:
    """The same update when the new revision stages nothing: its replicas are never
    PullingWeights (step 2 reads as step 1)."""
    return canary_children(1 if stage == 2 else stage, run_id)


def in_place_children(stage: int, run_id: str) -> dict[str, dict]:
    """An update that leaves the pods as they are, re-testing a in place: 0 the previous run,
    1 taken up (the gate about to measure), 2 measuring, 3 the verdict, 4 settled while the
    service still weighs a as under test, 5 settled and routed."""
    if stage == 0:
        return canary_children(0, run_id)
    passed = {**FIGURES, "revision": "a", "run": run_id, "state": "Measured", "verdict": "Pass"}
    in_place = {"revision": "a", "mode": "InPlace"}
    if stage <= 3:
        gate = {
            1: {"revision": "a", "run": run_id, "state": "Waiting", "message": "no endpoint yet"},
            2: {"revision": "a", "run": run_id, "state": "Measuring"},
            3: passed,
        }[stage]
        md = _md({"stable": "a", "canary": "a"}, gate, _SCHEDULED, _READY, _AWAITING, run_id=run_id)
        _canary(md, trafficPercent=100, replicas=1, readiness="Available", **in_place)
        return _typed(md, _following(_ROUTED_SERVICE, md))
    md = _md({"stable": "a"}, passed, _SCHEDULED, _READY, _STABLE, run_id=run_id)
    _canary(md, **in_place)
    service = _lagging(_ROUTED_SERVICE, {"stable": "a", "canary": "a"})
    return _typed(md, service if stage == 4 else _following(_ROUTED_SERVICE, md))


def failing_children(stage: int, run_id: str) -> dict[str, dict]:
    """An update whose canary misses its budgets: steps 0-4 as a passing one, 5 the Fail
    verdict, 6 rolled back (a keeps all traffic)."""
    if stage <= 4:
        return canary_children(stage, run_id)
    failed = {
        **FIGURES,
        "ttftMs": {"p50": 398.5, "p95": 412.0},
        "revision": "b",
        "run": run_id,
        "state": "Measured",
        "verdict": "Fail",
        "reason": "p95 TTFT 412 ms over the 250 ms budget",
    }
    if stage == 5:
        md = _md(
            {"stable": "a", "canary": "b"}, failed, _SCHEDULED, _READY, _AWAITING, run_id=run_id
        )
        _canary(
            md, revision="b", trafficPercent=5, replicas=1, readiness="Available", mode="Canary"
        )
    else:
        rolled_back = {"type": "Canary", "status": "False", "reason": "RolledBack"}
        md = _md({"stable": "a"}, failed, _SCHEDULED, _READY, rolled_back, run_id=run_id)
        _canary(md, revision="b", mode="Canary")
    return _typed(md, _following(_ROUTED_SERVICE, md))


def first_rollout_children(stage: int, run_id: str) -> dict[str, dict]:
    """tests/functions/test_workflow_run.py's first rollout, typed the same way."""
    return _children(stage, run_id)


def walk(xr: dict, children: Children, seen: tuple[int, ...]) -> list[str]:
    """kubectl's sequence when the reconciles see the children's steps `seen`, each reconcile's
    written status the next one's observed XR. Checks on the way that the function asks to be
    called again at once exactly when the next reconcile, seeing the same, moves on."""
    written = [xr["status"]["phase"]] if xr.get("status") else []
    run_id = (xr.get("status") or {}).get("workflowRunId", "")
    last: tuple[int, str, int] | None = None
    for stage in seen:
        rsp = run(xr, children(stage, run_id))
        st = status(rsp)
        ttl = rsp.meta.ttl.ToMilliseconds()
        if last is not None and last[0] == stage:
            moved = st["phase"] != last[1]
            assert (last[2] == 1000) == moved, (seen, stage, last, st["phase"])
        run_id = st["workflowRunId"]
        if not written or written[-1] != st["phase"]:
            written.append(st["phase"])
        xr = copy.deepcopy(xr)
        xr["status"] = st
        last = (stage, st["phase"], ttl)
    return written


def interleavings(steps: range, last: int, settle: int = 6) -> list[tuple[int, ...]]:
    """Step 0 seen by the first reconcile; each of `steps` by no reconcile, one or two; then
    `last`, which stays observed for `settle` reconciles."""
    out = []
    for counts in itertools.product((0, 1, 2), repeat=len(steps)):
        seen = [0]
        for stage, n in zip(steps, counts, strict=True):
            seen += [stage] * n
        out.append((*seen, *[last] * settle))
    return out


UPDATES = interleavings(range(1, 8), 8)


@pytest.mark.parametrize("chunk", range(9))
def test_an_update_that_stages_weights_walks_the_seeds_sequence(chunk: int) -> None:
    assert len(UPDATES) == 3**7
    for seen in UPDATES[chunk::9]:
        got = walk(updated(model__quantization="fp8"), canary_children, seen)
        assert got == ["Ready", *SEQUENCE], (seen, got)


@pytest.mark.parametrize("chunk", range(9))
def test_an_update_that_stages_nothing_passes_over_pulling_weights(chunk: int) -> None:
    for seen in UPDATES[chunk::9]:
        xr = updated(weights=False, model__quantization="fp8")
        got = walk(xr, unstaged_children, seen)
        assert got == ["Ready", *NOTHING_STAGED], (seen, got)


def test_a_re_test_in_place_is_validating_smoke_testing_ready() -> None:
    """Nothing starts and no traffic moves: PullingWeights, Deploying and Promoting do not
    apply, whatever lands between two reconciles (a re-test of a serving engine takes seconds)."""
    runs = interleavings(range(1, 5), 5)
    for seen in runs:
        got = walk(updated(canary__smokeTest__ttftBudgetMs=200), in_place_children, seen)
        assert got == ["Ready", "Validating", "SmokeTesting", "Ready"], (seen, got)
    assert len(runs) == 3**4


def test_a_failing_canary_shows_its_smoke_test_before_rolled_back() -> None:
    runs = interleavings(range(1, 6), 6)
    for seen in runs:
        got = walk(updated(model__quantization="fp8"), failing_children, seen)
        assert got == ["Ready", *SEQUENCE[:4], "RolledBack"], (seen, got)


def test_smoke_testing_before_rolled_back_says_the_failed_figures() -> None:
    xr = updated(model__quantization="fp8")
    got, run_id = [], ""
    for stage in (0, 3, 3, 6, 6):
        rsp = run(xr, failing_children(stage, run_id))
        st = status(rsp)
        run_id = st["workflowRunId"]
        (serving,) = [c.message for c in rsp.conditions if c.type == "Serving"]
        got.append((st["phase"], serving))
        xr = copy.deepcopy(xr)
        xr["status"] = st
    assert [g[0] for g in got] == [*SEQUENCE[:4], "RolledBack"]
    assert got[3][1] == (
        "the latency gate measured revision b: Fail (TTFT p50 398.5 ms, p95 412 ms (budget 250 "
        "ms); TPOT p50 18.1 ms, p95 20.4 ms (budget 40 ms)): p95 TTFT 412 ms over the 250 ms "
        "budget"
    )


@pytest.mark.parametrize("chunk", range(3))
def test_a_first_rollout_that_stages_nothing_passes_over_pulling_weights(chunk: int) -> None:
    """Without storageUri nothing is staged: the first rollout's replicas go from created to
    starting (steps 1 and 3 of the first rollout's children, never 2)."""
    runs = interleavings(range(1, 7), 7)[chunk::3]
    for seen in runs:
        unstaged = tuple(1 if s == 2 else s for s in seen)
        got = walk(without_weights(seed()), first_rollout_children, unstaged)
        assert got == NOTHING_STAGED, (unstaged, got)


def test_smoke_testing_written_on_the_way_carries_the_verdicts_figures() -> None:
    """Seen from Validating, the canary's engine already starting: PullingWeights first; seen
    from Deploying, the canary already promoted: SmokeTesting first, saying what the gate
    measured, then Promoting, then Ready, each reconcile asking for the next at once."""
    xr = updated(model__quantization="fp8")
    got = []
    run_id = ""
    for stage in (0, 3, 3, 7, 7, 7):
        rsp = run(xr, canary_children(stage, run_id))
        st = status(rsp)
        run_id = st["workflowRunId"]
        (serving,) = [c.message for c in rsp.conditions if c.type == "Serving"]
        ttl = rsp.meta.ttl.ToMilliseconds()
        got.append((st["phase"], serving, st.get("url"), ttl))
        xr = copy.deepcopy(xr)
        xr["status"] = st
    assert [g[0] for g in got] == SEQUENCE
    assert got[1][1] == (
        "revision b staged its model weights; further along already: starting canary revision "
        "b: 0 of 1 canary ModelReplicas ready"
    )
    assert got[3][1] == (
        "the latency gate measured revision b: Pass (TTFT p50 98 ms, p95 131.2 ms (budget "
        "250 ms); TPOT p50 18.1 ms, p95 20.4 ms (budget 40 ms)); promoting it"
    )
    assert (
        got[4][1] == "revision b passed the latency gate and its traffic has followed; Ready next"
    )
    assert [g[2] for g in got] == [_URL] * 6  # an update keeps serving at the endpoint
    # asked for at once while the written step trails what is observed, and only then
    assert [g[3] for g in got] == [60000, 1000, 60000, 1000, 1000, 60000]


def test_after_ready_a_restarting_replica_is_told_under_ready() -> None:
    """The run's walk ends at Ready and never steps back: a replica of the settled deployment
    that restarts (or one the autoscaler adds) is said in the message, not walked again."""
    xr = updated(model__quantization="fp8")
    xr["status"] = status(run(xr, canary_children(8, "")))
    run_id = xr["status"]["workflowRunId"]
    xr["status"]["phase"] = "Ready"
    settled = canary_children(8, run_id)
    restarting = copy.deepcopy(settled)
    restarting[fn.DEPLOYMENT]["status"]["conditions"][1] = {
        "type": "ReplicasReady",
        "status": "False",
        "reason": "Starting",
        "message": "0 of 1 replicas ready; engines starting: llama-b-0",
    }
    got = []
    for children in (restarting, restarting, settled):
        rsp = run(xr, children)
        st = status(rsp)
        (serving,) = [c.message for c in rsp.conditions if c.type == "Serving"]
        got.append((st["phase"], serving, st.get("url")))
        xr = copy.deepcopy(xr)
        xr["status"] = st
    said = (
        "the run is complete and its endpoint serves; now: starting engines: 0 of 1 replicas "
        "ready; engines starting: llama-b-0"
    )
    assert got == [
        ("Ready", said, _URL),
        ("Ready", said, _URL),
        ("Ready", f"serving at {_URL}", _URL),
    ]


def test_pending_during_an_update_resumes_the_walk_after_validating() -> None:
    xr = updated(model__quantization="fp8")
    unplaced = {"type": "ReplicasScheduled", "status": "False", "message": "no cluster fits"}
    got, run_id = [], ""
    for stage in (0, "pending", 3, 4, 8):
        if stage == "pending":
            children = canary_children(1, run_id)
            children[fn.DEPLOYMENT]["status"]["conditions"][0] = unplaced
        else:
            children = canary_children(stage, run_id)
        st = status(run(xr, children))
        run_id = st["workflowRunId"]
        got.append(st["phase"])
        xr = copy.deepcopy(xr)
        xr["status"] = st
    assert got == ["Validating", "Pending", "PullingWeights", "Deploying", "SmokeTesting"]


def test_pending_after_ready_goes_back_to_ready_without_a_second_walk() -> None:
    """A scale-up that cannot be placed after Ready is Pending; once placed, the settled
    deployment has nothing of the run left to show."""
    xr = updated(model__quantization="fp8")
    xr["status"] = status(run(xr, canary_children(8, "")))
    run_id = xr["status"]["workflowRunId"]
    xr["status"]["phase"] = "Ready"
    settled = canary_children(8, run_id)
    unplaced = copy.deepcopy(settled)
    unplaced[fn.DEPLOYMENT]["status"]["conditions"][0] = {
        "type": "ReplicasScheduled",
        "status": "False",
        "message": "placed 1 of 2 replicas",
    }
    got = []
    for children in (unplaced, settled, settled):
        st = status(run(xr, children))
        got.append(st["phase"])
        xr = copy.deepcopy(xr)
        xr["status"] = st
    assert got == ["Pending", "Ready", "Ready"]


def test_a_verdict_of_another_run_is_not_this_runs() -> None:
    other = _md({"stable": "b"}, None, _SCHEDULED, _READY, _PROMOTED, run_id="r-other")
    phase = phases.derive(
        other,
        _following(_ROUTED_SERVICE, other),
        "r-0123456789",
        {"phase": "Validating", "workflowRunId": "r-0123456789", "url": _URL},
    )
    assert phase.name == "Validating"


def test_without_a_written_phase_the_target_is_written_as_is() -> None:
    """A new object, or a preview (`plnt render`): nothing to walk from."""
    md = _md(_FIRST, {"revision": "b", "state": "Measuring"}, _SCHEDULED, _READY, _AWAITING)
    assert phases.derive(md, None, "r-0123456789").name == "SmokeTesting"


def test_after_ready_a_deployment_that_cannot_be_reconciled_is_told_under_ready() -> None:
    """A complete run keeps serving while its ModelDeployment cannot be reconciled for a while
    (Crossplane fails a reconcile while a function's new revision activates during an
    upgrade): the run stays Ready and says why, and a fresh run still shows Failed."""
    xr = updated(model__quantization="fp8")
    xr["status"] = status(run(xr, canary_children(8, "")))
    run_id = xr["status"]["workflowRunId"]
    xr["status"]["phase"] = "Ready"
    settled = canary_children(8, run_id)
    failing = copy.deepcopy(settled)
    failing[fn.DEPLOYMENT]["status"]["conditions"].append(
        {
            "type": "Synced",
            "status": "False",
            "reason": "ReconcileError",
            "message": "cannot run Composition pipeline step: function not ready",
        }
    )
    got = []
    for children in (failing, settled):
        rsp = run(xr, children)
        st = status(rsp)
        (serving,) = [c.message for c in rsp.conditions if c.type == "Serving"]
        got.append((st["phase"], serving, st.get("url")))
        xr = copy.deepcopy(xr)
        xr["status"] = st
    said = (
        "the run is complete and its endpoint serves; now: the ModelDeployment cannot be "
        "reconciled: cannot run Composition pipeline step: function not ready"
    )
    assert got == [("Ready", said, _URL), ("Ready", f"serving at {_URL}", _URL)]

    fresh = updated(model__quantization="fp8")  # the last status is another run's Ready
    assert status(run(fresh, failing))["phase"] == "Failed"
