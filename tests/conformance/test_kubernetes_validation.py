"""Every manifest plnt renders for a workload cluster passes Kubernetes' own validation.

The manifests inside provider-kubernetes Objects, and the core objects composed directly, go
through tests/k8svalidate (strict decoding into k8s.io/api types, defaulting, and the API
server's create validation, k8s.io/kubernetes v1.37).
"""

from __future__ import annotations

import pathlib

import pytest

from plnt_host import render
from tests.conformance import crossplane_cli
from tests.k8svalidate import runner

REPO = crossplane_cli.REPO
SCENARIOS = render.scenario_folders(REPO / "examples")


def test_every_workload_kind_is_covered(k8svalidate: pathlib.Path) -> None:
    kinds = set()
    for folder in SCENARIOS:
        for node in render.render(render.load_scenario(folder), tree=True).tree():
            kinds |= {m["kind"] for m in crossplane_cli.embedded_manifests(node.composed)}
    assert {"Deployment", "Service", "ResourceClaimTemplate"} <= kinds


def with_owner_uid(obj: dict) -> dict:
    """A render has no API server to give the XR a uid; Crossplane's owner reference carries one."""
    refs = obj["metadata"].get("ownerReferences") or []
    fixed = [{**r, "uid": r.get("uid") or "00000000-0000-0000-0000-000000000001"} for r in refs]
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": fixed}}


@pytest.mark.parametrize("folder", SCENARIOS, ids=[str(s.relative_to(REPO)) for s in SCENARIOS])
def test_rendered_manifests_pass_kubernetes_validation(
    folder: pathlib.Path, k8svalidate: pathlib.Path
) -> None:
    manifests = []
    for node in render.render(render.load_scenario(folder), tree=True).tree():
        manifests += [with_owner_uid(m) for m in node.composed if runner.supported(m)]
        manifests += [
            m for m in crossplane_cli.embedded_manifests(node.composed) if runner.supported(m)
        ]
    verdicts = runner.validate(k8svalidate, manifests) if manifests else []
    failures = {f"{v.kind}/{v.name}": v.errors for v in verdicts if v.errors}
    assert failures == {}
