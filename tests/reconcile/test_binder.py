"""The binder against a real kube-apiserver, as the reconciler's ServiceAccount with only
package/install/reconciler-rbac.yaml: ledgers created and compare-and-swapped, replicas annotated,
refusals in devices, over-commit reported when a pool shrinks, concurrent binders, the CLI."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import uuid

import pytest

from plnt import capacity, cluster_health, workload_cluster
from plnt.capacity import binding, commit, fleet_view, ledger, quotas
from plnt_reconciler import binder, kube
from tests.reconcile.apiserver import RECONCILER_TOKEN, REPO
from tests.support import spec_asking

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
        ("ModelCache", "modelcaches", "Namespaced"),
        ("InferenceQuota", "inferencequotas", "Cluster"),
    ):
        r = kube_apiserver.admin.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd(kind, plural, scope)
        )
        assert r.status_code in (201, 409), r.text
        kube_apiserver.wait_established(f"{plural}.modelplane.ai")
    # Other modules reuse this fixture against the same session's API server: the class may
    # already be there, exactly as this creates it.
    klass = {
        "apiVersion": GV,
        "kind": "InferenceClass",
        "metadata": {"name": "h100-8x"},
        "spec": {
            "devices": [
                {
                    "name": "gpu",
                    "driver": "gpu.nvidia.com",
                    "count": 8,
                    "deviceClassName": "gpu.nvidia.com",
                }
            ]
        },
    }
    r = kube_apiserver.admin.post(kube_apiserver.path_for(klass), json=klass)
    assert r.status_code in (201, 409), r.text


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
            "spec": spec_asking(cluster, demand),
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
    held = b.read_ledger(cluster_name)
    assert held.published and held.record and held.state is not None
    assert sorted(held.state.entries) == sorted(f"{t}/r-0" for t in teams if t != refused)
    # a second pass writes nothing: both copies keep their versions
    b.bind_once()
    again = b.read_ledger(cluster_name)
    assert (again.published, again.record) == (held.published, held.record)


def test_a_stale_ledger_write_is_refused(kube_apiserver, api, cluster_name):
    make_replica(kube_apiserver, cluster_name, 1)
    b = binder.Binder(api)
    b.bind_once()
    held = b.read_ledger(cluster_name)
    assert held.state is not None
    emptied = ledger.Ledger(cluster=cluster_name, sequence=held.state.sequence + 1)
    kind = binder.CLUSTER_LEDGERS
    assert b.write_ledger(kind, cluster_name, held, emptied, True)  # at the versions read: accepted
    assert not b.write_ledger(kind, cluster_name, held, held.state, True)  # at them again: 409
    assert b.read_ledger(cluster_name).state == emptied
    new = commit.Held(ledger.Ledger(cluster=cluster_name), None, None)
    assert not b.write_ledger(kind, cluster_name, new, emptied, True)  # exists already


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
    state = binder.Binder(api).read_ledger(cluster_name).state
    assert state is not None and len(state.entries) == 2


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
            ).json()["data"][ledger.LEDGER_DATA_KEY]
        )["cluster"]
        == cluster_name
    )


def test_a_binder_that_died_between_its_ledger_and_its_annotations_finishes_them(
    kube_apiserver, api, cluster_name, tmp_path
):
    """The test-only crash hook exits right after the ledger write; the next binder annotates
    what was committed, without committing it again."""
    team = make_replica(kube_apiserver, cluster_name, 1)
    config = kube_apiserver.kubeconfig(tmp_path / "kubeconfig", RECONCILER_TOKEN)
    proc = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "plnt"), "reconcile", "--bind-only", "--once",
         "--kubeconfig", str(config)],
        env={**os.environ, binder.CRASH_AFTER_LEDGER_WRITE: "1"},
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == binder.CRASH_EXIT_CODE, proc.stderr
    assert f"before annotating {team}/r-0" in proc.stderr
    b = binder.Binder(api)
    held = b.read_ledger(cluster_name)
    assert held.state is not None and list(held.state.entries) == [f"{team}/r-0"]
    assert states(kube_apiserver, [team])[team].state != binding.BOUND  # not annotated yet
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    assert (outcome.bound, outcome.refused, outcome.error) == (1, {}, "")
    assert states(kube_apiserver, [team])[team].state == binding.BOUND
    again = b.read_ledger(cluster_name)  # finished, not committed a second time
    assert (again.published, again.record, again.state) == (held.published, held.record,
                                                            held.state)  # fmt: skip


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
    state = b.read_ledger(cluster_name).state
    assert state is not None
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


# --- tenancy: fences and quotas, ----------- as the binder's ServiceAccount -------------------


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


def tenant_namespaces(kube_apiserver, cluster: str) -> str | None:
    obj = kube_apiserver.admin.get(f"/apis/{GV}/inferenceclusters/{cluster}").json()
    return (obj["metadata"].get("annotations") or {}).get(workload_cluster.TENANT_NAMESPACES)


def test_the_namespaces_a_cluster_prepares_are_those_its_fence_admits(
    kube_apiserver, api, cluster_name
):
    tag = uuid.uuid4().hex[:6]
    r = kube_apiserver.admin.patch(
        f"/apis/{GV}/inferenceclusters/{cluster_name}",
        json={"spec": {"namespaceSelector": {"matchLabels": {"fence": tag}}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    b = binder.Binder(api)
    b.bind_once()
    assert tenant_namespaces(kube_apiserver, cluster_name) is None  # nothing to say yet
    inside = sorted(tenant_replica(kube_apiserver, cluster_name, 1, {"fence": tag}) for _ in "ab")
    tenant_replica(kube_apiserver, cluster_name, 1, {})  # fenced out: never prepared
    b.bind_once()
    assert tenant_namespaces(kube_apiserver, cluster_name) == ",".join(inside)
    r = kube_apiserver.admin.delete(f"/apis/{GV}/namespaces/{inside[0]}/modelreplicas/r-0")
    assert r.status_code == 200, r.text
    b.bind_once()
    assert tenant_namespaces(kube_apiserver, cluster_name) == inside[1]


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
    read = b.read_quota_ledger(quota)
    held, version = read.state, read.published
    assert held is not None and version and sorted(held.namespaces) == sorted(teams)
    assert list(held.entries) == [f"{t}/r-0" for t in teams if t != refused]
    status = kube_apiserver.admin.get(f"/apis/{GV}/inferencequotas/{quota}").json()["status"]
    assert status == {
        "used": {"devices": {"gpu.nvidia.com": 3}},
        "namespaces": sorted(teams),
        "replicas": 1,
    }
    # the room was capacity's too: the pool had 8 GPUs, so only the quota refused
    assert outcome.refused == {f"{refused}/r-0": found[refused].message}


def test_a_quota_caps_cache_storage_oldest_first(kube_apiserver, api, cluster_name):
    """As the binder's ServiceAccount (package/install/binder-tenancy.yaml lets it list caches):
    two 30Gi ModelCaches under a 50Gi cap; the older is reserved, and the status says so."""
    group = uuid.uuid4().hex[:6]
    quota = f"q-{group}"
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "InferenceQuota",
            "metadata": {"name": quota},
            "spec": {
                "namespaceSelector": {"matchLabels": {"quota-group": group}},
                "hard": {"devices": {"gpu.nvidia.com": 4}, "cacheStorage": "50Gi"},
            },
        }
    )
    namespace = f"caches-{group}"
    kube_apiserver.create(
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": namespace, "labels": {"quota-group": group}}}
    )  # fmt: skip
    for name in ("older", "newer"):
        kube_apiserver.admin.post(
            f"/apis/{GV}/namespaces/{namespace}/modelcaches",
            json={"apiVersion": GV, "kind": "ModelCache",
                  "metadata": {"name": name, "namespace": namespace},
                  "spec": {"clusterName": cluster_name, "size": "30Gi",
                           "source": {"uri": "hf://Qwen/Qwen3-8B"}}},
        ).raise_for_status()  # fmt: skip
        time.sleep(1.1)  # creationTimestamp has a resolution of one second
    b = binder.Binder(api)
    b.bind_once()
    held = b.read_quota_ledger(quota).state
    assert held is not None
    assert list(held.entries) == [quotas.cache_key(namespace, "older")]
    assert held.hard[quotas.CACHE_STORAGE] == 50 * 1024**3
    status = kube_apiserver.admin.get(f"/apis/{GV}/inferencequotas/{quota}").json()["status"]
    assert status == {
        "used": {"devices": {"gpu.nvidia.com": 0}, "cacheStorage": 30 * 1024**3},
        "namespaces": [namespace],
        "replicas": 0,
        "caches": 1,
    }


# --- a damaged or lost ledger (docs/reconciler.md) ---------------------------------------------

CONFIGMAPS = "/api/v1/namespaces/plnt-system/configmaps"


def _configmap(kube_apiserver, name: str) -> dict | None:
    r = kube_apiserver.admin.get(f"{CONFIGMAPS}/{name}")
    return r.json() if r.status_code == 200 else None


def _put_ledger_text(
    kube_apiserver, name: str, text: str, key: str = ledger.LEDGER_DATA_KEY
) -> None:
    cm = _configmap(kube_apiserver, name)
    assert cm is not None and key in cm["data"]
    cm["data"][key] = text
    r = kube_apiserver.admin.put(f"{CONFIGMAPS}/{name}", json=cm)
    assert r.status_code == 200, r.text


def _events(kube_apiserver, name: str) -> list[tuple[str, str, str]]:
    items = kube_apiserver.admin.get(
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": f"involvedObject.name={name}"},
    ).json()["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items]


def _cluster_view(kube_apiserver, cluster: str) -> fleet_view.ClusterView:
    _, parts = _view(kube_apiserver)
    views, unreadable = fleet_view.read(parts.values())
    assert not unreadable
    return views[cluster]


def _outcome(b: binder.Binder, cluster: str) -> binder.ClusterOutcome:
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster]
    return outcome


def _ahead(text: str) -> str:
    body = json.loads(text)
    body["sequence"] += 1
    return json.dumps(body)


def _nudge(kube_apiserver, namespace: str) -> str | None:
    obj = kube_apiserver.admin.get(f"/apis/{GV}/namespaces/{namespace}/modelreplicas/r-0").json()
    return (obj["metadata"].get("annotations") or {}).get(cluster_health.REPLICA_NUDGE)


@pytest.mark.parametrize(
    ("damage", "reason", "fault"),
    [
        (lambda t: t[: len(t) // 2], "LedgerCorrupt", "is not JSON ("),
        (
            lambda t: '{"cluster": 5}',
            "LedgerMalformed",
            "is not a ledger: cluster: Input should be a valid string",
        ),
        (_ahead, "LedgerDiverged", "is at sequence 2, ahead of the binder's record"),
    ],
    ids=["bad JSON", "wrong shape", "wrong sequence"],
)
def test_an_unreadable_ledger_closes_its_cluster_until_it_is_repaired(
    kube_apiserver, api, cluster_name, damage, reason, fault
):
    """Nothing binds on the cluster while its published ledger does not read: the proposal is
    refused naming the ConfigMap, the bound replica keeps its binding, the InferenceCluster gets
    a Warning Event, the fleet view offers nothing and says why. Deleting the damaged copy (the
    documented repair) rebuilds it from the binder's record and binding resumes."""
    serving = make_replica(kube_apiserver, cluster_name, 3)
    b = binder.Binder(api)
    assert _outcome(b, cluster_name).bound == 1
    record = _configmap(kube_apiserver, binder.record_name(cluster_name))
    assert record is not None
    published = binder.ledger_name(cluster_name)
    good = _configmap(kube_apiserver, published)["data"][ledger.LEDGER_DATA_KEY]
    _put_ledger_text(kube_apiserver, published, damage(good))
    waiting = make_replica(kube_apiserver, cluster_name, 3)

    outcome = _outcome(b, cluster_name)
    assert outcome.closed is not None and outcome.closed.reason == reason
    where = f"plnt-system/{published}"
    assert outcome.closed.message.startswith(f"ConfigMap {where} {fault}"), outcome.closed.message
    assert outcome.closed.message.endswith(
        "nothing binds until it is repaired (docs/reconciler.md)"
    )
    found = states(kube_apiserver, [serving, waiting])
    assert found[serving].state == binding.BOUND  # its binding stands: never un-bound by damage
    assert found[waiting].state == binding.REFUSED_STATE
    assert found[waiting].message == f"cluster {cluster_name}: {outcome.closed.message}"
    (warning,) = [e for e in _events(kube_apiserver, cluster_name) if e[0] == "Warning"]
    assert warning == ("Warning", reason, outcome.closed.message)
    view = _cluster_view(kube_apiserver, cluster_name)
    assert (view.cluster.closed, dict(view.used)) == (outcome.closed.message, {})
    assert view.ledger == outcome.closed.sequence == (2 if reason == "LedgerDiverged" else 1)
    after = _configmap(kube_apiserver, binder.record_name(cluster_name))
    assert after["metadata"]["resourceVersion"] == record["metadata"]["resourceVersion"]
    # the serving replica is nudged, so it says at once that its binding cannot be verified
    assert _nudge(kube_apiserver, serving) == cluster_health.nudge(None, ledger_closed=True)
    b.bind_once()  # a second pass says nothing new
    assert len(_events(kube_apiserver, cluster_name)) == 1

    assert kube_apiserver.admin.delete(f"{CONFIGMAPS}/{published}").status_code == 200
    outcome = _outcome(b, cluster_name)
    assert (outcome.closed, outcome.bound) == (None, 2)
    assert _nudge(kube_apiserver, serving) == cluster_health.nudge(None)
    assert outcome.rebuilt == f"{where} from plnt-system/{binder.record_name(cluster_name)}"
    assert {e[1] for e in _events(kube_apiserver, cluster_name)} == {
        reason,
        "LedgerRepaired",
        "LedgerRebuilt",
    }
    found = states(kube_apiserver, [serving, waiting])
    assert {s.state for s in found.values()} == {binding.BOUND}
    held = b.read_ledger(cluster_name)
    assert held.state is not None and not held.publish and held.state.sequence == 2
    assert sorted(held.state.entries) == sorted(f"{t}/r-0" for t in (serving, waiting))
    assert not _cluster_view(kube_apiserver, cluster_name).cluster.closed


