"""`crossplane render` (the real CLI, calling our functions over gRPC) agrees with `plnt render`.

For every scenario in examples/, both renderers get the same XR, the same required resources
and the same observed resources. The composed resources must be identical, field for field.
What `crossplane render` adds that plnt does not is normalised away explicitly, below.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from plnt import xp
from plnt_host import render
from tests.conformance import crossplane_cli

REPO = crossplane_cli.REPO
SCENARIOS = render.scenario_folders(REPO / "examples")
CATALOGUE = render.compositions()


def composition_file(xr: dict[str, Any]) -> pathlib.Path:
    for f in sorted((REPO / "compositions").glob("*.yaml")):
        for doc in render.load_yaml_docs(f):
            ref = doc["spec"]["compositeTypeRef"]
            if (ref["apiVersion"], ref["kind"]) == (xr["apiVersion"], xr["kind"]):
                return f
    raise AssertionError(f"no composition for {xr['kind']}")


def normalise(obj: dict[str, Any]) -> dict[str, Any]:
    """Drops what only one renderer sets. Today that is nothing but empty containers."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    for key in ("annotations", "labels"):
        if meta.get(key) == {}:
            meta.pop(key)
    return out


def crossplane_render(
    crank: pathlib.Path, scenario: render.Scenario, functions_file: pathlib.Path, tmp: pathlib.Path
) -> list[dict[str, Any]]:
    xr_file = tmp / "xr.yaml"
    xr_file.write_text(render.dump([scenario.xr]))
    args = ["render", str(xr_file), str(composition_file(scenario.xr)), str(functions_file)]
    # Hand crank exactly the documents plnt loaded (symlinked folders included).
    for flag, docs in (
        ("--required-resources", scenario.required),
        ("--observed-resources", scenario.observed),
    ):
        if docs:
            path = tmp / f"{flag.strip('-')}.yaml"
            path.write_text(render.dump(docs))
            args += [flag, str(path)]
    proc = crossplane_cli.run(crank, *args)
    assert proc.returncode == 0, f"crossplane render failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.mark.parametrize("folder", SCENARIOS, ids=[str(s.relative_to(REPO)) for s in SCENARIOS])
def test_crossplane_render_matches_plnt_render(
    folder: pathlib.Path, crank: pathlib.Path, functions_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = render.load_scenario(folder)
    ours = render.render(scenario, catalogue=CATALOGUE)
    theirs = crossplane_render(crank, scenario, functions_file, tmp_path)

    their_xr, their_composed = theirs[0], theirs[1:]
    assert their_xr["kind"] == scenario.xr["kind"]
    assert normalise(their_xr) == normalise(ours.xr)

    def by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in objs}

    mine, crossplanes = by_name(ours.composed), by_name(their_composed)
    assert sorted(crossplanes) == sorted(mine), "different composed resources"
    assert len(mine) >= 1 or ours.xr["status"]["conditions"], "rendered nothing at all"
    for name in mine:
        assert normalise(crossplanes[name]) == normalise(mine[name]), name
