"""The binder against a real kube-apiserver, as the reconciler's ServiceAccount with only
package/reconciler/rbac.yaml: ledgers created and compare-and-swapped, replicas annotated,
refusals in devices, over-commit reported when a pool shrinks, concurrent binders, the CLI."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import uuid

import pytest

from plnt import binding, capacity, fleet_view
from plnt.reconcile import binder, kube, ledger
from tests.reconcile.apiserver import RECONCILER_TOKEN, REPO

GV = "modelplane.ai/v1alpha1"


def crd(kind: str, plural: str, scope: str) -> dict:
    status = {"subresources": {"status": {}}} if kind == "InferenceQuota" else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.modelplane.ai"},
        "spec": {
            "group": "modelplane.ai",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    **status,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def fleet_crds(kube_apiserver):
    for kind, plural, scope in (
        ("InferenceCluster", "inferenceclusters", "Cluster"),
        ("InferenceClass", "inferenceclasses", "Cluster"),
        ("ModelReplica", "modelreplicas", "Namespaced"),
        ("InferenceQuota", "inferencequotas", "Cluster"),
    ):
        r = kube_apiserver.admin.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd(kind, plural, scope)
        )
        assert r.status_code in (201, 409), r.text
        kube_apiserver.wait_established(f"{plural}.modelplane.ai")
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "InferenceClass",
            "metadata": {"name": "h100-8x"},
            "spec": {"devices": [{"name": "gpu", "driver": "gpu.nvidia.com", "count": 8}]},
        }
    )


@pytest.fixture
def cluster_name(kube_apiserver, fleet_crds):
    """A fresh InferenceCluster with one pool `h` of one 8-GPU node."""
    name = f"c-{uuid.uuid4().hex[:8]}"
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "InferenceCluster",
            "metadata": {"name": name},
            "status": {"pools": [{"name": "h", "className": "h100-8x", "nodeCapacity": 1}]},
        }
    )
    return name


@pytest.fixture(scope="module")
def api(kube_apiserver, tmp_path_factory):
    path = tmp_path_factory.mktemp("kubeconfig") / "reconciler"
    client = kube.api_client(str(kube_apiserver.kubeconfig(path, RECONCILER_TOKEN)))
    yield client
    client.close()


def make_replica(kube_apiserver, cluster: str, gpus: int) -> str:
    """A proposed ModelReplica in its own namespace (as another team's would be)."""
    namespace = f"team-{uuid.uuid4().hex[:6]}"
    kube_apiserver.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    demand = {"h": (capacity.Pods(1, (("device:gpu", gpus),)),)}
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "ModelReplica",
            "metadata": {
                "name": "r-0",
                "namespace": namespace,
                "annotations": {binding.DEMAND: capacity.demand_json(demand)},
            },
            "spec": {
                "clusterName": cluster,
                "engines": [
                    {"name": "e", "members": [{"nodePoolName": "h", "deviceRequests": [{}]}]}
                ],
            },
        }
    )
    return namespace


def states(kube_apiserver, namespaces: list[str]) -> dict[str, binding.State]:
    out = {}
    for ns in namespaces:
        obj = kube_apiserver.admin.get(f"/apis/{GV}/namespaces/{ns}/modelreplicas/r-0").json()
        out[ns] = binding.state_of(obj)
    return out


def bound_gpus(found: dict[str, binding.State]) -> int:
    return sum(
        dict(p.demand)["device:gpu"] * p.count
        for s in found.values()
        if s.state == binding.BOUND
        for pods in s.demand.values()
        for p in pods
    )


