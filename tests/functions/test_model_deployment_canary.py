"""Revisions in ModelDeployment: canary start, promotion, rollback, roll-through, supersession.

Each canary- case's whole response is in tests/functions/responses/model_deployment/, beside
test_model_deployment's; the tests named for a rule read the field it is about.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import revisions
from plnt import xp
from plnt.models.model_deployment import ModelDeploymentSpec
from plnt.revision import revision
from plnt_host import render
from tests.functions import tables
from tests.functions.test_model_deployment import (
    FLEET,
    SCHEDULE_ONLY,
    as_observed,
    composed,
    condition,
    condition_of,
    of_kind,
    run,
    run_function_at_now,
    scenario,
)
from tests.support import request as observing

GATE_FIGURES = {
    "reason": "p95 TTFT 412.0 ms over the 250 ms budget",
    "ttftMs": {"p50": 398.5, "p95": 412.0},
    "tpotMs": {"p50": 18.1, "p95": 21.7},
    "budgets": {"ttftMs": 250, "tpotMs": 40},
    "measuredAt": "2024-01-01T00:00:00Z",
}


def deployment(replicas: int = 4, *, canary: bool = True, flag: str = "") -> dict[str, Any]:
    xr = copy.deepcopy(scenario("deploy-qwen3-8b").xr)
    xr["spec"]["replicas"] = replicas
    if canary:
        xr["spec"]["canary"] = {
            "trafficPercent": 25,
            "smokeTest": {"prompts": 10, "ttftBudgetMs": 250, "tpotBudgetMs": 40},
        }
    if flag:
        xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["args"].append(
            flag
        )
    return xr


def by_revision(out: render.Rendered, kind: str = "ModelReplica") -> Counter[str]:
    return Counter(
        o["metadata"]["labels"]["modelplane.ai/revision"] for o in of_kind(out, kind).values()
    )


@functools.cache
def stable_state() -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Revision A running 4 replicas, all Ready, remembered in the XR status."""
    xr = deployment()
    out = run(xr)
    rev = revision(xr["spec"])
    assert by_revision(out) == {rev: 4}
    return xr, as_observed(out.composed), rev


@pytest.fixture
def stable() -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    return copy.deepcopy(stable_state())


def with_status(xr: dict[str, Any], **status: Any) -> dict[str, Any]:
    out = copy.deepcopy(xr)
    out["status"] = status
    return out


def start_canary(stable) -> tuple[dict[str, Any], list[dict[str, Any]], str, str]:
    _, observed, rev_a = stable
    changed = deployment(flag="--enable-prefix-caching")
    rev_b = revision(changed["spec"])
    out = run(with_status(changed, revisions={"stable": rev_a}), observed)
    return changed, observed + as_observed(out.composed), rev_a, rev_b


# --- the cases: a canary started from revision A, and what the gate says of it ----------------


def canary_case(name: str, xr: dict[str, Any], observed: list[dict[str, Any]]) -> tables.Case:
    return tables.Case(f"canary-{name}", observing(xr, observed), tuple(FLEET))


def changed_from_stable(**changes: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Revision A's observed replicas under a changed spec (`deployment`'s keywords)."""
    _, observed, rev_a = copy.deepcopy(stable_state())
    return with_status(deployment(**changes), revisions={"stable": rev_a}), observed


def under_test(
    gate_revision: str | None = None, verdict: str = "Pass", newer: str = ""
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Revision B under test beside A: its gate's verdict (for B unless `gate_revision`), or
    a `newer` spec's flag superseding it."""
    changed, observed, rev_a, rev_b = start_canary(copy.deepcopy(stable_state()))
    status: dict[str, Any] = {"revisions": {"stable": rev_a, "canary": rev_b}}
    if gate_revision is not None:
        gate = {"verdict": verdict, "revision": gate_revision or rev_b, **GATE_FIGURES}
        status["canary"] = {"gate": gate}
    return with_status(deployment(flag=newer) if newer else changed, **status), observed


def canary_example() -> tables.Case:
    s = scenario("deploy-canary")
    return tables.Case("canary-example", observing(s.xr, s.observed), tuple(s.required))


