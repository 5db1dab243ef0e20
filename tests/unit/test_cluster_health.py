"""Cluster health, pure: the published record, what makes a cluster degraded, when the prober
publishes a change, how a failed connection is named, and the fleet view carrying it."""

from __future__ import annotations

import urllib3

from plnt import cluster_health
from plnt.capacity import fleet_view, offer
from plnt.cluster_health import Record
from plnt_reconciler import probe

T0 = 1_800_000_000.0
SINCE = cluster_health.timestamp(T0)
FAIL = probe.Outcome(False, cluster_health.TIMED_OUT, "GET https://h:6443/readyz: no answer")
OK = probe.Outcome(True)


def cluster(ready: bool = True, record: Record | None = None, since: str = SINCE) -> dict:
    obj: dict = {
        "metadata": {"name": "lab"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": str(ready), "lastTransitionTime": since,
                 "reason": "Unavailable", "message": "the gateway release is not ready"}
            ],
            "pools": [{"name": "h", "className": "c", "nodeCapacity": 2}],
            "gateway": {"address": "10.0.0.1"},
        },
    }  # fmt: skip
    if record is not None:
        obj["metadata"]["annotations"] = {cluster_health.ANNOTATION: record.to_annotation()}
    return obj


def test_the_record_round_trips_and_garbage_reads_as_not_probed() -> None:
    down = Record(False, cluster_health.REFUSED, "connection refused", SINCE)
    assert cluster_health.parse(down.to_annotation()) == down
    for bad in (None, "", "{", "[]", '{"state":"Maybe","since":"x"}', '{"state":"Reachable"}',
                '{"state":"Unreachable","since":"yesterday"}'):  # fmt: skip
        assert cluster_health.parse(bad) is None


def test_an_unanswering_api_server_makes_a_ready_cluster_degraded() -> None:
    down = Record(False, cluster_health.TIMED_OUT, "no answer within 5s", SINCE)
    seen = offer.cluster_of(cluster(True, down))
    assert not seen.ready
    assert seen.degraded == cluster_health.Degraded(
        T0, cluster_health.TIMED_OUT, "API server not answering: no answer within 5s"
    )
    assert offer.cluster_of(cluster(True)).degraded is None
    up = Record(True, cluster_health.REACHABLE, "answers /readyz", SINCE)
    assert offer.cluster_of(cluster(True, up)).ready


def test_a_cluster_not_ready_is_degraded_since_its_ready_condition_changed() -> None:
    seen = offer.cluster_of(cluster(False))
    assert seen.degraded is not None
    assert (seen.degraded.since, seen.degraded.reason) == (T0, cluster_health.NOT_READY_CONDITION)
    assert "the gateway release is not ready" in seen.degraded.message


def test_publish_needs_failures_in_a_row_and_keeps_when_it_began() -> None:
    streak = None
    for n in range(3):
        streak = probe.observe(streak, FAIL, T0 + 5 * n)
        record = probe.publish(None, streak, failures=3)
        assert (record is None) == (n < 2)
    assert record == Record(False, FAIL.reason, FAIL.message, SINCE)  # the first failure's time
    # a restarted binder starts a new streak; the published outage keeps its start
    later = probe.observe(None, FAIL, T0 + 600)
    again = probe.publish(record, probe.observe(probe.observe(later, FAIL, T0 + 605), FAIL, 0))
    assert again is not None and again.since == SINCE
    # answers again: Reachable only after `successes` in a row, since the first of them
    back = probe.observe(later, OK, T0 + 700)
    assert probe.publish(record, back, successes=2) == record
    back = probe.observe(back, OK, T0 + 705)
    assert probe.publish(record, back, successes=2) == Record(
        True, cluster_health.REACHABLE, "answers /readyz", cluster_health.timestamp(T0 + 700)
    )


def test_one_failure_between_answers_changes_nothing() -> None:
    up = Record(True, cluster_health.REACHABLE, "answers /readyz", SINCE)
    streak = probe.observe(probe.observe(None, OK, T0), FAIL, T0 + 5)
    assert probe.publish(up, streak, failures=3) == up
    assert probe.publish(up, probe.observe(streak, OK, T0 + 10)) == up


def test_failed_connections_are_named_without_their_text() -> None:
    refused = urllib3.exceptions.MaxRetryError(
        None,
        "/readyz",
        urllib3.exceptions.NewConnectionError(None, "[Errno 111] Connection refused"),
    )
    assert probe.classify(refused, "GET h", 5).reason == cluster_health.REFUSED
    timed = urllib3.exceptions.ReadTimeoutError(None, "/readyz", "Read timed out.")
    said = probe.classify(timed, "GET h", 5)
    assert (said.reason, said.message) == (cluster_health.TIMED_OUT, "GET h: no answer within 5s")
    other = probe.classify(urllib3.exceptions.SSLError("bad certificate"), "GET h", 5)
    assert (other.reason, other.message) == (cluster_health.UNREACHABLE_REASON, "GET h: SSLError")


def test_where_the_kubeconfig_is() -> None:
    existing = {
        "metadata": {"name": "lab"},
        "spec": {"cluster": {"existing": {"secretRef": {"name": "k", "namespace": "ns"}}}},
    }
    assert probe.secret_ref(existing) == probe.SecretRef("ns", "k", "kubeconfig")
    coreweave = {"metadata": {"name": "cw"}, "spec": {"cluster": {"coreweave": {"namespace": "p"}}}}
    assert probe.secret_ref(coreweave) == probe.SecretRef("p", "cw-kubeconfig", "kubeconfig")
    assert probe.secret_ref({"metadata": {"name": "x"}, "spec": {}}) is None
    assert probe.kubeconfig_text({"kubeconfig": "not base64!"}, "kubeconfig") is None


def test_the_fleet_view_carries_why_and_since_when() -> None:
    down = Record(False, cluster_health.REFUSED, "connection refused", SINCE)
    degraded = offer.cluster_of(cluster(True, down))
    healthy = offer.cluster_of({**cluster(True), "metadata": {"name": "other"}})
    views = [fleet_view.ClusterView(degraded, 3, {}), fleet_view.ClusterView(healthy, 1, {})]
    maps = fleet_view.configmaps(fleet_view.parts(views))
    read, bad = fleet_view.read(m for m in maps if m["metadata"]["name"] != fleet_view.INDEX_NAME)
    assert not bad
    assert read["lab"].cluster == degraded
    assert read["other"].cluster.degraded is None and read["other"].cluster.ready


def test_the_nudge_changes_with_the_state_only() -> None:
    a = cluster_health.Degraded(T0, "TimedOut", "one message")
    b = cluster_health.Degraded(T0, "TimedOut", "another message")
    assert cluster_health.nudge(a) == cluster_health.nudge(b) != cluster_health.nudge(None)


def test_a_closed_ledger_changes_the_nudge_whatever_the_health() -> None:
    healthy = cluster_health.nudge(None)
    closed = cluster_health.nudge(None, ledger_closed=True)
    assert len({healthy, closed}) == 2
    assert cluster_health.nudge(None, ledger_closed=False) == healthy
