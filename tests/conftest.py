"""Shared fixtures: paths, the real Crossplane CLI, and function servers on loopback."""

from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHARED_CRDS = REPO.parent / "shared" / "crds"
CRANK = REPO / ".tools" / "bin" / "crank"


@pytest.fixture(scope="session")
def crank() -> pathlib.Path:
    """The real Crossplane CLI; `make test` builds it, so its absence is a failure, never a skip."""
    if not CRANK.is_file():
        pytest.fail(f"{CRANK} is missing: run `make test` (hack/setup.sh builds it)")
    return CRANK


@pytest.fixture(scope="session")
def k8svalidate(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Kubernetes' own strict decoding and validation (tests/k8svalidate, built with Go)."""
    from tests.k8svalidate import runner

    return runner.build(tmp_path_factory.mktemp("k8svalidate"))
