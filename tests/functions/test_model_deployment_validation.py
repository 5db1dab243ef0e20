"""The ModelDeployment XRD as the API server sees it: structural schema and CEL cost budgets."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.k8svalidate import runner

XRD = pathlib.Path(__file__).resolve().parents[2] / "apis" / "modeldeployments" / "definition.yaml"


def as_crd(xrd: dict) -> dict:
    """The CustomResourceDefinition the XRD's own schema becomes (Crossplane's additions aside)."""
    spec = xrd["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": xrd["metadata"]["name"]},
        "spec": {
            "group": spec["group"],
            "names": {**spec["names"], "listKind": f"{spec['names']['kind']}List"},
            "scope": spec["scope"],
            "versions": [
                {
                    "name": v["name"],
                    "served": v["served"],
                    "storage": True,
                    "schema": v["schema"],
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": v.get("additionalPrinterColumns", []),
                }
                for v in spec["versions"]
            ],
        },
    }


@pytest.fixture(scope="module")
def k8svalidate(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return runner.build(tmp_path_factory.mktemp("k8svalidate"))


def test_xrd_schema_passes_the_api_servers_crd_validation(k8svalidate: pathlib.Path) -> None:
    (verdict,) = runner.validate(k8svalidate, [as_crd(yaml.safe_load(XRD.read_text()))])
    assert verdict.errors == []


def test_xrd_declares_what_kubectl_shows() -> None:
    xrd = yaml.safe_load(XRD.read_text())
    assert xrd["spec"]["names"]["shortNames"] == ["md"]
    assert xrd["spec"]["scope"] == "Namespaced"
    (version,) = xrd["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Replicas": ".spec.replicas",
        "Ready": ".status.replicas.ready",
        "Scheduled": ".status.conditions[?(@.type=='ReplicasScheduled')].reason",
    }
    replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
    assert (replicas["default"], replicas["minimum"], replicas["maximum"]) == (1, 0, 1000)


def _spec_schema(path: pathlib.Path) -> dict:
    (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def _without_descriptions(schema: object) -> object:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


def test_engines_match_the_model_replica_schema() -> None:
    """The pod template, worker and serving shapes are ModelReplica's: they must not drift."""
    ours = _spec_schema(XRD)
    theirs = _spec_schema(XRD.parents[1] / "modelreplicas" / "definition.yaml")
    member = ours["engines"]["items"]["properties"]["members"]["items"]["properties"]
    their_member = theirs["engines"]["items"]["properties"]["members"]["items"]["properties"]
    for field in ("template", "role", "worker"):
        assert _without_descriptions(member[field]) == _without_descriptions(their_member[field])
    for field in ("serving", "modelCacheRef"):
        assert _without_descriptions(ours[field]) == _without_descriptions(theirs[field])
    assert "nodeSelector" in member
    assert "nodePoolName" not in member
    assert "deviceRequests" not in member
