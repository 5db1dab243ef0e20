"""The binding covers every field that changes what runs (docs/tenancy.md, "Demand the binder
trusts"): a replica committed by the binder and then edited anywhere in its spec renders nothing
until the binder commits the edit (BindingStale), while what changes nothing that runs (the API
server's defaults written out, Crossplane's own references) keeps it bound."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn
from plnt.capacity import binding
from tests.functions.test_model_replica import QWEN, committed, composed, condition, without_ledgers
from tests.support import binder_annotation, call_function

Edit = Callable[[dict[str, Any]], None]


def _engine(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["engines"][0]["members"][0]["template"]["spec"]["containers"][0]


def image(spec: dict[str, Any]) -> None:
    _engine(spec)["image"] = "registry.example.com/other-engine:latest"


def cpu(spec: dict[str, Any]) -> None:
    _engine(spec).setdefault("resources", {})["requests"] = {"cpu": "64"}


def env(spec: dict[str, Any]) -> None:
    _engine(spec)["env"] = [{"name": "VLLM_EXTRA", "value": "1"}]


def args(spec: dict[str, Any]) -> None:
    _engine(spec)["args"] = ["--model=someone/else"]


def copies(spec: dict[str, Any]) -> None:
    spec["engines"][0]["copies"] = 4


def picker(spec: dict[str, Any]) -> None:
    spec["serving"] = {"endpointPicker": {"template": {"spec": {"containers": [
        {"name": "epp", "image": "registry.example.com/picker:1"}]}}}}  # fmt: skip


def annotation(spec: dict[str, Any]) -> None:
    spec["engines"][0]["members"][0]["template"]["metadata"] = {
        "annotations": {"prometheus.io/scrape": "true"}
    }


STALE: dict[str, Edit] = {
    "image": image, "cpu": cpu, "env": env, "args": args, "copies": copies,
    "picker image": picker, "pod annotation": annotation,
}  # fmt: skip


def defaults(spec: dict[str, Any]) -> None:
    spec["engines"][0]["copies"] = 1
    spec["serving"] = {"mode": "Unified"}


def crossplane_refs(spec: dict[str, Any]) -> None:
    spec["crossplane"] = {"compositionRef": {"name": "model-replica"},
                          "resourceRefs": [{"kind": "Object", "name": "x"}]}  # fmt: skip


SAME: dict[str, Edit] = {"defaults written out": defaults, "Crossplane's refs": crossplane_refs}


def _render(edit: Edit) -> fnv1.RunFunctionResponse:
    """The seed replica committed as it was (its ledger entry and the binder's annotation), then
    edited."""
    ledger = committed(QWEN.xr)
    xr = copy.deepcopy(QWEN.xr)
    xr["metadata"].setdefault("annotations", {})[binding.BINDING] = binder_annotation(QWEN.xr)
    edit(xr["spec"])
    return call_function(
        fn.run_function, xr, [*without_ledgers(QWEN.required), ledger], (), "function-model-replica"
    )


@pytest.mark.parametrize("edit", STALE.values(), ids=STALE.keys())
def test_an_edit_after_the_commit_renders_nothing_until_committed_again(edit: Edit) -> None:
    rsp = _render(edit)
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert bound.status == fnv1.STATUS_CONDITION_FALSE
    assert bound.reason == binding.BINDING_STALE, bound


@pytest.mark.parametrize("edit", SAME.values(), ids=SAME.keys())
def test_what_changes_nothing_that_runs_keeps_it_bound(edit: Edit) -> None:
    rsp = _render(edit)
    assert condition(rsp, "Bound").status == fnv1.STATUS_CONDITION_TRUE
    assert "workload-qwen3-8b" in composed(rsp)
