"""function-model-endpoint through its real run_function: status, conditions, bad specs."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_endpoint import fn
from plnt import xp
from plnt_host import render

REPO = pathlib.Path(__file__).resolve().parents[2]
EXTERNAL = yaml.safe_load((REPO / "examples/model-endpoint-external/xr.yaml").read_text())
COMPOSED = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelEndpoint",
    "metadata": {
        "name": "qwen3-8b-coreweave-h100-0",
        "namespace": "ml-team",
        "labels": {"modelplane.ai/deployment": "qwen3-8b", "modelplane.ai/revision": "7f3b9c2e41"},
    },
    "spec": {
        "url": "http://203.0.113.10/ml-team/qwen3-8b-coreweave-h100-0",
        "rewritePath": "/ml-team/qwen3-8b-coreweave-h100-0/",
    },
}


def run(xr: dict, required: list[dict] | None = None) -> fnv1.RunFunctionResponse:
    """The real run_function, re-run with what it required until stable, as Crossplane does."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    rsp, _ = render.run_with_requirements(
        fn.run_function, req, required or [], "function-model-endpoint"
    )
    return rsp


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def conditions(rsp: fnv1.RunFunctionResponse) -> dict[str, fnv1.Condition]:
    return {c.type: c for c in rsp.conditions}


@pytest.mark.parametrize(
    ("xr", "want_status", "valid_message"),
    [
        (
            EXTERNAL,
            {
                "url": "https://api.inference.example.com",
                "model": "meta-llama/Llama-3.1-70B-Instruct",
                "authenticated": True,
            },
            "https to api.inference.example.com:443, path /",
        ),
        (
            COMPOSED,
            {
                "url": "http://203.0.113.10/ml-team/qwen3-8b-coreweave-h100-0",
                "authenticated": False,
            },
            "http to 203.0.113.10:80, path /ml-team/qwen3-8b-coreweave-h100-0/",
        ),
    ],
    ids=["hand-made-external", "composed-by-deployment"],
)
def test_valid_endpoints_publish_their_url_and_are_not_probed(
    xr, want_status, valid_message
) -> None:
    rsp = run(xr)
    assert not rsp.results
    assert not rsp.desired.resources, "a ModelEndpoint composes nothing"
    assert status(rsp) == want_status
    conds = conditions(rsp)
    assert conds["Valid"].status == fnv1.STATUS_CONDITION_TRUE
    assert conds["Valid"].message == valid_message
    assert conds["Reachable"].status == fnv1.STATUS_CONDITION_UNKNOWN
    assert conds["Reachable"].reason == "NotProbed"


def test_the_secret_is_referenced_never_copied() -> None:
    rsp = run(EXTERNAL)
    text = yaml.safe_dump([status(rsp), [c.message for c in rsp.conditions]])
    assert "hosted-inference-api-key" not in text
    assert "token" not in text


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"url": "grpc://models.example.com:9000"}, "spec.url"),
        ({"url": "https://user:sk-123@api.example.com"}, "spec.url"),
        ({"url": "https://api.example.com/v1?key=abc"}, "spec.url"),
        ({"url": "http://api.example.com:99999/"}, "spec.url: Value error, port must be a number"),
        (
            {"url": "http://api.example.com:0/"},
            "spec.url: Value error, port must be between 1 and 65535",
        ),
        ({"rewritePath": "v1"}, "spec.rewritePath"),
        ({"auth": {"secretRef": {"name": "k"}}}, "spec.auth.secretRef.key"),
        ({"model": ""}, "spec.model"),
    ],
)
def test_bad_specs_fail_naming_the_field(change: dict, path: str) -> None:
    xr = copy.deepcopy(EXTERNAL)
    xr["spec"].update(change)
    (result,) = run(xr).results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message.startswith(f"invalid input: {path}")
