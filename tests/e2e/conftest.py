"""The live control plane, started once per test session on one pytest worker.

Every test in this folder is in the xdist group "e2e" (`make test` runs pytest with
`--dist loadgroup`), so one worker runs them all, in file order, against one stack.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from tests.e2e import packages, stack


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group into the nodeid
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group("e2e"))


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory):
    """Crossplane core, provider-kubernetes and plnt's functions on a management API server."""
    gaps = stack.missing()
    if gaps:
        pytest.fail("the live control plane needs " + ", ".join(gaps) + ": run `make test`")
    keep = os.environ.get("PLNT_E2E_DIR")  # a fixed place for the logs, kept after the run
    if keep:
        workdir = pathlib.Path(keep)
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
    else:
        workdir = tmp_path_factory.mktemp("e2e")
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
