"""Fixtures for the reconciler: a real Prometheus scraping a loopback engine exporter, and a
real kube-apiserver (with etcd) holding ModelDeployments. Both are started once per test
process (pytest-xdist runs one per worker) on free loopback ports in temp dirs."""

from __future__ import annotations

import pytest

from tests.reconcile import apiserver, engines
from tests.reconcile.engines import Pod

# Known generation rates (tokens/s). Kept: the plnt engine pods on port 8000. Dropped by the
# shipped relabel rules: a pod without the deployment label and a non-engine port.
PODS = [
    Pod("llama-0", "team-a", "llama", "vllm", 120.0),
    Pod("llama-1", "team-a", "llama", "vllm", 80.0),
    Pod("llama-sidecar", "team-a", "llama", "vllm", 500.0, port=9000),
    Pod("qwen-0", "team-b", "qwen", "sglang", 90.0),
    Pod("mistral-0", "team-a", "mistral", "tgi", 60.0),
    Pod("stray-0", "team-a", None, "vllm", 1000.0),
    Pod("frozen-0", "team-c", "frozen", "vllm", 40.0, lag_seconds=150.0),
]
RATES = {("team-a", "llama"): 200.0, ("team-b", "qwen"): 90.0, ("team-a", "mistral"): 60.0}
SCRAPED = {p.name for p in PODS if p.deployment is not None and p.port == 8000}
SAMPLES = 12  # scrapes per target before the rates are read (1 s apart)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    """Prometheus with at least SAMPLES scrapes of every kept target."""
    exporter = engines.Exporter(PODS)
    server = engines.Prometheus(
        engines.prometheus_config(exporter), tmp_path_factory.mktemp("prometheus")
    )
    try:
        server.wait(
            lambda: (
                len(server.query(f'count_over_time(up{{job="plnt-engines"}}[1m]) >= {SAMPLES}'))
                == len(SCRAPED)
            ),
            45,
        )
        yield server
    finally:
        server.close()
        exporter.close()


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory):
    server = apiserver.APIServer(tmp_path_factory.mktemp("apiserver"))
    try:
        yield server
    finally:
        server.close()