def test_binds_what_fits_and_refuses_the_rest_loudly(kube_apiserver, api, cluster_name):
    teams = [make_replica(kube_apiserver, cluster_name, 3) for _ in range(3)]
    b = binder.Binder(api)
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    assert (outcome.bound, len(outcome.refused), outcome.error) == (2, 1, "")
    found = states(kube_apiserver, teams)
    # oldest first, then by namespace/name (creationTimestamp has one-second resolution)
    assert sorted(s.state for s in found.values()) == ["Bound", "Bound", "Refused"]
    (refused,) = [t for t, s in found.items() if s.state == binding.REFUSED_STATE]
    assert found[refused].message == (
        "pool h: not enough free gpu (need 3 on one node, 2 of 8 free in the pool)"
    )
    state, version = b.read_ledger(cluster_name)
    assert version
    assert sorted(state.entries) == sorted(f"{t}/r-0" for t in teams if t != refused)
    # a second pass writes nothing: the ledger keeps its version
    b.bind_once()
    assert b.read_ledger(cluster_name)[1] == version


def test_a_stale_ledger_write_is_refused(kube_apiserver, api, cluster_name):
    make_replica(kube_apiserver, cluster_name, 1)
    b = binder.Binder(api)
    b.bind_once()
    state, version = b.read_ledger(cluster_name)
    emptied = ledger.Ledger(cluster=cluster_name)
    assert b.write_ledger(emptied, version)  # against the version read: accepted
    assert not b.write_ledger(state, version)  # against that version again: 409, refused
    assert b.read_ledger(cluster_name)[0] == emptied
    assert not b.write_ledger(ledger.Ledger(cluster=cluster_name), None)  # exists already


def test_concurrent_binders_never_over_commit(kube_apiserver, api, cluster_name):
    teams = [make_replica(kube_apiserver, cluster_name, 3) for _ in range(6)]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            binder.Binder(api).bind_once()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    found = states(kube_apiserver, teams)
    assert bound_gpus(found) <= 8
    assert sum(s.state == binding.BOUND for s in found.values()) == 2
    state, _ = binder.Binder(api).read_ledger(cluster_name)
    assert len(state.entries) == 2


def test_a_shrunk_pool_is_reported_on_the_replicas_it_no_longer_holds(
    kube_apiserver, api, cluster_name
):
    path = f"/apis/{GV}/inferenceclusters/{cluster_name}"
    obj = kube_apiserver.admin.get(path).json()
    obj["status"]["pools"][0]["nodeCapacity"] = 2
    assert kube_apiserver.admin.put(path, json=obj).status_code == 200
    teams = [make_replica(kube_apiserver, cluster_name, 8) for _ in range(2)]
    b = binder.Binder(api)
    b.bind_once()
    assert bound_gpus(states(kube_apiserver, teams)) == 16
    obj = kube_apiserver.admin.get(path).json()
    obj["status"]["pools"][0]["nodeCapacity"] = 1
    assert kube_apiserver.admin.put(path, json=obj).status_code == 200
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    (over,) = outcome.over  # the one on the node that went (virtual node 1)
    found = states(kube_apiserver, teams)
    assert [s.over_committed for t, s in sorted(found.items()) if f"{t}/r-0" == over] == [
        "pool h: 1 of its 1 pods no longer fit (1 nodes of 8 gpu now)"
    ]
    assert sum(bool(s.over_committed) for s in found.values()) == 1


def test_cli_bind_only_once(kube_apiserver, cluster_name, tmp_path):
    make_replica(kube_apiserver, cluster_name, 1)
    config = kube_apiserver.kubeconfig(tmp_path / "kubeconfig", RECONCILER_TOKEN)
    proc = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "plnt"), "reconcile", "--bind-only", "--once",
         "--kubeconfig", str(config)],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"cluster {cluster_name}:"))
    assert line.startswith(f"cluster {cluster_name}: 1 bound, 0 refused, 0 over-committed")
    assert (
        json.loads(
            kube_apiserver.admin.get(
                f"/api/v1/namespaces/plnt-system/configmaps/{binder.ledger_name(cluster_name)}"
            ).json()["data"][ledger.DATA_KEY]
        )["cluster"]
        == cluster_name
    )