@pytest.mark.parametrize("lost", ["published", "record"])
def test_a_deleted_copy_is_rebuilt_from_the_other_in_one_pass(
    kube_apiserver, api, cluster_name, lost
):
    team = make_replica(kube_apiserver, cluster_name, 2)
    b = binder.Binder(api)
    b.bind_once()
    before = b.read_ledger(cluster_name).state
    name = (
        binder.ledger_name(cluster_name)
        if lost == "published"
        else binder.record_name(cluster_name)
    )
    assert kube_apiserver.admin.delete(f"{CONFIGMAPS}/{name}").status_code == 200
    outcome = _outcome(b, cluster_name)
    assert (outcome.closed, outcome.bound, outcome.error) == (None, 1, "")
    assert outcome.rebuilt.startswith(f"plnt-system/{name} from ")
    held = b.read_ledger(cluster_name)
    assert (held.state, held.publish, held.write_record) == (before, False, False)
    rebuilt = json.loads(_configmap(kube_apiserver, name)["data"][ledger.LEDGER_DATA_KEY])
    assert f"{team}/r-0" in rebuilt["entries"]
    assert states(kube_apiserver, [team])[team].state == binding.BOUND


def test_both_copies_gone_close_the_cluster_until_one_is_restored(
    kube_apiserver, api, cluster_name
):
    """After a commit the fleet view counts the ledger's sequence, so two missing copies read as
    a lost ledger, not a new one: nothing binds and no proposal is refused (the lost ledger may
    hold it) until the operator restores one copy from a backup."""
    serving = make_replica(kube_apiserver, cluster_name, 3)
    b = binder.Binder(api)
    b.bind_once()
    backup = _configmap(kube_apiserver, binder.ledger_name(cluster_name))
    for name in (binder.ledger_name(cluster_name), binder.record_name(cluster_name)):
        assert kube_apiserver.admin.delete(f"{CONFIGMAPS}/{name}").status_code == 200
    waiting = make_replica(kube_apiserver, cluster_name, 3)
    outcome = _outcome(b, cluster_name)
    assert outcome.closed is not None and outcome.closed.reason == "LedgerLost"
    assert outcome.closed.message.startswith(
        f"ConfigMaps plnt-system/{binder.ledger_name(cluster_name)} and "
        f"plnt-system/{binder.record_name(cluster_name)} are both gone, after the binder "
        "committed sequence 1: restore either from a backup"
    )
    found = states(kube_apiserver, [serving, waiting])
    assert (found[serving].state, found[waiting].state) == (binding.BOUND, binding.PENDING)
    assert _configmap(kube_apiserver, binder.ledger_name(cluster_name)) is None  # never invented
    assert _cluster_view(kube_apiserver, cluster_name).ledger == 1  # the evidence is kept
    b.bind_once()
    assert _outcome(b, cluster_name).closed is not None

    restored = {"metadata": {k: backup["metadata"][k] for k in ("name", "labels")},
                "data": backup["data"]}  # fmt: skip
    assert kube_apiserver.admin.post(CONFIGMAPS, json=restored).status_code == 201
    outcome = _outcome(b, cluster_name)
    assert (outcome.closed, outcome.bound) == (None, 2)
    assert outcome.rebuilt.startswith(f"plnt-system/{binder.record_name(cluster_name)} from ")
    assert {s.state for s in states(kube_apiserver, [serving, waiting]).values()} == {binding.BOUND}


