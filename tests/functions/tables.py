"""Whole-response tables: a function's cases, each a request, checked against the whole
RunFunctionResponse it got when the case was written down.

`tests/functions/responses/<kind>/<case>.yaml` is the response of case <case> of
functions/<kind>'s table as YAML (json_format's field names, keys sorted): the desired composite
status and resources, conditions, results, requirements and ttl. A test asserting a fragment of
a response lets a change to every other field pass; a case compared whole does not, and a change
on purpose shows up in review as a diff of that file.

    python -m tests.goldens            # rewrites these with the golden renders (`make goldens`)

A test module declares `TABLE = Table(kind, fn.run_function, cases)` and is listed in MODULES,
which is how the rewrite finds it.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import pathlib
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from plnt_host import render, runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESPONSES = pathlib.Path(__file__).resolve().parent / "responses"
REGENERATE = "make goldens (python -m tests.goldens)"

# The test modules holding a TABLE, in the order the rewrite visits them.
MODULES = (
    "tests.functions.test_model_endpoint",
    "tests.functions.test_inference_class",
    "tests.functions.test_model_cache",
    "tests.functions.test_model_service",
    "tests.functions.test_inference_cluster",
    "tests.functions.test_workflow_run",
    "tests.functions.test_model_deployment",
    "tests.functions.test_model_deployment_canary",
    "tests.functions.test_model_deployment_unschedulable",
    "tests.functions.test_model_replica",
    "tests.functions.test_model_replica_weights",
    "tests.functions.test_model_replica_unschedulable",
    "tests.functions.test_model_replica_ledger",
    "tests.functions.test_canary_gate",
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One request; `required` answers the function's requirements, as Crossplane does."""

    name: str
    request: fnv1.RunFunctionRequest
    required: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Table:
    kind: str  # functions/<kind>, and responses/<kind> for its want files
    run: runtime.RunFunction
    cases: tuple[Case, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.cases]
        assert len(names) == len(set(names)), f"{self.kind}: case names repeat"

    @property
    def step(self) -> str:
        return "function-" + self.kind.replace("_", "-")

    def params(self) -> list[Any]:
        return [pytest.param(c, id=c.name) for c in self.cases]

    def case(self, name: str) -> Case:
        (found,) = [c for c in self.cases if c.name == name]
        return found

    def response_named(self, name: str) -> fnv1.RunFunctionResponse:
        """The response of the case called ``name``."""
        return self.response(self.case(name))

    def want_file(self, case: Case) -> pathlib.Path:
        return RESPONSES / self.kind / f"{case.name}.yaml"

    def response(self, case: Case) -> fnv1.RunFunctionResponse:
        """The last response of the requirement loop, as `plnt render` runs the step."""
        req = copy.deepcopy(case.request)
        rsp, _ = render.run_with_requirements(self.run, req, list(case.required), self.step)
        return rsp

    def check(self, case: Case) -> fnv1.RunFunctionResponse:
        """Fails with a unified diff when the case's response differs from its want file."""
        assert self.kind in {t.kind for t in registered()}, f"list {self.kind}'s module in MODULES"
        path = self.want_file(case)
        shown = path.relative_to(ROOT)
        assert path.exists(), f"{shown} is missing: run {REGENERATE}"
        rsp = self.response(case)
        want, got = path.read_text(), document(rsp)
        if got != want:
            diff = difflib.unified_diff(
                want.splitlines(keepends=True),
                got.splitlines(keepends=True),
                fromfile=str(shown),
                tofile=f"{self.step}, case {case.name}",
                n=3,
            )
            pytest.fail(
                f"the response changed; if that is intended, run {REGENERATE}\n" + "".join(diff)
            )
        return rsp


def document(rsp: fnv1.RunFunctionResponse) -> str:
    """The whole response as YAML, keys sorted so that the text is stable."""
    doc = json_format.MessageToDict(rsp)
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, width=100)


def registered() -> list[Table]:
    return [importlib.import_module(m).TABLE for m in MODULES]


def rewrite() -> tuple[int, int]:
    """Writes every registered case's want file: (cases, files changed)."""
    cases = changed = 0
    for table in registered():
        for case in table.cases:
            cases += 1
            path, text = table.want_file(case), document(table.response(case))
            if not path.exists() or path.read_text() != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                changed += 1
                print(f"wrote {path.relative_to(ROOT)}")
    return cases, changed
