"""The query path against a real Prometheus scraping engine-style counters at known rates."""

from __future__ import annotations

import pytest

from plnt_reconciler import metrics
from plnt_reconciler.decision import MetricsStatus
from tests.reconcile.conftest import RATES, SCRAPED

TOLERANCE = 0.05  # counters exactly linear in their timestamps; slack for scrape spacing


def test_shipped_relabel_rules_keep_engine_pods_and_label_them(prometheus):
    series = prometheus.query('up{job="plnt-engines"}')
    seen = {
        (s["metric"]["pod"], s["metric"]["namespace"], s["metric"]["modelplane_deployment"])
        for s in series
    }
    assert {pod for pod, _, _ in seen} == SCRAPED  # no stray-0, no llama-sidecar on :9000
    assert ("llama-0", "team-a", "llama") in seen
    assert ("qwen-0", "team-b", "qwen") in seen
    assert all(s["value"][1] == "1" for s in series)
    engines = {s["metric"]["pod"]: s["metric"]["modelplane_engine"] for s in series}
    assert engines["mistral-0"] == "tgi"


def test_each_engine_counter_is_queried_under_its_own_name(prometheus):
    for engine, name in metrics.ENGINE_COUNTERS.items():
        found = prometheus.query(f'{name}{{modelplane_deployment!=""}}')
        assert found, f"no {engine} series named {name}"


def test_rates_per_deployment_match_the_known_rates(prometheus):
    client = metrics.Prometheus(prometheus.url, rate_window="10s", stale_after=60)
    try:
        readings = client.read()
    finally:
        client.close()
    assert readings.error == ""
    assert set(readings.rates) == set(RATES)  # frozen has no sample in the last 10 s
    for key, want in RATES.items():
        assert readings.rates[key] == pytest.approx(want, rel=TOLERANCE), key
        seen = readings.observation(key)
        assert seen.status is MetricsStatus.OK
        assert seen.rate == pytest.approx(want, rel=TOLERANCE)
    missing = readings.observation(("team-c", "frozen"))
    assert missing.status is MetricsStatus.MISSING
    assert "modelplane_deployment=frozen" in missing.detail
    assert readings.observation(("team-a", "nobody")).status is MetricsStatus.MISSING


def test_a_deployment_whose_newest_sample_is_old_reads_as_stale(prometheus):
    client = metrics.Prometheus(prometheus.url, rate_window="5m", stale_after=60)
    try:
        readings = client.read()
    finally:
        client.close()
    frozen = readings.observation(("team-c", "frozen"))
    assert frozen.status is MetricsStatus.STALE
    assert readings.ages[("team-c", "frozen")] >= 140  # the exporter stamps samples 150 s back
    assert readings.observation(("team-a", "llama")).status is MetricsStatus.OK


def test_a_bad_query_and_an_unreachable_server_fail_every_deployment(prometheus):
    client = metrics.Prometheus(prometheus.url)
    try:
        with pytest.raises(metrics.QueryError, match="HTTP 400: bad_data"):
            client.query("sum(")
    finally:
        client.close()
    gone = metrics.Prometheus("http://127.0.0.1:9", timeout=2)
    try:
        readings = gone.read()
    finally:
        gone.close()
    assert readings.error.startswith("ConnectError")
    assert readings.observation(("team-a", "llama")).status is MetricsStatus.FAILED
