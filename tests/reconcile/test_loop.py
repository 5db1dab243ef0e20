"""The reconcile pass with an in-memory cluster: what gets written, when, and what is skipped;
the health endpoint; the command line's argument checks."""

from __future__ import annotations

import json

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from plnt_reconciler import cli, health, kube
from plnt_reconciler.decision import Policy
from plnt_reconciler.loop import Heartbeat, Reconciler
from plnt_reconciler.metrics import Readings


class FakeCluster:
    """The Cluster protocol over a dict of ModelDeployments, recording every write."""

    def __init__(self, items: list[dict]) -> None:
        self.items = {(m["metadata"]["namespace"], m["metadata"]["name"]): m for m in items}
        self.writes: list[tuple] = []
        self.conflict_on: set[str] = set()  # every scale write conflicts
        self.moves: dict[str, int] = {}  # the next scale write conflicts, as another writer moved
        self.replicas_moved_to: dict[str, int] = {}  # ... and that writer also scaled

    def read_scale(self, namespace, name):
        md = self.items[(namespace, name)]
        return kube.Scale(md["spec"].get("replicas", 0), md["metadata"]["resourceVersion"])

    def patch_scale(self, namespace, name, replicas, resource_version):
        md = self.items[(namespace, name)]
        if name in self.conflict_on:
            raise ApiException(status=409, reason="Conflict")
        if self.moves.get(name):
            self.moves[name] -= 1
            md["metadata"]["resourceVersion"] = str(int(md["metadata"]["resourceVersion"]) + 1)
            if name in self.replicas_moved_to:
                md["spec"]["replicas"] = self.replicas_moved_to[name]
            raise ApiException(status=409, reason="Conflict")
        assert resource_version == md["metadata"]["resourceVersion"]
        md["spec"]["replicas"] = replicas
        self.writes.append(("scale", name, replicas))
        return replicas

    def annotate(self, namespace, name, decision):
        md = self.items[(namespace, name)]
        md["metadata"].setdefault("annotations", {})[kube.ANNOTATION] = json.dumps(
            decision.annotation()
        )
        self.writes.append(("annotate", name, str(decision.reason)))

    def event(self, md, decision):
        self.writes.append(("event", md["metadata"]["name"], str(decision.reason)))


class FixedMetrics:
    def __init__(self, rates: dict, error: str = "") -> None:
        self.readings = Readings(rates=rates, error=error)

    def read(self) -> Readings:
        return self.readings


def model_deployment(name: str, replicas: int, auto: dict | None, canary: str = "") -> dict:
    obj = {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": "7", "uid": "u"},
        "spec": {"replicas": replicas},
        "status": {"revisions": {"canary": canary}},
    }
    if auto is not None:
        obj["spec"]["autoscaling"] = auto
    return obj


AUTO = {"targetTokensPerSecond": 100, "minReplicas": 1, "maxReplicas": 6}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reconciler(cluster, rates, error="", clock=None):
    return Reconciler(cluster, FixedMetrics(rates, error), Policy(4, 300), clock or Clock())


def test_scale_up_writes_scale_event_and_annotation_once():
    cluster = FakeCluster([model_deployment("llama", 1, AUTO)])
    r = reconciler(cluster, {("ns", "llama"): 350.0})
    [out] = r.reconcile(list(cluster.items.values()))
    assert (out.decision.to_replicas, out.applied, out.recorded) == (4, True, True)
    assert cluster.writes == [
        ("scale", "llama", 4),
        ("event", "llama", "ScaleUp"),
        ("annotate", "llama", "ScaleUp"),
    ]
    cluster.writes.clear()
    r.reconcile(list(cluster.items.values()))  # now steady at 4: one record of that
    r.reconcile(list(cluster.items.values()))  # and nothing more while it stays so
    assert cluster.writes == [("event", "llama", "Steady"), ("annotate", "llama", "Steady")]


def test_deployments_without_or_with_bad_autoscaling_are_skipped_untouched():
    bad = {"targetTokensPerSecond": 0, "maxReplicas": 2}
    inverted = {"targetTokensPerSecond": 10, "minReplicas": 5, "maxReplicas": 2}
    cluster = FakeCluster(
        [
            model_deployment("plain", 2, None),
            model_deployment("bad", 2, bad),
            model_deployment("inverted", 2, inverted),
        ]
    )
    outcomes = reconciler(cluster, {}).reconcile(list(cluster.items.values()))
    assert [o.decision for o in outcomes] == [None, None, None]
    assert "no spec.autoscaling.targetTokensPerSecond" in outcomes[0].error
    # The model the function validates with, so the same field and words.
    assert "spec.autoscaling.targetTokensPerSecond: Input should be greater than 0" in (
        outcomes[1].error
    )
    assert "spec.autoscaling: minReplicas must not exceed maxReplicas" in outcomes[2].error
    assert cluster.writes == []


def test_failed_query_keeps_the_count_and_warns_once():
    cluster = FakeCluster([model_deployment("llama", 3, AUTO)])
    r = reconciler(cluster, {}, error="ConnectError: refused")
    [out] = r.reconcile(list(cluster.items.values()))
    assert (out.decision.to_replicas, str(out.decision.reason)) == (3, "MetricsQueryFailed")
    assert out.decision.warning
    assert "ConnectError: refused" in out.decision.message
    r.reconcile(list(cluster.items.values()))
    assert cluster.writes == [
        ("event", "llama", "MetricsQueryFailed"),
        ("annotate", "llama", "MetricsQueryFailed"),
    ]


