"""Admission and `kubectl get` of plnt's kinds on a real kube-apiserver (tests/reconcile).

Crossplane turns each XRD into a CRD: the XRD's schema as is, plus Crossplane's printer columns
and the ``composite`` category (``ForCompositeResource`` / ``CompositeResourcePrinterColumns`` in
crossplane/crossplane ``internal/xcrd``, v2.2.1 and v2.3.0). No Crossplane runs here, so the
test installs that CRD itself (its schema is the XRD's, byte for byte) and lets the API server
judge: the CoreWeaveCluster pool list keyed by name with its instanceType transition rule
(seed 004), and the server-side table kubectl prints for every kind, found by category ``plnt``.
"""

from __future__ import annotations

import copy
import pathlib
import time
from collections.abc import Iterator

import pytest
import yaml

from plnt_host import render
from tests.k8svalidate import runner
from tests.reconcile import apiserver

REPO = pathlib.Path(__file__).resolve().parents[2]
XRDS = sorted(REPO.glob("apis/*/definition.yaml"))
CROSSPLANE_COLUMNS = [
    {
        "name": "SYNCED",
        "type": "string",
        "jsonPath": ".status.conditions[?(@.type=='Synced')].status",
    },
    {
        "name": "READY",
        "type": "string",
        "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
    },
    {"name": "COMPOSITION", "type": "string", "jsonPath": ".spec.crossplane.compositionRef.name"},
    {
        "name": "COMPOSITIONREVISION",
        "type": "string",
        "jsonPath": ".spec.crossplane.compositionRevisionRef.name",
        "priority": 1,
    },
    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
SEED_CLUSTER = REPO / "examples" / "coreweave-cluster" / "xr.yaml"


def crossplane_crd(xrd: dict) -> dict:
    """The CRD Crossplane generates from ``xrd``, as far as admission and printing go."""
    crd = runner.as_crd(xrd)
    names = crd["spec"]["names"]
    names["categories"] = [*names.get("categories", []), "composite"]
    for version in crd["spec"]["versions"]:
        version["additionalPrinterColumns"] = [
            *version["additionalPrinterColumns"],
            *copy.deepcopy(CROSSPLANE_COLUMNS),
        ]
    return crd


def _version(xrd: dict) -> str:
    return next(v["name"] for v in xrd["spec"]["versions"] if v.get("served", True))


def _path(xrd: dict, namespace: str | None) -> str:
    spec = xrd["spec"]
    base = f"/apis/{spec['group']}/{_version(xrd)}"
    if spec["scope"] == "Namespaced":
        return f"{base}/namespaces/{namespace}/{spec['names']['plural']}"
    return f"{base}/{spec['names']['plural']}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apiserver.APIServer]:
    srv = apiserver.APIServer(tmp_path_factory.mktemp("apiserver"), reconciler_fixtures=False)
    try:
        xrds = [yaml.safe_load(p.read_text()) for p in XRDS]
        for xrd in xrds:
            r = srv.admin.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crossplane_crd(xrd)
            )
            assert r.status_code == 201, r.text
        deadline = time.monotonic() + 60
        for xrd in xrds:
            group_version = f"/apis/{xrd['spec']['group']}/{_version(xrd)}"
            plural = xrd["spec"]["names"]["plural"]
            while not _served(srv, group_version, plural):
                assert time.monotonic() < deadline, f"{plural} never served"
                time.sleep(0.25)
        yield srv
    finally:
        srv.close()


def _served(server: apiserver.APIServer, group_version: str, plural: str) -> bool:
    r = server.admin.get(group_version)  # 404 until discovery knows the new group
    return r.status_code == 200 and any(res["name"] == plural for res in r.json()["resources"])


def _table(server: apiserver.APIServer, path: str, seconds: float = 30) -> dict:
    """The list at ``path`` as kubectl asks for it. A CRD that discovery already serves can
    still answer a Status for a moment on a loaded machine while its table converter is set
    up, so a Status is asked again until the deadline and returned as it is after that."""
    deadline = time.monotonic() + seconds
    while True:
        table = server.admin.get(path, headers={"Accept": TABLE}).json()
        if table.get("kind") == "Table" or time.monotonic() > deadline:
            return table
        time.sleep(0.25)


def _namespace(server: apiserver.APIServer, name: str) -> None:
    r = server.admin.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code in (201, 409), r.text


XRD_OF = {yaml.safe_load(p.read_text())["spec"]["names"]["kind"]: p for p in XRDS}
GROUPS = {yaml.safe_load(p.read_text())["spec"]["group"] for p in XRDS}


def _xrd(kind: str) -> dict:
    return yaml.safe_load(XRD_OF[kind].read_text())


# --- CoreWeaveCluster: a pool's instanceType cannot change (seed 004) ----------------------


@pytest.fixture
def seed_cluster(server: apiserver.APIServer) -> Iterator[tuple[str, dict]]:
    xr = render.load_yaml_docs(SEED_CLUSTER)[0]
    _namespace(server, xr["metadata"]["namespace"])
    path = _path(_xrd("CoreWeaveCluster"), xr["metadata"]["namespace"])
    r = server.admin.post(path, json=xr)
    assert r.status_code == 201, r.text
    yield f"{path}/{xr['metadata']['name']}", r.json()
    server.admin.delete(f"{path}/{xr['metadata']['name']}")


