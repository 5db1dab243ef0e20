"""Tenancy through the real functions (docs/tenancy.md): fenced clusters and quotas in the
ModelDeployment's shortfall, the binder render plays refusing what a quota does not cover, and
what of a tenant's pod template reaches a workload cluster (only the schema's fields)."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest

from functions.model_replica import fn as replica_fn
from plnt.capacity import admission, binding, commit, fleet_view, ledger, quotas
from plnt_host import render
from tests.functions.test_model_deployment import SCHEDULE_ONLY, as_observed
from tests.functions.test_model_replica import QWEN, committed, manifests, without_ledgers
from tests.support import binder_annotation, call_function

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
DEPLOY = render.load_scenario(EXAMPLES / "deploy-qwen3-8b")


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def fenced(required: list[dict[str, Any]], admits: dict[str, str]) -> list[dict[str, Any]]:
    out = copy.deepcopy(required)
    for o in out:
        if o["kind"] == "InferenceCluster":
            o["spec"]["namespaceSelector"] = {"matchLabels": admits}
    return out


def scheduled(out: render.Rendered) -> dict[str, Any]:
    return next(c for c in out.xr["status"]["conditions"] if c["type"] == "ReplicasScheduled")


def rendered(required: list[dict[str, Any]], *, tree: bool = False) -> render.Rendered:
    return render.render(
        render.Scenario(DEPLOY.xr, required, DEPLOY.observed, DEPLOY.path), tree=tree
    )


CLUSTERS = sorted(o["metadata"]["name"] for o in DEPLOY.required if o["kind"] == "InferenceCluster")


def test_a_fenced_cluster_takes_nothing_of_a_namespace_it_does_not_admit() -> None:
    required = [*fenced(DEPLOY.required, {"team": "research"}), namespace("ml-team")]
    cond = scheduled(rendered(required))
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientCapacity")
    for name in CLUSTERS:
        assert f"cluster {name} does not admit namespace ml-team" in cond["message"]
    assert cond["message"].startswith("placed 0 of 3 replicas")


def test_a_fence_admits_the_namespaces_its_selector_selects() -> None:
    required = [
        *fenced(DEPLOY.required, {"team": "research"}),
        namespace("ml-team", {"team": "research"}),
    ]
    assert scheduled(rendered(required))["reason"] == "Scheduled"
    # by name, through the label every Namespace carries
    by_name = fenced(DEPLOY.required, {admission.NAMESPACE_NAME_LABEL: "ml-team"})
    assert scheduled(rendered(by_name))["reason"] == "Scheduled"


def test_without_a_fence_every_namespace_places() -> None:
    assert scheduled(rendered([*DEPLOY.required, namespace("ml-team")]))["reason"] == "Scheduled"


def quota_ledger(hard: int, held: int) -> dict[str, Any]:
    """The binder's quota ledger for namespace ml-team: `held` GPUs reserved by another
    deployment's replica."""
    state = quotas.QuotaLedger(
        quota="ml-team",
        sequence=3,
        namespaces=["ml-team"],
        hard={"gpu.nvidia.com": hard},
        entries={
            "ml-team/other-0": quotas.Reservation(
                uid="u0", digest="d0", devices={"gpu.nvidia.com": held}
            )
        }
        if held
        else {},
    )
    return quotas.quota_ledger_configmap(state, ledger.LEDGER_NAMESPACE)


@pytest.mark.parametrize(
    ("hard", "held", "placed", "says"),
    [
        (16, 16, 0, "namespace ml-team holds 16 of 16 gpu.nvidia.com (InferenceQuota ml-team)"),
        (3, 1, 2, "namespace ml-team holds 3 of 3 gpu.nvidia.com (InferenceQuota ml-team)"),
        (3, 0, 3, ""),
    ],
)
def test_a_full_quota_is_named_in_the_shortfall(
    hard: int, held: int, placed: int, says: str
) -> None:
    out = rendered([*DEPLOY.required, quota_ledger(hard, held)])
    cond = scheduled(out)
    replicas = [o for o in out.composed if o["kind"] == "ModelReplica"]
    assert len(replicas) == placed
    if says:
        assert (cond["status"], cond["reason"]) == ("False", "InsufficientQuota")
        assert cond["message"] == f"placed {placed} of 3 replicas; {says}"
    else:
        assert cond["reason"] == "Scheduled"


