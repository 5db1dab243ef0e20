"""`plnt render XR COMPOSITION FUNCTIONS` with crossplane render's flags prints what the real
`crossplane render` prints for the same command line: the positional form, --required-resources,
--observed-resources, -r (Result objects), -x (the input's spec and metadata), -c (the Context)
and --context-values, document for document."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from plnt_host import render
from tests.conformance import crossplane_cli
from tests.conformance.test_render import composition_file, normalise

REPO = crossplane_cli.REPO
PLNT = pathlib.Path(sys.executable).parent / "plnt"
# Scenarios with required and observed resources, results and context between steps.
SCENARIOS = ["deploy-canary", "deploy-shortfall", "coreweave-cluster-ready", "canary-pass"]
CONTEXT = ("plnt.work/example", '{"note": "from the command line", "n": 3}')


def _args(scenario: render.Scenario, functions: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    xr = tmp / "xr.yaml"
    xr.write_text(render.dump([scenario.xr]))
    args = [str(xr), str(composition_file(scenario.xr)), str(functions)]
    for flag, docs in (
        ("--required-resources", scenario.required),
        ("--observed-resources", scenario.observed),
    ):
        if docs:
            path = tmp / f"{flag.strip('-')}.yaml"
            path.write_text(render.dump(docs))
            args += [flag, str(path)]
    return [*args, "-r", "-x", "-c", "--context-values", "=".join(CONTEXT)]


@pytest.mark.parametrize("name", SCENARIOS)
def test_positional_form_and_flags_match_crossplane_render(
    name: str, crank: pathlib.Path, functions_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = render.load_scenario(REPO / "examples" / name)
    args = _args(scenario, functions_file, tmp_path)
    theirs = crossplane_cli.run(crank, "render", *args)
    assert theirs.returncode == 0, theirs.stderr
    ours = subprocess.run(
        [str(PLNT), "render", *args], capture_output=True, text=True, check=False, timeout=120
    )
    assert ours.returncode == 0, ours.stderr
    their_docs = [normalise(d) for d in yaml.safe_load_all(theirs.stdout) if d]
    our_docs = [normalise(d) for d in yaml.safe_load_all(ours.stdout) if d]

    def key(d: dict) -> str:
        return json.dumps(d, sort_keys=True)

    # crossplane render orders composed resources by name too, but compare as sets of documents
    # so only content matters; the XR comes first in both.
    assert our_docs[0] == their_docs[0]
    assert sorted(map(key, our_docs)) == sorted(map(key, their_docs))
    kinds = [d["kind"] for d in our_docs]
    assert kinds[-1] == "Context" and kinds.count("Context") == 1
    assert our_docs[-1]["fields"][CONTEXT[0]] == json.loads(CONTEXT[1])
    assert our_docs[0]["spec"] == scenario.xr["spec"], "-x copies the input's spec"


def test_json_output_is_the_yaml_as_a_list() -> None:
    folder = REPO / "examples" / "model-service"
    as_yaml = subprocess.run(
        [str(PLNT), "render", str(folder)], capture_output=True, text=True, check=True
    )
    as_json = subprocess.run(
        [str(PLNT), "render", "-o", "json", str(folder)], capture_output=True, text=True, check=True
    )
    listed = json.loads(as_json.stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == [d for d in yaml.safe_load_all(as_yaml.stdout) if d]
    assert listed["items"][0]["kind"] == "ModelService"