def _patch_pools(server: apiserver.APIServer, path: str, pools: list[dict]):
    return server.admin.patch(path, json={"spec": {"nodePools": pools}}, headers=MERGE_PATCH)


def test_instance_type_change_is_refused_with_the_seeds_advice(
    server: apiserver.APIServer, seed_cluster: tuple[str, dict]
) -> None:
    path, created = seed_cluster
    pools = copy.deepcopy(created["spec"]["nodePools"])
    assert [p["name"] for p in pools] == ["gpu-rtxp6000"]
    pools[0]["instanceType"] = "b200-8x"
    r = _patch_pools(server, path, pools)
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid"
    (cause,) = status["details"]["causes"]
    assert cause["field"] == "spec.nodePools[0].instanceType"
    assert "instanceType of an existing node pool cannot change" in cause["message"]
    assert "add a pool with the new instance type under a new name" in cause["message"]
    # nothing changed on the server
    assert server.admin.get(path).json()["spec"]["nodePools"][0]["instanceType"] == "rtxp6000-8x"


def test_a_new_pool_under_a_new_name_and_size_changes_are_admitted(
    server: apiserver.APIServer, seed_cluster: tuple[str, dict]
) -> None:
    path, created = seed_cluster
    old = copy.deepcopy(created["spec"]["nodePools"][0])
    new = {**old, "name": "gpu-b200", "instanceType": "b200-8x"}
    r = _patch_pools(server, path, [{**old, "nodeCount": 2}, new])
    assert r.status_code == 200, r.text
    assert [
        (p["name"], p["instanceType"], p["nodeCount"]) for p in r.json()["spec"]["nodePools"]
    ] == [
        ("gpu-rtxp6000", "rtxp6000-8x", 2),
        ("gpu-b200", "b200-8x", 1),
    ]
    # the old pool can go once its workloads have moved
    r = _patch_pools(server, path, [new])
    assert r.status_code == 200, r.text
    assert [p["name"] for p in r.json()["spec"]["nodePools"]] == ["gpu-b200"]


def test_reusing_a_removed_pools_name_starts_a_new_pool(
    server: apiserver.APIServer, seed_cluster: tuple[str, dict]
) -> None:
    """Transition rules compare an item with the old item of the same key only: a name that is
    gone from the list is free again (CKS creates a new NodePool once the old one is deleted)."""
    path, created = seed_cluster
    old = copy.deepcopy(created["spec"]["nodePools"][0])
    assert _patch_pools(server, path, [{**old, "name": "gpu-b200"}]).status_code == 200
    r = _patch_pools(server, path, [{**old, "instanceType": "b200-8x"}])
    assert r.status_code == 200, r.text


def test_two_pools_of_one_name_are_refused(
    server: apiserver.APIServer, seed_cluster: tuple[str, dict]
) -> None:
    path, created = seed_cluster
    pool = created["spec"]["nodePools"][0]
    r = _patch_pools(server, path, [pool, {**pool, "instanceType": "b200-8x"}])
    assert r.status_code == 422, r.text
    assert any(c["reason"] == "FieldValueDuplicate" for c in r.json()["details"]["causes"])


# --- kubectl get plnt, and the columns it prints ---------------------------------------------


def _example(kind: str) -> dict:
    """The first object of ``kind`` in examples/ (an XR, or one a render reads)."""
    for path in sorted(REPO.glob("examples/**/*.yaml")):
        for doc in render.load_yaml_docs(path):
            if doc.get("kind") == kind and doc.get("apiVersion", "").split("/")[0] in GROUPS:
                return doc
    raise AssertionError(f"no example of kind {kind}")


def test_kubectl_get_plnt_lists_every_kind_with_each_column_once(
    server: apiserver.APIServer,
) -> None:
    # `kubectl get plnt` expands the category from discovery, then lists each resource
    in_category = set()
    for kind in XRD_OF:
        xrd = _xrd(kind)
        discovery = server.admin.get(f"/apis/{xrd['spec']['group']}/{_version(xrd)}").json()
        for res in discovery["resources"]:
            if "plnt" in (res.get("categories") or []):
                in_category.add(res["kind"])
    assert in_category == set(XRD_OF)

    for kind in sorted(XRD_OF):
        xrd = _xrd(kind)
        xr = _example(kind)
        namespace = xr["metadata"].get("namespace", "default")
        if xrd["spec"]["scope"] == "Namespaced":
            _namespace(server, namespace)
        xr = {k: v for k, v in xr.items() if k != "status"}
        xr["metadata"] = {
            k: xr["metadata"][k] for k in ("name", "namespace") if k in xr["metadata"]
        }
        r = server.admin.post(_path(xrd, namespace), json=xr)
        assert r.status_code in (201, 409), f"{kind}: {r.text}"
        table = _table(server, _path(xrd, namespace))
        assert table["kind"] == "Table", f"{kind}: {table}"
        assert table["rows"], f"{kind}: nothing listed"
        shown = [c["name"].upper() for c in table["columnDefinitions"]]  # as kubectl prints
        assert sorted({n for n in shown if shown.count(n) > 1}) == [], f"{kind}: {shown}"
        assert shown.count("READY") == 1
