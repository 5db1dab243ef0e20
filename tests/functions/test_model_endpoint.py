"""function-model-endpoint through its real run_function: status, conditions, bad specs; each
case's whole response in tests/functions/responses/model_endpoint/."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_endpoint import fn
from plnt import xp
from tests.functions import tables
from tests.support import request

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


# Bad specs: (case, change to EXTERNAL's spec, the field the failure names).
BAD_SPECS = [
    ("grpc-scheme", {"url": "grpc://models.example.com:9000"}, "spec.url"),
    ("credentials-in-url", {"url": "https://user:sk-123@api.example.com"}, "spec.url"),
    ("query-in-url", {"url": "https://api.example.com/v1?key=abc"}, "spec.url"),
    (
        "port-not-a-number",
        {"url": "http://api.example.com:99999/"},
        "spec.url: Value error, port must be a number",
    ),
    (
        "port-zero",
        {"url": "http://api.example.com:0/"},
        "spec.url: Value error, port must be between 1 and 65535",
    ),
    ("relative-rewrite-path", {"rewritePath": "v1"}, "spec.rewritePath"),
    ("secret-without-key", {"auth": {"secretRef": {"name": "k"}}}, "spec.auth.secretRef.key"),
    ("empty-model", {"model": ""}, "spec.model"),
]


def with_spec(change: dict) -> dict:
    xr = copy.deepcopy(EXTERNAL)
    xr["spec"].update(change)
    return xr


TABLE = tables.Table(
    "model_endpoint",
    fn.run_function,
    (
        tables.Case("hand-made-external", request(EXTERNAL)),
        tables.Case("composed-by-deployment", request(COMPOSED)),
        *(tables.Case(name, request(with_spec(change))) for name, change, _ in BAD_SPECS),
    ),
)


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def status(rsp: fnv1.RunFunctionResponse) -> dict:
    return xp.to_dict(rsp.desired.composite.resource).get("status", {})


def conditions(rsp: fnv1.RunFunctionResponse) -> dict[str, fnv1.Condition]:
    return {c.type: c for c in rsp.conditions}


@pytest.mark.parametrize(
    ("name", "xr"), [("hand-made-external", EXTERNAL), ("composed-by-deployment", COMPOSED)]
)
def test_valid_endpoints_publish_their_url_and_are_not_probed(name: str, xr: dict) -> None:
    rsp = TABLE.response_named(name)
    assert not rsp.results
    assert not rsp.desired.resources, "a ModelEndpoint composes nothing"
    assert status(rsp)["url"] == xr["spec"]["url"]
    conds = conditions(rsp)
    assert conds["Valid"].status == fnv1.STATUS_CONDITION_TRUE
    assert conds["Reachable"].status == fnv1.STATUS_CONDITION_UNKNOWN
    assert conds["Reachable"].reason == "NotProbed"


def test_the_secret_is_referenced_never_copied() -> None:
    rsp = TABLE.response_named("hand-made-external")
    text = yaml.safe_dump([status(rsp), [c.message for c in rsp.conditions]])
    assert "hosted-inference-api-key" not in text
    assert "token" not in text


@pytest.mark.parametrize(("name", "path"), [(name, path) for name, _, path in BAD_SPECS])
def test_bad_specs_fail_naming_the_field(name: str, path: str) -> None:
    (result,) = TABLE.response_named(name).results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message.startswith(f"invalid input: {path}")