def test_render_plays_the_binder_and_refuses_what_the_quota_does_not_cover() -> None:
    quota = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceQuota",
        "metadata": {"name": "ml-team"},
        "spec": {
            "namespaceSelector": {"matchLabels": {admission.NAMESPACE_NAME_LABEL: "ml-team"}},
            "hard": {"devices": {"gpu.nvidia.com": 2}},
        },
    }
    out = rendered([*DEPLOY.required, quota, namespace("ml-team")], tree=True)
    bound = {
        c.xr["metadata"]["name"]: next(
            x for x in c.xr["status"]["conditions"] if x["type"] == "Bound"
        )
        for c in out.children
        if c.xr["kind"] == "ModelReplica"
    }
    assert len(bound) == 3
    reasons = sorted(c["reason"] for c in bound.values())
    assert reasons == ["BindingRefused", "Bound", "Bound"]
    (refused,) = [c for c in bound.values() if c["reason"] == "BindingRefused"]
    assert (
        "namespace ml-team holds 2 of 2 gpu.nvidia.com (InferenceQuota ml-team)"
        in (refused["message"])
    )


# --- a replica never bound does not outlive its admission ----------------------------------

RESEARCH = {"team": "research"}  # the fence: ml-team (unlabelled) is not admitted


def view_of(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fleet view a binder writes of `required`'s clusters, nothing committed on them."""
    clusters = {o["metadata"]["name"]: o for o in required if o["kind"] == "InferenceCluster"}
    classes = {o["metadata"]["name"]: o for o in required if o["kind"] == "InferenceClass"}
    return fleet_view.configmaps(fleet_view.parts(commit.views(clusters, classes, {})))


def reconcile(
    clusters: list[dict[str, Any]], view: list[dict[str, Any]], observed: list[dict[str, Any]]
) -> render.Rendered:
    """One reconcile of the deployment in ml-team: the InferenceClusters as the API server holds
    them now, the fleet view as the binder last wrote it, the ModelReplicas it composed before."""
    required = [*clusters, *view, namespace("ml-team")]
    return render.render(
        render.Scenario(DEPLOY.xr, required, observed, DEPLOY.path), catalogue=SCHEDULE_ONLY
    )


def model_replicas(out: render.Rendered) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in out.composed if o["kind"] == "ModelReplica"}


def bound_by_the_binder(out: render.Rendered) -> list[dict[str, Any]]:
    """The replicas `out` composed as observed once the binder committed them (no fence yet)."""
    seen = as_observed(out.composed, ready=False)
    for o in seen:
        if o["kind"] == "ModelReplica":
            o["metadata"].setdefault("annotations", {})[binding.BINDING] = binder_annotation(o)
    return seen


@pytest.mark.parametrize(
    ("view_has_fence", "binder_ran"),
    [(True, False), (False, False), (True, True), (False, True)],
    ids=["view-caught-up", "view-lags", "view-caught-up-refused", "view-lags-refused"],
)
def test_an_unbound_replica_the_fence_now_refuses_is_removed_and_said(
    view_has_fence: bool, binder_ran: bool
) -> None:
    """Reconcile 1 places on a fleet with no fence; the fence is set before the binder commits;
    reconcile 2 removes every replica, whether the view has caught up with the fence or not,
    and whether the binder has already refused them or not, and says why in ReplicasScheduled."""
    first = reconcile(DEPLOY.required, view_of(DEPLOY.required), [])
    proposed = model_replicas(first)
    assert len(proposed) == 3
    assert all(binding.state_of(o).state == binding.PENDING for o in proposed.values())

    now = fenced(DEPLOY.required, RESEARCH)
    observed = as_observed(first.composed, ready=False)
    if binder_ran:
        for o in observed:
            if o["kind"] == "ModelReplica":
                why = admission.fence_message(o["spec"]["clusterName"], "ml-team")
                refusal = binding.refusal_json(binding.state_of(o).digest, why)
                o["metadata"].setdefault("annotations", {})[binding.REFUSED] = refusal
    second = reconcile(now, view_of(now if view_has_fence else DEPLOY.required), observed)

    assert model_replicas(second) == {}
    cond = scheduled(second)
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientCapacity")
    assert cond["message"].startswith("placed 0 of 3 replicas")
    for name, obj in proposed.items():
        why = admission.fence_message(obj["spec"]["clusterName"], "ml-team")
        said = f"the binder refused it: {why}" if binder_ran else why
        assert f"{name} released ({said})" in cond["message"]
    for cluster in CLUSTERS:
        assert f"; {admission.fence_message(cluster, 'ml-team')}" in cond["message"]


def test_a_view_that_lags_a_fence_proposes_nothing_on_the_cluster() -> None:
    """The fence is set, the view not rewritten yet: the clusters a reconcile would place on are
    read by name, their fence is the one the binder reads, and nothing is composed there."""
    now = fenced(DEPLOY.required, RESEARCH)
    out = reconcile(now, view_of(DEPLOY.required), [])
    assert model_replicas(out) == {}
    cond = scheduled(out)
    assert cond["status"] == "False"
    for cluster in CLUSTERS:
        assert admission.fence_message(cluster, "ml-team") in cond["message"]


