"""`plnt reconcile --once` end to end: the real `plnt` entry point, a real Prometheus scraping
engine counters at known rates, and a real kube-apiserver, as the reconciler's ServiceAccount."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import time

import httpx
import pytest

from plnt_reconciler import kube
from tests.reconcile.apiserver import RECONCILER_TOKEN, free_port

PLNT = pathlib.Path(sys.executable).parent / "plnt"
MD = "/apis/modelplane.ai/v1alpha1/namespaces/{ns}/modeldeployments/{name}"


def md(ns: str, name: str, replicas: int, auto: dict | None) -> dict:
    spec: dict = {"replicas": replicas, "model": {"name": name}}
    if auto is not None:
        spec["autoscaling"] = auto
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"namespace": ns, "name": name},
        "spec": spec,
    }


def auto(target: int, low: int = 1, high: int = 8) -> dict:
    return {"targetTokensPerSecond": target, "minReplicas": low, "maxReplicas": high}


@pytest.fixture(scope="module")
def scenario(kube_apiserver, prometheus, tmp_path_factory):
    """team-a/llama (200 tok/s), team-b/qwen (90), team-a/mistral (60, canary running),
    team-c/frozen (no recent samples) and team-a/plain (no autoscaling)."""
    for ns in ("team-a", "team-b", "team-c"):
        kube_apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube_apiserver.create(md("team-a", "llama", 1, auto(60)))  # 200/60 -> 4
    kube_apiserver.create(md("team-b", "qwen", 5, auto(40)))  # 90/40 -> 3, but scale-down waits
    kube_apiserver.create(md("team-a", "mistral", 1, auto(25)))  # 60/25 -> 3, but a canary runs
    kube_apiserver.create(md("team-c", "frozen", 2, auto(10)))  # no rate in the 10 s window
    kube_apiserver.create(md("team-a", "plain", 2, None))
    status = kube_apiserver.admin.patch(
        MD.format(ns="team-a", name="mistral") + "/status",
        json={"status": {"revisions": {"stable": "r1", "canary": "r2"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert status.status_code == 200, status.text
    config = kube_apiserver.kubeconfig(
        tmp_path_factory.mktemp("cli") / "kubeconfig", RECONCILER_TOKEN
    )

    return [
        str(PLNT), "reconcile", f"--kubeconfig={config}", f"--prometheus-url={prometheus.url}",
        "--rate-window=10s", "--stale-after=60",
    ]  # fmt: skip


def once(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*argv, "--once"], capture_output=True, text=True, timeout=60, check=False
    )


def get(kube_apiserver, ns: str, name: str) -> dict:
    return kube_apiserver.admin.get(MD.format(ns=ns, name=name)).json()


def decision_of(obj: dict) -> dict:
    return json.loads(obj["metadata"]["annotations"][kube.ANNOTATION])


def events_for(kube_apiserver, ns: str, name: str) -> list[tuple[str, str]]:
    items = kube_apiserver.admin.get(f"/api/v1/namespaces/{ns}/events").json()["items"]
    return [(e["type"], e["reason"]) for e in items if e["involvedObject"]["name"] == name]


def test_once_scales_toward_the_target_and_records_why(kube_apiserver, scenario):
    first = once(scenario)
    assert first.returncode == 0, first.stderr
    lines = {line.split(":", 1)[0]: line for line in first.stdout.splitlines()}
    assert "team-a/llama: 1 -> 4 (ScaleUp)" in lines["team-a/llama"]
    assert "team-b/qwen: 5 -> 5 (ScaleDownStabilizing)" in lines["team-b/qwen"]
    assert "team-a/mistral: 1 -> 1 (CanaryInProgress)" in lines["team-a/mistral"]
    assert "team-c/frozen: 2 -> 2 (MetricsMissing)" in lines["team-c/frozen"]
    assert "skipped: no spec.autoscaling" in lines["team-a/plain"]

    llama = get(kube_apiserver, "team-a", "llama")
    assert llama["spec"]["replicas"] == 4
    recorded = decision_of(llama)
    assert (recorded["from"], recorded["to"], recorded["why"], recorded["target"]) == (
        1, 4, "ScaleUp", 60,
    )  # fmt: skip
    assert recorded["rate"] == pytest.approx(200, rel=0.05)
    assert events_for(kube_apiserver, "team-a", "llama") == [("Normal", "ScaleUp")]

    assert get(kube_apiserver, "team-b", "qwen")["spec"]["replicas"] == 5
    assert get(kube_apiserver, "team-a", "mistral")["spec"]["replicas"] == 1
    frozen = get(kube_apiserver, "team-c", "frozen")
    assert frozen["spec"]["replicas"] == 2
    assert decision_of(frozen)["why"] == "MetricsMissing"
    assert decision_of(frozen)["rate"] is None
    assert events_for(kube_apiserver, "team-c", "frozen") == [("Warning", "MetricsMissing")]
    plain = get(kube_apiserver, "team-a", "plain")
    assert kube.ANNOTATION not in (plain["metadata"].get("annotations") or {})
    assert events_for(kube_apiserver, "team-a", "plain") == []

    # A second pass (a restarted reconciler, no history) holds what the first one reached.
    second = once(scenario)
    assert second.returncode == 0, second.stderr
    assert "team-a/llama: 4 -> 4 (Steady)" in second.stdout
    assert get(kube_apiserver, "team-a", "llama")["spec"]["replicas"] == 4
    assert get(kube_apiserver, "team-b", "qwen")["spec"]["replicas"] == 5
    # frozen's decision did not change: no second Warning Event, no new annotation write
    assert events_for(kube_apiserver, "team-c", "frozen") == [("Warning", "MetricsMissing")]


def test_the_long_running_loop_serves_probes_and_stops_on_sigterm(kube_apiserver, scenario):
    scale = MD.format(ns="team-a", name="llama") + "/scale"
    reset = kube_apiserver.admin.patch(
        scale,
        json={"spec": {"replicas": 1}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert reset.status_code == 200, reset.text
    port = free_port()
    proc = subprocess.Popen(
        [*scenario, "--interval=1", f"--health-address=127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ready = scaled = False
        for _ in range(120):  # up to 30 s; usually the first pass
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                ready = False
            scaled = get(kube_apiserver, "team-a", "llama")["spec"]["replicas"] == 4
            if ready and scaled:
                break
            time.sleep(0.25)
        assert ready
        assert scaled
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert "team-a/llama: 1 -> 4 (ScaleUp)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--forget-lost-ledger", "lab-h100"],
        ["--bind-only", "--forget-lost-ledger", "lab-h100"],
        ["--bind", "--once", "--forget-lost-ledger", "lab-h100"],
    ],
)
def test_forgetting_a_lost_ledger_is_one_binder_pass_only(argv, capsys) -> None:
    from plnt_reconciler import cli

    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        "plnt reconcile: --forget-lost-ledger is one decision: give it with --bind-only --once\n"
    )