TABLE = tables.Table(
    "model_deployment",
    run_function_at_now,
    (
        canary_case("started", *changed_from_stable(flag="--enable-prefix-caching")),
        canary_case(
            "stable-from-labels",
            deployment(flag="--x"),  # no status: the XR was just restored
            copy.deepcopy(stable_state()[1]),
        ),
        canary_case("passed", *under_test("")),
        canary_case("failed", *under_test("", "Fail")),
        canary_case("verdict-for-another-revision", *under_test("0000000000")),
        canary_case("superseded", *under_test(newer="--max-num-seqs=128")),
        canary_case(
            "off-rolls-through",
            *changed_from_stable(canary=False, flag="--enable-prefix-caching"),
        ),
        canary_example(),
    ),
)


def response(name: str) -> fnv1.RunFunctionResponse:
    return TABLE.response_named(f"canary-{name}")


def status_of(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    return xp.to_dict(rsp.desired.composite.resource)["status"]


def revisions_of(rsp: fnv1.RunFunctionResponse, kind: str = "ModelReplica") -> Counter[str]:
    return Counter(
        o["metadata"]["labels"]["modelplane.ai/revision"] for o in composed(rsp, kind).values()
    )


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_a_change_starts_canary_replicas_beside_the_stable_ones() -> None:
    rev_a = stable_state()[2]
    rev_b = revision(deployment(flag="--enable-prefix-caching")["spec"])
    rsp = response("started")
    assert revisions_of(rsp) == {rev_a: 4, rev_b: 1}  # ceil(4 x 25%) = 1
    assert revisions_of(rsp, "ModelEndpoint") == {rev_a: 4, rev_b: 1}
    status = status_of(rsp)
    assert status["revisions"] == {"stable": rev_a, "canary": rev_b}
    assert (status["canary"]["replicas"], status["canary"]["mode"]) == (1, "Canary")
    cond = condition_of(rsp, "Canary")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, "AwaitingVerdict")


def test_the_stable_revision_falls_back_to_observed_labels() -> None:
    rev_a = stable_state()[2]
    rsp = response("stable-from-labels")
    assert status_of(rsp)["revisions"]["stable"] == rev_a
    assert revisions_of(rsp)[rev_a] == 4


def test_pass_promotes_the_canary(stable) -> None:
    _, observed, _, rev_b = start_canary(stable)
    rsp = response("passed")
    assert revisions_of(rsp) == {rev_b: 4}
    assert revisions_of(rsp, "ModelEndpoint") == {rev_b: 4}
    canary_replica = next(
        o for o in observed if o["metadata"]["labels"]["modelplane.ai/revision"] == rev_b
    )
    assert canary_replica["metadata"]["name"] in composed(rsp, "ModelReplica")  # kept, not remade
    assert status_of(rsp)["revisions"] == {"stable": rev_b}
    cond = condition_of(rsp, "Canary")
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_TRUE, "Promoted")


def test_the_mode_stays_beside_the_verdict_once_steady(stable) -> None:
    """A parent reading a steady deployment tells a promoted canary from a re-test in place."""
    changed, observed, rev_a, rev_b = start_canary(stable)
    run_id = "r-0123456789"
    changed["spec"]["canary"]["runId"] = run_id
    testing = run(with_status(changed, revisions={"stable": rev_a}), observed).xr["status"]
    assert testing["canary"]["mode"] == "Canary"
    gate = {"verdict": "Pass", "revision": rev_b, "run": run_id, **GATE_FIGURES}
    testing["canary"]["gate"] = gate
    promoted = run(with_status(changed, **testing), observed)
    assert condition(promoted, "Canary")["reason"] == "Promoted"
    assert promoted.xr["status"]["canary"]["mode"] == "Canary"
    steady = run(with_status(changed, **promoted.xr["status"]), as_observed(promoted.composed))
    assert condition(steady, "Canary")["reason"] == "Stable"
    assert steady.xr["status"]["canary"]["mode"] == "Canary"
    assert steady.xr["status"]["canary"]["gate"]["verdict"] == "Pass"
    # a later run re-tests the same pods in place
    changed["spec"]["canary"]["runId"] = "r-abcdefabcd"
    retest = run(with_status(changed, **steady.xr["status"]), as_observed(steady.composed))
    assert retest.xr["status"]["canary"]["mode"] == "InPlace"
    assert retest.xr["status"]["revisions"] == {"stable": rev_b, "canary": rev_b}