def _quota(kube_apiserver, hard: int) -> tuple[str, str]:
    group = uuid.uuid4().hex[:6]
    quota = f"q-{group}"
    kube_apiserver.create(
        {
            "apiVersion": GV,
            "kind": "InferenceQuota",
            "metadata": {"name": quota},
            "spec": {
                "namespaceSelector": {"matchLabels": {"quota-group": group}},
                "hard": {"devices": {"gpu.nvidia.com": hard}},
            },
        }
    )
    return quota, group


def test_a_deleted_quota_takes_its_ledger_and_frees_who_waited_at_once(
    kube_apiserver, api, cluster_name
):
    quota, group = _quota(kube_apiserver, 3)
    teams = [tenant_replica(kube_apiserver, cluster_name, 3, {"quota-group": group})
             for _ in range(2)]  # fmt: skip
    b = binder.Binder(api)
    b.bind_once()
    found = states(kube_apiserver, teams)
    assert sorted(s.state for s in found.values()) == [binding.BOUND, binding.REFUSED_STATE]
    names = (quotas.quota_ledger_name(quota), binder.quota_record_name(quota))
    assert all(_configmap(kube_apiserver, n) is not None for n in names)

    assert kube_apiserver.admin.delete(f"/apis/{GV}/inferencequotas/{quota}").status_code == 200
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    assert all(_configmap(kube_apiserver, n) is None for n in names)
    assert outcome.refused == {}  # the one that waited on the quota is bound in the same pass
    assert {s.state for s in states(kube_apiserver, teams).values()} == {binding.BOUND}