def test_canary_in_progress_holds():
    cluster = FakeCluster([model_deployment("llama", 2, AUTO, canary="llama-r2")])
    [out] = reconciler(cluster, {("ns", "llama"): 900.0}).reconcile(list(cluster.items.values()))
    assert (out.decision.to_replicas, str(out.decision.reason)) == (2, "CanaryInProgress")
    assert ("scale", "llama", 6) not in cluster.writes


def test_conflicting_scale_write_is_reported_and_not_recorded():
    cluster = FakeCluster([model_deployment("llama", 1, AUTO)])
    cluster.conflict_on.add("llama")
    [out] = reconciler(cluster, {("ns", "llama"): 350.0}).reconcile(list(cluster.items.values()))
    assert not out.applied
    assert out.error.startswith("writing scale: HTTP 409")
    assert cluster.writes == []


def test_a_status_write_between_read_and_scale_write_is_retried_on_the_fresh_version():
    cluster = FakeCluster([model_deployment("llama", 1, AUTO)])
    cluster.moves["llama"] = 2  # Crossplane wrote the XR's status twice meanwhile
    [out] = reconciler(cluster, {("ns", "llama"): 350.0}).reconcile(list(cluster.items.values()))
    assert out.applied and not out.error
    assert ("scale", "llama", out.decision.to_replicas) in cluster.writes
    assert cluster.items[("ns", "llama")]["spec"]["replicas"] == out.decision.to_replicas > 1


def test_someone_elses_scale_between_read_and_write_is_left_alone():
    cluster = FakeCluster([model_deployment("llama", 1, AUTO)])
    cluster.moves["llama"] = 1
    cluster.replicas_moved_to["llama"] = 3  # kubectl scale landed first
    [out] = reconciler(cluster, {("ns", "llama"): 350.0}).reconcile(list(cluster.items.values()))
    assert not out.applied
    assert "spec.replicas moved from 1 to 3" in out.error
    assert cluster.items[("ns", "llama")]["spec"]["replicas"] == 3
    assert not [w for w in cluster.writes if w[0] == "scale"]


def test_scale_down_happens_after_the_window_on_the_loop_clock():
    clock = Clock()
    cluster = FakeCluster([model_deployment("llama", 5, AUTO)])
    r = reconciler(cluster, {("ns", "llama"): 120.0}, clock=clock)
    for _ in range(10):  # 0..270 s: low readings do not yet cover the 300 s window
        [out] = r.reconcile(list(cluster.items.values()))
        assert str(out.decision.reason) == "ScaleDownStabilizing"
        clock.now += 30
    [out] = r.reconcile(list(cluster.items.values()))
    assert (str(out.decision.reason), out.decision.to_replicas) == ("ScaleDown", 2)


def test_health_endpoints_report_liveness_and_readiness():
    clock = Clock()
    beat = Heartbeat(interval=10, clock=clock)
    server = health.serve("127.0.0.1:0", alive=beat.alive, ready=beat.ready.is_set)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert httpx.get(f"{base}/healthz").status_code == 200  # starting counts as alive
        assert httpx.get(f"{base}/readyz").status_code == 503
        beat.beat()
        assert httpx.get(f"{base}/readyz").status_code == 200
        clock.now += 61  # three intervals (or 60 s) without a pass: the loop is stuck
        assert httpx.get(f"{base}/healthz").status_code == 503
        assert httpx.get(f"{base}/nope").status_code == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval must be > 0"),
        (["--max-step", "0"], "--max-step must be >= 1"),
        (["--rate-window", "two minutes"], "give a duration like 90s or 2m"),
        (["--stabilization-seconds", "60"], "at least the --rate-window"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_durations():
    assert [cli.seconds(d) for d in ("90s", "2m", "1h", "500ms", "2m30s")] == [
        90, 120, 3600, 0.5, None,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("auto", "parsed"),
    [
        ({"targetTokensPerSecond": 12.5, "maxReplicas": 4}, (12.5, 1, 4)),
        ({"targetTokensPerSecond": 40, "minReplicas": 0, "maxReplicas": 0}, (40, 0, 0)),
    ],
)
def test_autoscaling_fields_parse(auto, parsed):
    got = kube.autoscaled(model_deployment("m", 2, auto, canary="r3"), replicas=2)
    assert (got.target_tokens_per_second, got.min_replicas, got.max_replicas) == parsed
    assert got.canary == "r3"


@pytest.mark.parametrize(
    ("auto", "problem"),
    [
        ({"targetTokensPerSecond": True, "maxReplicas": 4}, "targetTokensPerSecond"),
        ({"targetTokensPerSecond": -1, "maxReplicas": 4}, "targetTokensPerSecond"),
        ({"targetTokensPerSecond": 50}, "spec.autoscaling.maxReplicas: Field required"),
        ("fast", "spec.autoscaling: Input should be"),
        ({"targetTokensPerSecond": 50, "minReplicas": 5, "maxReplicas": 2}, "must not exceed"),
    ],
)
def test_unusable_autoscaling_is_refused(auto, problem):
    with pytest.raises(kube.InvalidAutoscalingError, match=problem):
        kube.autoscaled(model_deployment("m", 2, auto), replicas=2)