def test_fail_rolls_back_and_says_why(stable) -> None:
    changed, observed, rev_a, rev_b = start_canary(stable)
    gate = {"verdict": "Fail", "revision": rev_b, **GATE_FIGURES}
    xr = with_status(changed, revisions={"stable": rev_a, "canary": rev_b}, canary={"gate": gate})
    out = run(xr, observed)
    assert by_revision(out) == {rev_a: 4}
    assert by_revision(out, "ModelEndpoint") == {rev_a: 4}
    status = out.xr["status"]
    assert status["revisions"] == {"stable": rev_a}
    assert status["canary"]["gate"]["verdict"] == "Fail"
    cond = condition(out, "Canary")
    assert (cond["status"], cond["reason"]) == ("False", "RolledBack")
    assert "TTFT p50 398.5 ms, p95 412 ms (budget 250 ms)" in cond["message"]
    assert "TPOT p50 18.1 ms, p95 21.7 ms (budget 40 ms)" in cond["message"]

    # the next reconcile remembers the verdict: the failed revision is not tried again
    after = run(with_status(changed, **status), as_observed(out.composed))
    assert by_revision(after) == {rev_a: 4}
    assert condition(after, "Canary")["reason"] == "RolledBack"


def test_a_verdict_for_another_revision_is_ignored(stable) -> None:
    _, _, rev_a, rev_b = start_canary(stable)
    assert revisions_of(response("verdict-for-another-revision")) == {rev_a: 4, rev_b: 1}


def test_the_verdict_may_come_through_the_pipeline_context(stable) -> None:
    changed, observed, rev_a, rev_b = start_canary(stable)
    s = render.Scenario(
        xr=with_status(changed, revisions={"stable": rev_a, "canary": rev_b}),
        required=render.load_folder(render.REPO_ROOT / "examples" / "fleet"),
        observed=observed,
        path=render.REPO_ROOT,
    )
    verdict = {"verdict": "Pass", "revision": rev_b, **GATE_FIGURES}
    out = render.render(s, catalogue=SCHEDULE_ONLY, context={"plnt.work/canary-verdict": verdict})
    assert by_revision(out) == {rev_b: 4}


def test_a_change_during_a_canary_supersedes_it() -> None:
    rev_a = stable_state()[2]
    rev_c = revision(deployment(flag="--max-num-seqs=128")["spec"])
    rsp = response("superseded")
    assert revisions_of(rsp) == {rev_a: 4, rev_c: 1}
    assert status_of(rsp)["revisions"] == {"stable": rev_a, "canary": rev_c}


def test_without_canary_a_change_rolls_straight_through() -> None:
    rev_b = revision(deployment(canary=False, flag="--enable-prefix-caching")["spec"])
    rsp = response("off-rolls-through")
    assert revisions_of(rsp) == {rev_b: 4}
    assert status_of(rsp)["revisions"] == {"stable": rev_b}


def test_scaling_and_placement_do_not_change_the_revision() -> None:
    base = deployment()
    other = copy.deepcopy(base)
    other["spec"]["replicas"] = 9
    other["spec"]["clusterSelector"] = {"matchLabels": {"a": "b"}}
    other["spec"].pop("canary")
    assert revision(base["spec"]) == revision(other["spec"])
    assert revision(base["spec"]) != revision(deployment(flag="--x")["spec"])


@pytest.mark.parametrize(
    ("replicas", "percent", "expect"),
    [(4, 25, 1), (4, 30, 2), (1, 1, 1), (10, 100, 10), (0, 50, 1)],
)
def test_canary_replicas(replicas: int, percent: int, expect: int) -> None:
    spec = ModelDeploymentSpec.model_validate(
        {
            "engines": deployment()["spec"]["engines"],
            "replicas": replicas,
            "canary": {"trafficPercent": percent},
        }
    )
    assert spec.canary is not None
    assert spec.canary.replicas(spec.replicas) == expect
    plan = revisions.plan(spec, "new", {"revisions": {"stable": "old"}}, Counter({"old": 2}))
    assert plan.targets == {"old": replicas, "new": expect}