def test_an_annotation_never_lands_on_a_recreated_replica(kube_apiserver, api, cluster_name):
    team = make_replica(kube_apiserver, cluster_name, 1)
    path = f"/apis/{GV}/namespaces/{team}/modelreplicas/r-0"
    old_uid = kube_apiserver.admin.get(path).json()["metadata"]["uid"]
    assert kube_apiserver.admin.delete(path).status_code == 200
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "ModelReplica",
            "metadata": {"name": "r-0", "namespace": team},
            "spec": {"clusterName": cluster_name, "engines": []},
        }
    )
    binder.Binder(api).annotate(f"{team}/r-0", old_uid, {binding.BINDING: "stale"})
    annotations = kube_apiserver.admin.get(path).json()["metadata"].get("annotations") or {}
    assert binding.BINDING not in annotations


def _view(kube_apiserver) -> tuple[dict, dict[str, dict]]:
    """The fleet view's ConfigMaps as the API server holds them: the index, the parts by name."""
    base = "/api/v1/namespaces/plnt-system/configmaps"
    parts = kube_apiserver.admin.get(
        base, params={"labelSelector": f"{fleet_view.VIEW_LABEL}=true"}
    ).json()["items"]
    index = kube_apiserver.admin.get(f"{base}/{fleet_view.INDEX_NAME}").json()
    return index, {p["metadata"]["name"]: p for p in parts}


def _clusters(part: dict) -> set[str]:
    return fleet_view.cluster_names(part["binaryData"][fleet_view.DATA_KEY])


def test_the_fleet_view_holds_what_the_ledgers_commit(kube_apiserver, api, cluster_name):
    """After a pass, the view ConfigMaps hold every cluster at its ledger's sequence with the
    GPUs its entries take; a pass that changes nothing rewrites none of them; a cluster whose
    labels change moves to another part and the emptied part is deleted."""
    teams = [make_replica(kube_apiserver, cluster_name, 3) for _ in range(2)]
    b = binder.Binder(api)
    b.bind_once()
    assert all(s.state == binding.BOUND for s in states(kube_apiserver, teams).values())
    index, parts = _view(kube_apiserver)
    views, unreadable = fleet_view.read(parts.values())
    assert not unreadable
    clusters = kube_apiserver.admin.get(f"/apis/{GV}/inferenceclusters").json()["items"]
    assert set(views) == {c["metadata"]["name"] for c in clusters}
    assert fleet_view.fleet_size(index["data"]) == len(clusters)
    assert sorted(json.loads(index["data"][fleet_view.INDEX_KEY])["parts"]) == sorted(parts)
    state, _ = b.read_ledger(cluster_name)
    mine = views[cluster_name]
    assert mine.ledger == state.sequence == 1
    (node,) = mine.used["h"]
    assert (node.node, node.pods, dict(node.used).get("device:gpu")) == (0, 2, 6)
    for p in parts.values():
        assert p["metadata"]["labels"][fleet_view.VIEW_LABEL] == "true"
        assert len(p["binaryData"][fleet_view.DATA_KEY]) <= fleet_view.PAYLOAD_BYTES
        assert not p.get("data")

    versions = {n: p["metadata"]["resourceVersion"] for n, p in parts.items()}
    b.bind_once()
    index_again, parts_again = _view(kube_apiserver)
    assert {n: p["metadata"]["resourceVersion"] for n, p in parts_again.items()} == versions
    assert index_again["metadata"]["resourceVersion"] == index["metadata"]["resourceVersion"]

    before = next(n for n, p in parts.items() if cluster_name in _clusters(p))
    r = kube_apiserver.admin.patch(
        f"/apis/{GV}/inferenceclusters/{cluster_name}",
        json={"metadata": {"labels": {"example.com/moved": cluster_name}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    b.bind_once()
    _, moved = _view(kube_apiserver)
    (after,) = [n for n, p in moved.items() if cluster_name in _clusters(p)]
    assert after != before
    assert moved[after]["metadata"]["labels"]["example.com/moved"] == cluster_name
    held = _clusters(parts[before])
    assert (before in moved) == (held != {cluster_name})  # an emptied part is deleted
    views, _ = fleet_view.read(moved.values())
    assert views[cluster_name].used["h"] == mine.used["h"]


# --- tenancy (issue 25): fences and quotas, as the binder's ServiceAccount -------------------


def tenant_replica(kube_apiserver, cluster: str, gpus: int, labels: dict[str, str]) -> str:
    """A proposal in a fresh namespace with `labels`, asking `gpus` GPUs of gpu.nvidia.com."""
    namespace = f"tenant-{uuid.uuid4().hex[:6]}"
    kube_apiserver.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    )
    demand = {"h": (capacity.Pods(1, (("device:gpu", gpus),)),)}
    request = {"name": "gpu", "count": gpus, "deviceClassName": "gpu.nvidia.com"}
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "ModelReplica",
            "metadata": {
                "name": "r-0",
                "namespace": namespace,
                "annotations": {binding.DEMAND: capacity.demand_json(demand)},
            },
            "spec": {
                "clusterName": cluster,
                "engines": [
                    {"name": "e", "members": [{"nodePoolName": "h", "deviceRequests": [request]}]}
                ],
            },
        }
    )
    return namespace