def test_an_unreadable_quota_ledger_refuses_its_namespaces_and_keeps_its_status(
    kube_apiserver, api, cluster_name
):
    quota, group = _quota(kube_apiserver, 8)
    first = tenant_replica(kube_apiserver, cluster_name, 2, {"quota-group": group})
    b = binder.Binder(api)
    b.bind_once()
    path = f"/apis/{GV}/inferencequotas/{quota}"
    status = kube_apiserver.admin.get(path).json()["status"]
    assert status["replicas"] == 1
    _put_ledger_text(kube_apiserver, quotas.quota_ledger_name(quota), "{", quotas.QUOTA_DATA_KEY)
    second = tenant_replica(kube_apiserver, cluster_name, 2, {"quota-group": group})
    b.bind_once()
    found = states(kube_apiserver, [first, second])
    assert found[first].state == binding.BOUND
    assert found[second].state == binding.REFUSED_STATE
    where = f"plnt-system/{quotas.quota_ledger_name(quota)}"
    assert found[second].message.startswith(
        f"InferenceQuota {quota}: ConfigMap {where} is not JSON"
    )
    assert kube_apiserver.admin.get(path).json()["status"] == status
    assert [e[:2] for e in _events(kube_apiserver, quota)] == [("Warning", "LedgerCorrupt")]

    assert kube_apiserver.admin.delete(f"{CONFIGMAPS}/{quotas.quota_ledger_name(quota)}")
    b.bind_once()
    assert {s.state for s in states(kube_apiserver, [first, second]).values()} == {binding.BOUND}
    assert kube_apiserver.admin.get(path).json()["status"]["replicas"] == 2