def test_revision_is_letters_only_and_ignores_key_order() -> None:
    spec = deployment()["spec"]
    reordered = {k: spec[k] for k in reversed(list(spec))}
    rev = revision(spec)
    assert rev == revision(reordered)
    assert len(rev) == 10
    assert set(rev) <= set("abcdefghijklmnop")  # never a YAML number like 6521902e65


def test_canary_example_spreads_the_canary_away_from_the_stable_replicas() -> None:
    s = scenario("deploy-canary")
    rsp = response("example")
    status = status_of(rsp)
    stable, canary = s.xr["status"]["revisions"]["stable"], revision(s.xr["spec"])
    clusters = {
        rev: sorted(p["cluster"] for p in status["placements"] if p["revision"] == rev)
        for rev in (stable, canary)
    }
    assert clusters == {stable: ["coreweave-h100", "lab-l4"], canary: ["coreweave-l40s"]}
    cond = condition_of(rsp, "ReplicasScheduled")
    assert cond.message == "canary: placed 1 of 1 replicas; stable: 2 of 2 kept"
    assert status["revisions"] == {"stable": stable, "canary": canary}


def _mark(observed: list[dict[str, Any]], match, conditions: list[dict[str, str]]) -> None:
    """Sets the conditions of every observed ModelReplica ``match`` accepts (copies included)."""
    for obj in observed:
        if obj["kind"] == "ModelReplica" and match(obj):
            obj["status"]["conditions"] = copy.deepcopy(conditions)


def test_a_canary_pulling_weights_does_not_make_replicas_ready_say_so(stable) -> None:
    """ReplicasReady counts the stable revision: its own waits decide the reason."""
    changed, observed, rev_a, rev_b = start_canary(stable)
    pulling = [
        {"type": "Ready", "status": "False"},
        {"type": "WorkloadsReady", "status": "False", "reason": "PullingWeights"},
    ]
    _mark(observed, lambda o: o["metadata"]["labels"]["modelplane.ai/revision"] == rev_b, pulling)
    waiting = min(
        o["metadata"]["name"]
        for o in observed
        if o["kind"] == "ModelReplica"
        and o["metadata"]["labels"]["modelplane.ai/revision"] == rev_a
    )
    _mark(observed, lambda o: o["metadata"]["name"] == waiting, pulling[:1])
    xr = with_status(changed, revisions={"stable": rev_a, "canary": rev_b})
    ready = condition(run(xr, observed), "ReplicasReady")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "Waiting",
        "3 of 4 replicas ready",
    )
    # the same wait on a stable replica is PullingWeights
    _mark(observed, lambda o: o["metadata"]["name"] == waiting, pulling)
    ready = condition(run(xr, observed), "ReplicasReady")
    assert ready["reason"] == "PullingWeights"
    assert ready["message"] == f"3 of 4 replicas ready; pulling weights: {waiting}"


@pytest.mark.parametrize(
    ("canary_reason", "ready", "readiness"),
    [
        ("PullingWeights", "False", "PullingWeights"),
        ("Starting", "False", "Starting"),
        ("Unschedulable", "False", "Unschedulable"),
        ("Waiting", "False", "Waiting"),
        ("Available", "True", "Available"),
    ],
)
def test_the_canary_says_whether_its_weights_stage_or_its_engines_start(
    stable, canary_reason: str, ready: str, readiness: str
) -> None:
    """ReplicasReady counts the stable revision; status.canary says the same of the revision
    under test, so the WorkflowRun tells the canary's PullingWeights from its Deploying."""
    changed, observed, rev_a, rev_b = start_canary(stable)
    conds = [
        {"type": "Ready", "status": ready},
        {"type": "WorkloadsReady", "status": ready, "reason": canary_reason},
    ]
    _mark(observed, lambda o: o["metadata"]["labels"]["modelplane.ai/revision"] == rev_b, conds)
    xr = with_status(changed, revisions={"stable": rev_a, "canary": rev_b})
    out = run(xr, observed)
    canary = out.xr["status"]["canary"]
    assert (canary["readyReplicas"], canary["readiness"]) == (int(ready == "True"), readiness)
    assert condition(out, "ReplicasReady")["reason"] == "Available"  # the stable four