def test_a_fence_keeps_other_namespaces_off_its_cluster(kube_apiserver, api, cluster_name):
    tag = uuid.uuid4().hex[:6]
    r = kube_apiserver.admin.patch(
        f"/apis/{GV}/inferenceclusters/{cluster_name}",
        json={"spec": {"namespaceSelector": {"matchLabels": {"fence": tag}}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    inside = tenant_replica(kube_apiserver, cluster_name, 1, {"fence": tag})
    outside = tenant_replica(kube_apiserver, cluster_name, 1, {})
    (outcome,) = [o for o in binder.Binder(api).bind_once() if o.cluster == cluster_name]
    assert outcome.refused == {
        f"{outside}/r-0": f"cluster {cluster_name} does not admit namespace {outside}"
    }
    found = states(kube_apiserver, [inside, outside])
    assert (found[inside].state, found[outside].state) == (binding.BOUND, binding.REFUSED_STATE)


def test_a_quota_caps_the_namespaces_it_covers_and_shows_its_use(kube_apiserver, api, cluster_name):
    group = uuid.uuid4().hex[:6]
    quota = f"q-{group}"
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "InferenceQuota",
            "metadata": {"name": quota},
            "spec": {
                "namespaceSelector": {"matchLabels": {"quota-group": group}},
                "hard": {"devices": {"gpu.nvidia.com": 4}},
            },
        }
    )
    teams = [tenant_replica(kube_apiserver, cluster_name, 3, {"quota-group": group})
             for _ in range(2)]  # fmt: skip
    b = binder.Binder(api)
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    found = states(kube_apiserver, teams)
    assert sorted(s.state for s in found.values()) == [binding.BOUND, binding.REFUSED_STATE]
    (refused,) = [t for t, s in found.items() if s.state == binding.REFUSED_STATE]
    assert found[refused].message == (
        f"namespaces {', '.join(sorted(teams))} hold 3 of 4 gpu.nvidia.com (InferenceQuota {quota})"
    )
    held, version = b.read_quota_ledger(quota)
    assert version and sorted(held.namespaces) == sorted(teams)
    assert list(held.entries) == [f"{t}/r-0" for t in teams if t != refused]
    status = kube_apiserver.admin.get(f"/apis/{GV}/inferencequotas/{quota}").json()["status"]
    assert status == {
        "used": {"devices": {"gpu.nvidia.com": 3}},
        "namespaces": sorted(teams),
        "replicas": 1,
    }
    # the room was capacity's too: the pool had 8 GPUs, so only the quota refused
    assert outcome.refused == {f"{refused}/r-0": found[refused].message}
