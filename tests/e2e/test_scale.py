"""Scenario 5: ModelDeployment's scale subresource on Crossplane v2.3, used by `kubectl scale`
and by `plnt reconcile --once` against the live control plane.

The reconciler reads token rates from a real Prometheus scraping a loopback exporter that serves
vLLM's counter at a known rate for the deployment's pods (tests/reconcile/engines.py): no engine
generates tokens here.
"""

from __future__ import annotations

import copy
import json
import subprocess

import yaml

from plnt_host import procs
from tests.e2e import fleet, live
from tests.e2e.stack import REPO
from tests.reconcile import engines as metrics_engines

NS = "scaling"
NAME = "qwen3-8b"
MD = ("modelplane.ai/v1alpha1", "ModelDeployment")


def _apply_deployment(plane) -> None:
    md = copy.deepcopy(
        yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    )
    md["metadata"] = {"name": NAME, "namespace": NS}
    md["spec"]["replicas"] = 1
    md["spec"]["autoscaling"] = {"targetTokensPerSecond": 100, "minReplicas": 1, "maxReplicas": 4}
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, md]
        ),
    )


def _writers_of_replicas(obj: dict) -> set[tuple[str, str]]:
    """(manager, subresource) of every managedFields entry that owns spec.replicas."""
    out = set()
    for entry in obj["metadata"].get("managedFields") or []:
        fields = json.dumps(entry.get("fieldsV1") or {})
        if '"f:replicas"' in fields:
            out.add((entry.get("manager", ""), entry.get("subresource", "")))
    return out


def test_xrd_declares_the_scale_subresource(plane) -> None:
    crd = plane.mgmt.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "modeldeployments.modelplane.ai"
    )
    scale = crd["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas.total",
    }


def test_kubectl_scale_and_the_reconciler_write_through_scale(plane, tmp_path) -> None:
    fleet.ensure(plane)
    _apply_deployment(plane)
    live.wait_object(
        plane.mgmt,
        *MD,
        NAME,
        NS,
        until=lambda o: ((o.get("status") or {}).get("replicas") or {}).get("total") == 1,
        what="one replica placed",
    )
    plane.kubectl("scale", "modeldeployment", NAME, "-n", NS, "--replicas=2")
    obj = live.wait_object(
        plane.mgmt,
        *MD,
        NAME,
        NS,
        until=lambda o: ((o.get("status") or {}).get("replicas") or {}).get("total") == 2,
        what="two replicas placed after kubectl scale",
    )
    assert ("kubectl", "scale") in _writers_of_replicas(obj), obj["metadata"]["managedFields"]
    scale = json.loads(
        plane.kubectl("get", "modeldeployment", NAME, "-n", NS, "--subresource=scale", "-o", "json")
    )
    assert (scale["kind"], scale["spec"]["replicas"], scale["status"]["replicas"]) == (
        "Scale",
        2,
        2,
    )

    # 2000 tokens/s against a target of 100 per replica: the reconciler wants 4 (its max). Far
    # above what 4 need, because a 30 s rate over series a minute old reads low (seen live:
    # 150 of 400 tokens/s, Prometheus extrapolating from the series' start).
    pods = [metrics_engines.Pod(f"{NAME}-{i}", NS, NAME, "vllm", 1000.0) for i in range(2)]
    exporter = metrics_engines.Exporter(pods)
    prometheus = metrics_engines.Prometheus(
        metrics_engines.prometheus_config(exporter), tmp_path / "prometheus"
    )
    try:
        prometheus.wait(
            lambda: len(prometheus.query('count_over_time(up{job="plnt-engines"}[1m]) >= 8')) == 2,
            60,
        )
        proc = subprocess.run(
            [
                str(procs.PLNT),
                "reconcile",
                "--once",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--prometheus-url",
                prometheus.url,
                "--rate-window",
                "30s",
                "--stabilization-seconds",
                "60",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        prometheus.close()
        exporter.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{NS}/{NAME}" in proc.stdout, proc.stdout
    obj = live.wait_object(
        plane.mgmt,
        *MD,
        NAME,
        NS,
        until=lambda o: o["spec"]["replicas"] == 4,
        what=f"the reconciler's scale-up (it printed: {proc.stdout.strip()[-400:]})",
    )
    writers = _writers_of_replicas(obj)
    assert any(sub == "scale" and manager != "kubectl" for manager, sub in writers), writers
    plane.kubectl("delete", "modeldeployment", NAME, "-n", NS, "--wait=false")
