"""The ModelDeployment XRD as kubectl shows it (the API server's CRD validation of every XRD
is in test_model_replica_validation.py)."""

from __future__ import annotations

import pathlib

import yaml

XRD = pathlib.Path(__file__).resolve().parents[2] / "apis" / "modeldeployments" / "definition.yaml"


def test_xrd_declares_what_kubectl_shows() -> None:
    xrd = yaml.safe_load(XRD.read_text())
    assert xrd["spec"]["names"]["shortNames"] == ["md"]
    assert xrd["spec"]["scope"] == "Namespaced"
    (version,) = xrd["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "REPLICAS": ".spec.replicas",
        "REPLICAS-READY": ".status.replicas.ready",
        "SCHEDULED": ".status.conditions[?(@.type=='ReplicasScheduled')].reason",
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
