"""Every WorkflowRun phase scenario through the real Crossplane CLI.

`crossplane render` calls function-workflow-run over gRPC with each scenario's observed
state and must print the phase the folder is named for, with the same composed resources as
`plnt render`; `crossplane beta validate` accepts each scenario's inputs and its rendered
tree (down to the ModelReplicas) against the XRDs and the third-party CRDs.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from plnt import xp
from plnt_host import procs, render
from tests.conformance import crossplane_cli

REPO = pathlib.Path(__file__).resolve().parents[2]
PHASES = render.scenario_folders(REPO / "examples/workflowrun-phases")
COMPOSITION = REPO / "compositions/workflowruns.yaml"
# YAML 1.1 (PyYAML) leaves "0937665791" unquoted; YAML 1.2 (Go) reads that as a number.
_NUMBERISH = re.compile(r"^[-+]?(\d[\d_]*(\.\d*)?([eE][-+]?\d+)?|0x[0-9a-fA-F]+|0o[0-7]+)$")


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "'" if _NUMBERISH.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(path: pathlib.Path, docs: list[dict]) -> pathlib.Path:
    path.write_text(yaml.dump_all(docs, Dumper=_Dumper, explicit_start=True))
    return path


@pytest.fixture(scope="module")
def functions_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    tmp = tmp_path_factory.mktemp("workflow-run-fn")
    with procs.serving("function-workflow-run", log=tmp / "fn.log") as (address, _):
        doc = {
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "Function",
            "metadata": {
                "name": "plnt-function-workflow-run",
                "annotations": {
                    "render.crossplane.io/runtime": "Development",
                    "render.crossplane.io/runtime-development-target": address,
                },
            },
            "spec": {"package": "xpkg.crossplane.io/plnt/function-workflow-run:v0.1.0"},
        }
        yield dump(tmp / "functions.yaml", [doc])


@pytest.mark.parametrize("folder", PHASES, ids=[p.name for p in PHASES])
def test_crossplane_render_prints_the_phase(
    folder: pathlib.Path, crank: pathlib.Path, functions_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = render.load_scenario(folder)
    args = [
        "render",
        str(dump(tmp_path / "xr.yaml", [scenario.xr])),
        str(COMPOSITION),
        str(functions_file),
    ]
    if scenario.observed:
        args += ["--observed-resources", str(dump(tmp_path / "observed.yaml", scenario.observed))]
    proc = crossplane_cli.run(crank, *args)
    assert proc.returncode == 0, proc.stderr
    xr, *composed = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert xr["status"]["phase"] == folder.name
    ours = render.render(scenario)
    assert xr["status"] == ours.xr["status"]

    def by_name(objs: list[dict]) -> dict[str, dict]:
        return {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in objs}

    assert by_name(composed) == by_name(ours.composed)


def test_phase_scenarios_and_their_trees_validate(
    crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    docs: list[dict] = []
    for folder in PHASES:
        scenario = render.load_scenario(folder)
        docs += [scenario.xr, *scenario.observed]
        tree = list(render.render(scenario, tree=True).stream())
        # a rendered XR is printed with its status only; its spec is validated where it is
        # composed (or in xr.yaml)
        docs += [o for o in tree if "spec" in o] + crossplane_cli.embedded_manifests(tree)
    extensions = crossplane_cli.xrd_files() + crossplane_cli.third_party_crds()
    proc = crossplane_cli.validate(crank, extensions, dump(tmp_path / "all.yaml", docs), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failure cases" in proc.stdout
    assert "Kind=WorkflowRun" in proc.stdout and "Kind=ModelReplica" in proc.stdout
