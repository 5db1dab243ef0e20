"""`crossplane beta validate`: XRDs, example XRs, rendered resources and invalid XRs."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt_host import render
from tests.conformance import crossplane_cli

REPO = crossplane_cli.REPO
SCENARIOS = render.scenario_folders(REPO / "examples")
INVALID = sorted(REPO.glob("tests/invalid/*/*.yaml"))
EXPECT = "plnt.work/expect-error"
NOT_FATAL = {"WorkflowRun"}  # kinds whose functions refuse invalid input with phase Failed


def test_xrds_are_valid(crank: pathlib.Path, tmp_path: pathlib.Path) -> None:
    xrds = crossplane_cli.xrd_files()
    assert xrds, "no XRDs under apis/"
    proc = crossplane_cli.validate(
        crank, xrds, [yaml.safe_load(x.read_text()) for x in xrds], tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(xrds)} success cases" in proc.stdout


def test_example_inputs_validate(crank: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = []
    for folder in SCENARIOS:
        scenario = render.load_scenario(folder)
        docs += [scenario.xr, *scenario.required, *scenario.observed]
    extensions = crossplane_cli.xrd_files() + crossplane_cli.third_party_crds()
    proc = crossplane_cli.validate(crank, extensions, docs, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failure cases" in proc.stdout


@pytest.mark.parametrize("folder", SCENARIOS, ids=[str(s.relative_to(REPO)) for s in SCENARIOS])
def test_rendered_tree_validates(
    folder: pathlib.Path, crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = render.render(render.load_scenario(folder), tree=True)
    objs = []
    for node in out.tree():
        objs += [node.full_xr(), *node.composed]
    objs += crossplane_cli.embedded_manifests(objs)
    extensions = crossplane_cli.xrd_files() + crossplane_cli.third_party_crds()
    proc = crossplane_cli.validate(crank, extensions, objs, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failure cases" in proc.stdout


def _xrd_for(xr: dict) -> pathlib.Path:
    group = xr["apiVersion"].split("/")[0]
    for xrd in crossplane_cli.xrd_files():
        spec = yaml.safe_load(xrd.read_text())["spec"]
        if spec["group"] == group and spec["names"]["kind"] == xr["kind"]:
            return xrd
    raise AssertionError(f"no XRD for {xr['kind']}")


@pytest.mark.parametrize(
    "path", INVALID, ids=[str(p.relative_to(REPO / "tests/invalid")) for p in INVALID]
)
def test_invalid_xr_is_rejected_by_crossplane_and_the_function(
    path: pathlib.Path, crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (xr,) = render.load_yaml_docs(path)
    expected = xr["metadata"].get("annotations", {}).get(EXPECT)
    assert expected, f"{path} must say what error it expects in the {EXPECT} annotation"

    proc = crossplane_cli.validate(crank, [_xrd_for(xr)], path, tmp_path)
    assert proc.returncode != 0, f"crossplane beta validate accepted {path.name}:\n{proc.stdout}"
    assert "[x]" in proc.stdout

    composition = render.compositions()[(xr["apiVersion"], xr["kind"])]
    if xr["kind"] in NOT_FATAL:
        # Refused without a Fatal, whose status Crossplane would discard: phase Failed, a
        # Warning and a Valid condition naming the field.
        desired, results, conds, _ = render.run_pipeline(composition, xr, [], [])
        status = xp.to_dict(desired.composite.resource)["status"]
        assert status["phase"] == "Failed"
        (valid,) = [c for c in conds if c.type == "Valid"]
        assert (valid.status, valid.reason) == (fnv1.STATUS_CONDITION_FALSE, "InvalidSpec")
        assert expected in valid.message
        assert [r.severity for _, r in results] == [fnv1.SEVERITY_WARNING]
        return
    with pytest.raises(render.PipelineError) as err:
        render.run_pipeline(composition, xr, [], [])
    assert "fatal result" in str(err.value)
    assert expected in str(err.value)
