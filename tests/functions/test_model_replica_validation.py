"""Rendered ModelReplica and ModelCache manifests against the schemas the cluster enforces.

Deployments, Services, ConfigMaps, Namespaces, PVCs, Jobs, RBAC objects, ResourceClaimTemplates
and the pod templates inside LeaderWorkerSets go through Kubernetes' own strict decoding and
validation (tests/k8svalidate, k8s.io/kubernetes v1.37); LeaderWorkerSets, HTTPRoutes and
InferencePools through `crossplane beta validate` against third_party/crds. The XRDs' schemas go
through the API server's CRD validation, which compiles their CEL rules and bounds their cost.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from plnt_host import render
from tests.conformance import crossplane_cli
from tests.k8svalidate import runner

REPO = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = sorted(
    p.parent
    for pattern in ("model-replica-*/xr.yaml", "model-cache/xr.yaml")
    for p in (REPO / "examples").glob(pattern)
)
XRDS = sorted(REPO.glob("apis/*/definition.yaml"))
CRD_KINDS = {"LeaderWorkerSet", "HTTPRoute", "InferencePool"}


def rendered_manifests(folder: pathlib.Path) -> list[dict]:
    objs = render.render(render.load_scenario(folder)).composed
    return crossplane_cli.embedded_manifests(objs)


@pytest.mark.parametrize("folder", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_manifests_pass_kubernetes_validation(
    folder: pathlib.Path, k8svalidate: pathlib.Path
) -> None:
    manifests = [m for m in rendered_manifests(folder) if runner.supported(m)]
    assert manifests, "nothing to validate"
    verdicts = runner.validate(k8svalidate, manifests)
    assert sorted(v.kind for v in verdicts) == sorted(m["kind"] for m in manifests)
    failures = {f"{v.kind}/{v.name}": v.errors for v in verdicts if v.errors}
    assert failures == {}


@pytest.mark.parametrize("folder", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_crd_kinds_pass_their_crds(
    folder: pathlib.Path, crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    manifests = [m for m in rendered_manifests(folder) if m["kind"] in CRD_KINDS]
    if not manifests:  # model-cache composes none of them
        assert folder.name == "model-cache"
        return
    proc = crossplane_cli.validate(crank, crossplane_cli.third_party_crds(), manifests, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(manifests)} success cases" in proc.stdout
    assert "0 missing schemas" in proc.stdout


def test_pd_covers_pool_and_picker_and_leaves_the_shared_objects_out() -> None:
    kinds = sorted(m["kind"] for m in rendered_manifests(REPO / "examples" / "model-replica-pd"))
    assert kinds.count("Deployment") == 3  # two engines and the endpoint picker
    assert {"InferencePool", "HTTPRoute", "Service"} <= set(kinds)
    # the InferenceCluster composes these once per namespace
    assert not {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"} & set(kinds)


@pytest.mark.parametrize("xrd", XRDS, ids=[p.parent.name for p in XRDS])
def test_xrd_schema_passes_the_api_servers_crd_validation(
    xrd: pathlib.Path, k8svalidate: pathlib.Path
) -> None:
    (verdict,) = runner.validate(k8svalidate, [runner.as_crd(yaml.safe_load(xrd.read_text()))])
    assert verdict.errors == []


def test_the_validator_rejects_what_the_api_server_would(k8svalidate: pathlib.Path) -> None:
    manifests = rendered_manifests(REPO / "examples" / "model-replica-qwen3-8b")
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    deployment["spec"]["replicas"] = -1
    deployment["spec"]["template"]["spec"]["containers"][0]["bogus"] = True
    rct = next(m for m in manifests if m["kind"] == "ResourceClaimTemplate")
    rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Sometimes"
    verdicts = {v.kind: v.errors for v in runner.validate(k8svalidate, [deployment, rct])}
    assert any("bogus" in e for e in verdicts["Deployment"])
    verdicts = {v.kind: v.errors for v in runner.validate(k8svalidate, [rct])}
    assert any("allocationMode" in e for e in verdicts["ResourceClaimTemplate"])
    del deployment["spec"]["template"]["spec"]["containers"][0]["bogus"]
    (verdict,) = runner.validate(k8svalidate, [deployment])
    assert any("spec.replicas" in e for e in verdict.errors)
