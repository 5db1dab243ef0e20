"""`plnt validate` runs the real `crossplane beta validate` over plnt's XRDs and Compositions and
the resources it is given: the examples pass, an invalid XR fails naming itself."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

from plnt_host import render
from tests.conformance import crossplane_cli

REPO = crossplane_cli.REPO
PLNT = pathlib.Path(sys.executable).parent / "plnt"
INVALID = REPO / "tests" / "invalid" / "modelreplicas" / "endpoint-picker-two-containers.yaml"


def plnt_validate(crank: pathlib.Path, tmp: pathlib.Path, *paths: pathlib.Path):
    return subprocess.run(
        [str(PLNT), "validate", *map(str, paths), "--crossplane", str(crank),
         "--crds", str(crossplane_cli.SHARED_CRDS),
         "--cache-dir", str(crossplane_cli.validate_cache(tmp / "cache")),
         "--crossplane-image", crossplane_cli.CROSSPLANE_IMAGE],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def test_examples_xrds_and_compositions_validate(
    crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    install = REPO / "package" / "install"  # the control-plane Gateway among them
    proc = plnt_validate(crank, tmp_path, REPO / "examples", install)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = re.search(r"Total (\d+) resources: (\d+) missing schemas, (\d+) success cases, "
                        r"(\d+) failure cases", proc.stdout)  # fmt: skip
    assert summary, proc.stdout
    total, missing, success, failures = map(int, summary.groups())
    examples = len(render.load_path(REPO / "examples")) + len(render.load_path(install))
    xrds = len(crossplane_cli.xrd_files())
    compositions = len(render.compositions())
    assert total == examples + xrds + compositions
    assert failures == 0 and success == total - missing
    assert missing < examples, "most example documents must have a schema to be checked against"
    kinds = (
        "CompositeResourceDefinition",
        "Composition",
        "WorkflowRun",
        "ModelDeployment",
        "Gateway",
    )
    for kind in kinds:
        assert f"Kind={kind}," in proc.stdout, kind


def test_an_invalid_xr_fails(crank: pathlib.Path, tmp_path: pathlib.Path) -> None:
    proc = plnt_validate(crank, tmp_path, INVALID)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (xr,) = render.load_yaml_docs(INVALID)
    assert re.search(rf"\[x\] .*{xr['metadata']['name']}", proc.stdout), proc.stdout


def test_without_a_crossplane_cli_it_says_so(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [str(PLNT), "validate", "--crossplane", str(tmp_path / "nope")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "cannot run" in proc.stderr