def test_a_bound_replica_keeps_its_pin_when_a_fence_is_set() -> None:
    first = reconcile(DEPLOY.required, view_of(DEPLOY.required), [])
    now = fenced(DEPLOY.required, RESEARCH)
    second = reconcile(now, view_of(now), bound_by_the_binder(first))
    assert model_replicas(second).keys() == model_replicas(first).keys()
    cond = scheduled(second)
    assert (cond["status"], cond["message"]) == ("True", "placed 3 of 3 replicas")


@pytest.mark.parametrize(
    ("hard", "bound", "kept", "says"),
    [
        (3, False, 3, ""),
        (2, False, 2, "namespace ml-team holds 2 of 2 gpu.nvidia.com (InferenceQuota ml-team)"),
        (0, False, 0, "namespace ml-team holds 0 of 0 gpu.nvidia.com (InferenceQuota ml-team)"),
        (0, True, 3, ""),  # committed before the quota: it evicts nothing
    ],
)
def test_an_unbound_replica_a_quota_no_longer_allows_is_removed_and_said(
    hard: int, bound: bool, kept: int, says: str
) -> None:
    """Reconcile 1 places three 1-GPU replicas; an InferenceQuota appears before the binder
    reserved them: those it has no room for (oldest first, as the binder reserves) go."""
    first = reconcile(DEPLOY.required, view_of(DEPLOY.required), [])
    proposed = sorted(model_replicas(first))
    observed = bound_by_the_binder(first) if bound else as_observed(first.composed, ready=False)
    second = reconcile(
        [*DEPLOY.required, quota_ledger(hard, 0)], view_of(DEPLOY.required), observed
    )
    assert sorted(model_replicas(second)) == proposed[:kept]
    cond = scheduled(second)
    if not says:
        assert cond["reason"] == "Scheduled"
        return
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientQuota")
    gone = "; ".join(f"{name} released ({says})" for name in proposed[kept:])
    assert cond["message"] == f"placed {kept} of 3 replicas; {gone}"


# --- what of a tenant's pod template reaches a GPU node ------------------------------------

HOSTILE = "tenant-escalates"


def hostile(xr: dict[str, Any]) -> dict[str, Any]:
    """The seed replica with a pod template a tenant might hope to get onto a GPU node."""
    out = copy.deepcopy(xr)
    template = out["spec"]["engines"][0]["members"][0]["template"]
    template["spec"].update(
        serviceAccountName=HOSTILE,
        hostNetwork=True,
        hostPID=True,
        volumes=[{"name": HOSTILE, "hostPath": {"path": "/"}}],
        nodeName=HOSTILE,
        tolerations=[{"operator": "Exists"}],
    )
    engine = template["spec"]["containers"][0]
    engine.update(
        securityContext={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
        volumeMounts=[{"name": HOSTILE, "mountPath": "/host"}],
    )
    return out


def test_privileged_fields_of_a_pod_template_never_reach_a_workload_cluster() -> None:
    xr = hostile(QWEN.xr)
    # committed as it is: the binding's digest covers the whole template, these fields too
    rsp = call_function(
        replica_fn.run_function,
        xr,
        [*without_ledgers(QWEN.required), committed(xr)],
        (),
        "function-model-replica",
    )
    got = manifests(rsp)
    assert "workload-qwen3-8b" in got  # it rendered: the fields were dropped, not refused
    text = json.dumps(got)
    for needle in (HOSTILE, "privileged", "hostPath", "hostNetwork", "hostPID", "SYS_ADMIN"):
        assert needle not in text, needle
    pod = got["workload-qwen3-8b"]["spec"]["template"]["spec"]
    assert "serviceAccountName" not in pod
    assert "nodeName" not in pod
    assert all("key" in t for t in pod.get("tolerations", ())), "the tenant's tolerate-all"
    # and the same template without the hostile fields renders the same workload
    clean = call_function(
        replica_fn.run_function,
        QWEN.xr,
        [*QWEN.required, committed(QWEN.xr)],
        (),
        "function-model-replica",
    )
    assert manifests(clean)["workload-qwen3-8b"] == got["workload-qwen3-8b"]


def test_one_answer_to_how_much_a_namespace_may_hold() -> None:
    """The binder reserves by `quotas.exceeds`; the ModelDeployment function asks it too, its
    own proposals not reserved yet counted as pending."""
    state = quotas.QuotaLedger(
        quota="ml-team",
        namespaces=["ml-team"],
        hard={"gpu.nvidia.com": 8},
        entries={
            "ml-team/a-0": quotas.Reservation(uid="u", digest="d", devices={"gpu.nvidia.com": 4})
        },
    )
    four = {"gpu.nvidia.com": 4}
    assert quotas.exceeds(state, four, "ml-team") == ""
    full = "namespace ml-team holds 8 of 8 gpu.nvidia.com (InferenceQuota ml-team)"
    assert quotas.exceeds(state, four, "ml-team", [four]) == full
    assert quotas.exceeds(state, {"other": 99}, "ml-team", [four]) == ""  # not capped
