"""Shared fixtures: paths, the real Crossplane CLI, and function servers on loopback."""

from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHARED_CRDS = REPO.parent / "shared" / "crds"
CRANK = REPO / ".tools" / "bin" / "crank"

# `make test` runs pytest with `--dist loadgroup`: each xdist group runs on one worker, in file
# order. The live control plane's rollouts are gated on measured TTFT against the seed's 250 ms
# budget, and the llama-server test compares two clients' latencies; tests that saturate the cores
# (two burners, a 6,000-call storm) starved them into failing (p95 TTFT 447 ms measured beside the
# burners). So all of these share the "e2e" worker and never overlap. The package-install test
# brings up a bare control plane of its own and measures nothing: a group of its own
# ("e2e-packages"), on the other worker beside the shared stack.
WORKER_GROUPS = {
    "tests/e2e/test_package_install.py": "e2e-packages",
    "tests/e2e/": "e2e",
    "tests/engine/test_llama_server.py": "e2e",
    "tests/robustness/test_contention.py": "e2e",
    "tests/robustness/test_concurrency.py": "e2e",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group into the nodeid
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = next((g for prefix, g in WORKER_GROUPS.items() if path.startswith(prefix)), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


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