def test_traffic_percent_defaults_to_five_in_xrd_and_model() -> None:
    xrd = yaml.safe_load((render.REPO_ROOT / "apis/modeldeployments/definition.yaml").read_text())
    canary = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["canary"]
    assert canary["properties"]["trafficPercent"]["default"] == 5
    assert "required" not in canary
    spec = ModelDeploymentSpec.model_validate(
        {"engines": deployment()["spec"]["engines"], "canary": {}}
    )
    assert spec.canary is not None and spec.canary.traffic_percent == 5


def _gate(verdict: str, rev: str, run_id: str | None = None) -> dict[str, Any]:
    out = {"verdict": verdict, "revision": rev, **GATE_FIGURES}
    return out | ({"run": run_id} if run_id else {})


def _spec(run_id: str | None = None, replicas: int = 4) -> ModelDeploymentSpec:
    xr = deployment(replicas)
    if run_id:
        xr["spec"]["canary"]["runId"] = run_id
    return ModelDeploymentSpec.model_validate(xr["spec"])


PLAN_CASES = [
    # (name, run, status, observed revisions, want (stable, canary, targets, outcome, mode))
    ("first rollout", None, {}, {}, (None, "B", {"B": 4}, "AwaitingVerdict", "first rollout")),
    (
        "first rollout passed",
        None,
        {"revisions": {"canary": "B"}, "canary": {"gate": _gate("Pass", "B")}},
        {"B": 4},
        ("B", None, {"B": 4}, "Promoted", "first rollout"),
    ),
    (
        "first rollout failed",
        None,
        {"revisions": {"canary": "B"}, "canary": {"gate": _gate("Fail", "B")}},
        {"B": 4},
        (None, None, {}, "Failed", "first rollout"),
    ),
    (
        "restored without status: the current revision is tested again",
        None,
        {},
        {"B": 4},
        (None, "B", {"B": 4}, "AwaitingVerdict", "first rollout"),
    ),
    (
        "restored without status: another running revision is stable",
        None,
        {},
        {"A": 4},
        ("A", "B", {"A": 4, "B": 1}, "AwaitingVerdict", "canary"),
    ),
    (
        "the stable revision's replicas are gone: tested like a first rollout",
        None,
        {"revisions": {"stable": "A"}},
        {},
        (None, "B", {"B": 4}, "AwaitingVerdict", "first rollout"),
    ),
    (
        "steady without a run",
        None,
        {"revisions": {"stable": "B"}},
        {"B": 4},
        ("B", None, {"B": 4}, None, None),
    ),
    (
        "a new run re-tests the stable revision in place",
        "r2",
        {"revisions": {"stable": "B"}, "canary": {"gate": _gate("Pass", "B", "r1")}},
        {"B": 4},
        ("B", "B", {"B": 4}, "AwaitingVerdict", "in place"),
    ),
    (
        "passed in this run: steady",
        "r2",
        {"revisions": {"stable": "B"}, "canary": {"gate": _gate("Pass", "B", "r2")}},
        {"B": 4},
        ("B", None, {"B": 4}, None, None),
    ),
    (
        "failed in place: keeps serving",
        "r2",
        {"revisions": {"stable": "B", "canary": "B"}, "canary": {"gate": _gate("Fail", "B", "r2")}},
        {"B": 4},
        ("B", None, {"B": 4}, "Failed", "in place"),
    ),
    (
        "a rolled back revision is tried again in a new run",
        "r3",
        {"revisions": {"stable": "A"}, "canary": {"gate": _gate("Fail", "B", "r2")}},
        {"A": 4},
        ("A", "B", {"A": 4, "B": 1}, "AwaitingVerdict", "canary"),
    ),
    (
        "but not in the same run",
        "r2",
        {"revisions": {"stable": "A"}, "canary": {"gate": _gate("Fail", "B", "r2")}},
        {"A": 4},
        ("A", None, {"A": 4}, "RolledBack", None),
    ),
]


@pytest.mark.parametrize(
    ("run_id", "status", "observed", "want"),
    [c[1:] for c in PLAN_CASES],
    ids=[c[0] for c in PLAN_CASES],
)
def test_plan(run_id, status, observed, want) -> None:
    got = revisions.plan(_spec(run_id), "B", status, Counter(observed))
    assert (got.stable, got.canary, dict(got.targets), got.outcome, got.mode) == want
    assert got.run == run_id
