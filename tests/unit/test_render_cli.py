"""`plnt render`: bad input exits 2 with one line naming the file; the pipeline mechanics."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt_host import render

PLNT = pathlib.Path(sys.executable).parent / "plnt"


def plnt_render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PLNT), "render", *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("missing", "no xr.yaml"),
        ("invalid-yaml", "invalid YAML"),
        ("unknown-kind", "no Composition in compositions/ composes Gizmo"),
        ("not-an-object", "every document must be a Kubernetes object"),
    ],
)
def test_bad_input_exits_2_naming_the_file(tmp_path: pathlib.Path, setup: str, needle: str) -> None:
    folder = tmp_path / setup
    folder.mkdir()
    xr = folder / "xr.yaml"
    if setup == "invalid-yaml":
        xr.write_text("apiVersion: v1\nkind: [unclosed\n")
    elif setup == "unknown-kind":
        xr.write_text("apiVersion: example.org/v1\nkind: Gizmo\nmetadata: {name: g}\n")
    elif setup == "not-an-object":
        xr.write_text("- just\n- a list\n")
    proc = plnt_render(str(folder))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    if setup != "unknown-kind":
        assert str(xr) in lines[0]


def test_requirements_are_answered_until_stable() -> None:
    """A step is re-run with what it asked for, as Crossplane's FetchingFunctionRunner does."""
    calls: list[set[str]] = []

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = xp.respond(req)
        calls.append(set(req.required_resources))
        classes = xp.require(req, rsp, "classes", "modelplane.ai/v1alpha1", "InferenceClass")
        if classes is None:
            return rsp
        names = [c["metadata"]["name"] for c in classes]
        # A second-level requirement, only known once the first is answered.
        xp.require(
            req, rsp, "first", "v1", "Secret", match_name=f"{names[0]}-secret", namespace="ns"
        )
        xp.set_status(rsp, {"classes": names})
        return rsp

    required = [
        {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass", "metadata": {"name": n}}
        for n in ("b", "a")
    ] + [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b-secret", "namespace": "ns"}}
    ]
    req = fnv1.RunFunctionRequest()
    rsp, final = render.run_with_requirements(run, req, required, "step")
    assert set(final.required_resources) == {"classes", "first"}
    assert calls == [set(), {"classes"}, {"classes", "first"}]
    assert xp.to_dict(rsp.desired.composite.resource)["status"]["classes"] == ["b", "a"]


def test_step_requirements_are_answered_before_the_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipeline step's `requirements.requiredResources` (by name and by labels) arrive in
    its very first request, as Crossplane's bootstrap requirements do."""
    seen: list[dict[str, list[str]]] = []

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        seen.append(
            {
                key: [xp.to_dict(i.resource)["metadata"]["name"] for i in res.items]
                for key, res in req.required_resources.items()
            }
        )
        return xp.respond(req)

    monkeypatch.setattr(render, "_step_function", lambda step: run)
    composition = {
        "spec": {
            "pipeline": [
                {
                    "step": "only",
                    "functionRef": {"name": "function-anything"},
                    "requirements": {
                        "requiredResources": [
                            {
                                "requirementName": "one",
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "name": "b",
                            },
                            {
                                "requirementName": "labelled",
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "matchLabels": {"pick": "yes"},
                            },
                        ]
                    },
                }
            ]
        }
    }
    required = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "labels": labels}}
        for n, labels in (("a", {"pick": "yes"}), ("b", {}), ("c", {"pick": "yes"}))
    ] + [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}]
    xr = {"apiVersion": "example.org/v1", "kind": "X", "metadata": {"name": "x"}}
    render.run_pipeline(composition, xr, [], required)
    assert seen == [{"one": ["b"], "labelled": ["a", "c"]}]


def test_composed_metadata_matches_crossplane() -> None:
    xr = {
        "apiVersion": "x.io/v1",
        "kind": "X",
        "metadata": {"name": "top", "namespace": "ns", "uid": "u1"},
    }
    obj = render._composed_metadata({"apiVersion": "v1", "kind": "ConfigMap"}, xr, "cm")
    assert obj["metadata"] == {
        "generateName": "top-",
        "namespace": "ns",
        "annotations": {xp.COMPOSITION_RESOURCE_NAME: "cm"},
        "labels": {render.COMPOSITE_LABEL: "top"},
        "ownerReferences": [
            {
                "apiVersion": "x.io/v1",
                "kind": "X",
                "name": "top",
                "uid": "u1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


@pytest.mark.parametrize(
    ("names", "want"),
    [
        (["b", "a"], "a, b"),
        (["c", "b", "a"], "a, b, and c"),
        (["d", "c", "b", "a", "e"], "a, b, c, and 2 more"),
    ],
)
def test_unready_names_read_like_crossplanes(names: list[str], want: str) -> None:
    assert render._stable_names(names) == want
