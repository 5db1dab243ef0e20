"""The live control plane, started once per test session on one pytest worker.

Every test in this folder that uses the shared stack is in the xdist group "e2e" (tests/conftest.py
says which files share a worker), so one worker runs them all, in file order, against one stack.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Callable

import pytest

from tests.e2e import packages, stack


def _e2e_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> pathlib.Path:
    """A stack's working directory: ``$PLNT_E2E_DIR/name`` when set (a fixed place for the logs,
    kept after the run, emptied before it), else a new temporary one. Each stack has its own, so
    stacks on two workers never clear each other's."""
    keep = os.environ.get("PLNT_E2E_DIR")
    if not keep:
        return tmp_path_factory.mktemp(name)
    workdir = pathlib.Path(keep) / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return workdir


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], pathlib.Path]:
    """``e2e_dir(name)``: the working directory of a stack a test module starts itself."""
    return lambda name: _e2e_dir(tmp_path_factory, name)


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory):
    """Crossplane core, provider-kubernetes and plnt's functions on a management API server."""
    gaps = stack.missing()
    if gaps:
        pytest.fail("the live control plane needs " + ", ".join(gaps) + ": run `make test`")
    workdir = _e2e_dir(tmp_path_factory, "e2e")
    # One function runs from its built image under runc, as Crossplane's package runtime would
    # run it (tests/e2e/test_function_image.py); the image is built like `make package`.
    packages.build_packages(only=stack.FUNCTIONS_FROM_IMAGES)
    control_plane = stack.ControlPlane(
        workdir, functions_from_images=stack.FUNCTIONS_FROM_IMAGES, images=packages.DIST
    )
    try:
        yield control_plane
    finally:
        control_plane.close()
