"""Devices only through the claims the binder counts (docs/tenancy.md, "Devices outside DRA"):
a pod template's resources may name cpu, memory and ephemeral-storage only, its annotations
follow an allow-list, and the endpoint picker never runs on a GPU node. Each case is what a
tenant writes into a ModelDeployment and, for a replica made by hand, into a ModelReplica."""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn as replica_fn
from plnt import conditions, labels
from plnt_host import render
from tests.functions.test_model_replica import (
    QWEN,
    committed,
    composed,
    condition,
    without_ledgers,
)
from tests.support import call_function

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
DEPLOY = render.load_scenario(EXAMPLES / "deploy-qwen3-8b")

Edit = Callable[[dict[str, Any]], None]


def _member(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["engines"][0]["members"][0]


def _engine(spec: dict[str, Any]) -> dict[str, Any]:
    engine = _member(spec)["template"]["spec"]["containers"][0]
    engine.setdefault("resources", {}).setdefault("requests", {"cpu": "4"})
    return engine


def gpu_limit(spec: dict[str, Any]) -> None:
    _engine(spec)["resources"]["limits"] = {"nvidia.com/gpu": 8}


def gpu_request(spec: dict[str, Any]) -> None:
    _engine(spec)["resources"]["requests"]["nvidia.com/gpu"] = "1"


def sidecar_rdma(spec: dict[str, Any]) -> None:
    containers = _member(spec)["template"]["spec"]["containers"]
    containers.append(
        {"name": "sidecar", "image": "busybox", "resources": {"limits": {"rdma/hca": 1}}}
    )


def hugepages(spec: dict[str, Any]) -> None:
    _engine(spec)["resources"]["limits"] = {"hugepages-2Mi": "1Gi"}


def picker_gpu(spec: dict[str, Any]) -> None:
    spec["serving"] = {
        "endpointPicker": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "epp",
                            "image": "example.com/epp:1",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            }
        }
    }


APPARMOR = "container.apparmor.security.beta.kubernetes.io/engine"


def apparmor_unconfined(spec: dict[str, Any]) -> None:
    _member(spec)["template"]["metadata"] = {"annotations": {APPARMOR: "unconfined"}}


ENGINE = "spec.engines[0].members[0].template"
REFUSED: list[tuple[str, Edit, str, str]] = [
    # (case, edit, the field named, the container named or '' for an annotation)
    ("gpu-limit", gpu_limit, f'{ENGINE}.spec.containers[0].resources.limits["nvidia.com/gpu"]',
     "engine"),
    ("gpu-request", gpu_request,
     f'{ENGINE}.spec.containers[0].resources.requests["nvidia.com/gpu"]', "engine"),
    ("sidecar-rdma", sidecar_rdma, f'{ENGINE}.spec.containers[1].resources.limits["rdma/hca"]',
     "sidecar"),
    ("hugepages", hugepages, f'{ENGINE}.spec.containers[0].resources.limits["hugepages-2Mi"]',
     "engine"),
    ("picker-gpu", picker_gpu,
     'spec.serving.endpointPicker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]',
     "epp"),
    ("apparmor-unconfined", apparmor_unconfined, f'{ENGINE}.metadata.annotations["{APPARMOR}"]',
     ""),
]  # fmt: skip


def _deployment(edit: Edit | None) -> dict[str, Any]:
    xr = copy.deepcopy(DEPLOY.xr)
    if edit:
        edit(xr["spec"])
    return xr


def _render_deployment(xr: dict[str, Any]) -> render.Rendered:
    return render.render(render.Scenario(xr, DEPLOY.required, DEPLOY.observed, DEPLOY.path))


def _scheduled(out: render.Rendered) -> dict[str, Any]:
    return next(c for c in out.xr["status"]["conditions"] if c["type"] == "ReplicasScheduled")


@pytest.mark.parametrize(("edit", "field", "container"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])  # fmt: skip
def test_a_model_deployment_is_refused_before_it_proposes_anything(
    edit: Edit, field: str, container: str
) -> None:
    out = _render_deployment(_deployment(edit))
    cond = _scheduled(out)
    assert (cond["status"], cond["reason"]) == ("False", conditions.TEMPLATE_NOT_PERMITTED)
    assert field in cond["message"], cond["message"]
    if container:
        assert f"container {container} asks for" in cond["message"]
    assert cond["message"].startswith("placed 0 of 3 replicas")
    assert [o for o in out.composed if o["kind"] == "ModelReplica"] == []
    assert any(field in r["message"] for r in out.results if r["severity"] == "SEVERITY_WARNING")


def test_what_the_policy_allows_still_places() -> None:
    def allowed(spec: dict[str, Any]) -> None:
        engine = _engine(spec)
        engine["resources"]["limits"] = {"cpu": "8", "memory": "40Gi", "ephemeral-storage": "50Gi"}
        _member(spec)["template"]["metadata"] = {
            "annotations": {"prometheus.io/scrape": "true", labels.HEALTH_PATH: "/health"}
        }

    out = _render_deployment(_deployment(allowed))
    assert _scheduled(out)["reason"] == "Scheduled"
    assert len([o for o in out.composed if o["kind"] == "ModelReplica"]) == 3


def _as_replica(edit: Edit) -> dict[str, Any]:
    """The seed ModelReplica with the same edit, as a tenant would write it by hand (the
    picker case carries the picker's template; the rest the engine's)."""
    xr = copy.deepcopy(QWEN.xr)
    edit(xr["spec"])
    return xr


@pytest.mark.parametrize(("edit", "field", "container"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])  # fmt: skip
def test_a_bound_model_replica_made_by_hand_renders_nothing(
    edit: Edit, field: str, container: str
) -> None:
    xr = _as_replica(edit)
    # committed in its cluster's ledger, exactly as it is: the binder does not read templates
    rsp = call_function(
        replica_fn.run_function,
        xr,
        [*without_ledgers(QWEN.required), committed(xr)],
        (),
        "function-model-replica",
    )
    assert composed(rsp) == {}
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == conditions.TEMPLATE_NOT_PERMITTED
    assert field in cond.message
    assert any(field in r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING)
    assert 'nvidia.com/gpu": 8' not in json.dumps(composed(rsp))


def test_the_endpoint_picker_never_tolerates_a_gpu_taint() -> None:
    """In every example that composes one, the picker's pod keeps off GPU nodes."""
    found = 0
    for folder in sorted(EXAMPLES.glob("model-replica-*")):
        scenario = render.load_scenario(folder)
        rsp = call_function(
            replica_fn.run_function,
            scenario.xr,
            [*scenario.required, committed(scenario.xr)],
            scenario.observed,
            "function-model-replica",
        )
        picker = composed(rsp).get("serving-epp-deployment")
        if picker is None:
            continue
        found += 1
        pod = picker["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
        keys = {t.get("key") for t in pod.get("tolerations", ())}
        assert not keys & {labels.GPU, "nvidia.com/gpu"}, folder.name
        assert None not in keys, "a toleration without a key tolerates every taint"
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        selected = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
        assert selected == {labels.SYSTEM, labels.CPU}, folder.name
    assert found >= 4