def test_a_lost_ledger_forgotten_binds_its_replicas_again(kube_apiserver, api, cluster_name):
    """No backup: `plnt reconcile --bind-only --once --forget-lost-ledger CLUSTER` starts a new
    ledger in one pass, its replicas bound again oldest first as far as they fit; a ledger that
    is not lost is never forgotten."""
    teams = [make_replica(kube_apiserver, cluster_name, 3) for _ in range(2)]
    binder.Binder(api).bind_once()
    before = binder.Binder(api).read_ledger(cluster_name).state
    assert before is not None and before.sequence == 1
    untouched = binder.Binder(api, forget_lost={cluster_name})
    assert _outcome(untouched, cluster_name).rebuilt == ""  # readable: nothing forgotten
    assert binder.Binder(api).read_ledger(cluster_name).state == before
    for name in (binder.ledger_name(cluster_name), binder.record_name(cluster_name)):
        assert kube_apiserver.admin.delete(f"{CONFIGMAPS}/{name}").status_code == 200
    late = make_replica(kube_apiserver, cluster_name, 3)
    assert _outcome(binder.Binder(api), cluster_name).closed is not None

    outcome = _outcome(binder.Binder(api, forget_lost={cluster_name}), cluster_name)
    assert (outcome.closed, outcome.bound, len(outcome.refused)) == (None, 2, 1)
    assert outcome.rebuilt.endswith("and its record, started again empty")
    held = binder.Binder(api).read_ledger(cluster_name)
    assert held.state is not None and held.state.sequence == 2  # after the last one counted
    assert sorted(held.state.entries) == sorted(f"{t}/r-0" for t in teams)
    found = states(kube_apiserver, [*teams, late])
    assert [found[t].state for t in (*teams, late)] == [
        binding.BOUND,
        binding.BOUND,
        binding.REFUSED_STATE,
    ]
