"""The packages the image tests need, built by the same command as `make package` (cached, so
only the first run on a machine pays for the Debian rootfs)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FUNCTION = "function-model-replica"  # the image the tests run: the largest pure function


@dataclasses.dataclass(frozen=True)
class Built:
    dist: pathlib.Path
    report: dict

    def artifact(self, name: str) -> pathlib.Path:
        (path,) = [pathlib.Path(p) for p in self.report["artifacts"] if f"/{name}-v" in p]
        return path

    @property
    def wheelhouse(self) -> pathlib.Path:
        return pathlib.Path(self.report["wheelhouse"])

    @property
    def plnt_wheel(self) -> pathlib.Path:
        return pathlib.Path(self.report["plnt_wheel"])


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    dist = tmp_path_factory.mktemp("dist")
    report = dist / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "hack" / "package.py"),
            "--dist",
            str(dist),
            "--only",
            FUNCTION,
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/package.py failed:\n{proc.stdout}{proc.stderr}")
    return Built(dist=dist, report=json.loads(report.read_text()))
