"""The binder's probes of workload API servers, against a real kube-apiserver as the reconciler's
ServiceAccount (package/install/reconciler-rbac.yaml): a server that answers, one that refuses,
one that accepts connections and never answers (what a SIGSTOPped kube-apiserver does); the health
published on the InferenceCluster, its Event, the fleet view and the replicas nudged."""

from __future__ import annotations

import base64
import contextlib
import socket
from collections.abc import Iterator

import pytest
import yaml

from plnt import cluster_health
from plnt.capacity import fleet_view, pool_nodes
from plnt_reconciler import binder, probe
from tests.reconcile import test_binder
from tests.reconcile.apiserver import ADMIN_TOKEN
from tests.reconcile.test_binder import GV, _events, make_replica

# the binder tests' fixtures: a fleet's CRDs, a fresh InferenceCluster, the reconciler's client
fleet_crds, cluster_name, api = test_binder.fleet_crds, test_binder.cluster_name, test_binder.api


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port whose listener never accepts: the kernel completes the TCP handshake and nothing
    ever answers, as with a stopped (SIGSTOP) API server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig_for(kube_apiserver, tmp_path, port: int | None = None) -> str:
    """The test API server's kubeconfig (admin), pointed at `port` on loopback if given."""
    doc = yaml.safe_load(kube_apiserver.kubeconfig(tmp_path / "workload", ADMIN_TOKEN).read_text())
    if port is not None:
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    return yaml.safe_dump(doc)


def test_a_probe_tells_answering_refusing_and_silent_servers_apart(kube_apiserver, tmp_path):
    answering = probe.Target(kubeconfig_for(kube_apiserver, tmp_path)).probe(5)
    assert answering == probe.Outcome(True)
    refused = probe.Target(kubeconfig_for(kube_apiserver, tmp_path, closed_port())).probe(2)
    assert (refused.ok, refused.reason) == (False, cluster_health.REFUSED)
    assert "connection refused" in refused.message
    with silent_server() as port:
        silent = probe.Target(kubeconfig_for(kube_apiserver, tmp_path, port)).probe(1)
    assert (silent.ok, silent.reason) == (False, cluster_health.TIMED_OUT)
    assert silent.message == f"GET https://127.0.0.1:{port}/readyz: no answer within 1s"
    assert ADMIN_TOKEN not in refused.message + silent.message


def _existing(kube_apiserver, name: str, secret: str) -> None:
    path = f"/apis/{GV}/inferenceclusters/{name}"
    obj = kube_apiserver.admin.get(path).json()
    obj["spec"] = {
        "cluster": {
            "source": "Existing",
            "existing": {"secretRef": {"name": secret, "namespace": "plnt-system"}},
        }
    }
    obj["status"] = {
        **(obj.get("status") or {}),
        "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
    }
    assert kube_apiserver.admin.put(path, json=obj).status_code == 200


def _secret(kube_apiserver, name: str, kubeconfig: str) -> None:
    data = {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}
    path = f"/api/v1/namespaces/plnt-system/secrets/{name}"
    kube_apiserver.admin.delete(path)
    kube_apiserver.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "plnt-system"},
            "data": data,
        }
    )


@pytest.mark.timeout(120)
def test_the_binder_publishes_an_outage_and_the_recovery(
    kube_apiserver, api, cluster_name, tmp_path
):
    """As the reconciler's ServiceAccount: the kubeconfig Secret is read by name, the cluster
    turns Unreachable after `failures` silent probes (annotation, Warning Event, the fleet view
    not Ready with why, its replica nudged) and Reachable again after `successes` answers."""
    team = make_replica(kube_apiserver, cluster_name, 1)
    secret = f"{cluster_name}-kubeconfig"
    _existing(kube_apiserver, cluster_name, secret)
    core = binder.client.CoreV1Api(api)

    def read_secret(namespace: str, name: str) -> dict[str, str]:
        return dict(core.read_namespaced_secret(name, namespace).data or {})

    prober = probe.Prober(read_secret, interval=0.1, timeout=0.5)
    b = binder.Binder(api, prober=prober, failures=2, successes=2)
    path = f"/apis/{GV}/inferenceclusters/{cluster_name}"
    replica = f"/apis/{GV}/namespaces/{team}/modelreplicas/r-0"

    def published() -> cluster_health.Record | None:
        return cluster_health.record_of(kube_apiserver.admin.get(path).json())

    with silent_server() as port:
        _secret(kube_apiserver, secret, kubeconfig_for(kube_apiserver, tmp_path, port))
        b.bind_once()  # learns the clusters
        prober.round(wait=True)
        b.bind_once()
        assert published() is None  # one failure is not an outage
        prober.round(wait=True)
        b.bind_once()
    down = published()
    assert down is not None and not down.reachable
    assert (down.reason, down.message) == (
        cluster_health.TIMED_OUT,
        f"GET https://127.0.0.1:{port}/readyz: no answer within 0.5s",
    )
    assert (
        "Warning",
        cluster_health.TIMED_OUT,
        f"its API server has not answered since {down.since}: {down.message}",
    ) in _events(kube_apiserver, cluster_name)
    parts = kube_apiserver.admin.get(
        "/api/v1/namespaces/plnt-system/configmaps",
        params={"labelSelector": f"{fleet_view.VIEW_LABEL}=true"},
    ).json()["items"]
    views, _ = fleet_view.read(parts)
    shown = views[cluster_name].cluster
    assert not shown.ready and shown.degraded is not None
    assert shown.degraded.reason == cluster_health.TIMED_OUT
    nudged = kube_apiserver.admin.get(replica).json()["metadata"]["annotations"]
    assert nudged[cluster_health.REPLICA_NUDGE] == cluster_health.nudge(shown.degraded)

    # the server answers again: Reachable after two answered probes, the replica nudged back
    _secret(kube_apiserver, secret, kubeconfig_for(kube_apiserver, tmp_path))
    for _ in range(2):
        prober.round(wait=True)
    b.bind_once()
    up = published()
    assert up is not None and up.reachable
    assert ("Normal", "ClusterReachable", f"its API server answers again (since {up.since})") in (
        _events(kube_apiserver, cluster_name)
    )
    nudged = kube_apiserver.admin.get(replica).json()["metadata"]["annotations"]
    assert nudged[cluster_health.REPLICA_NUDGE] == "healthy"
    prober.stop()


def test_a_restarted_binder_keeps_when_the_outage_began(kube_apiserver, api, cluster_name):
    since = "2026-01-01T00:00:00Z"
    earlier = cluster_health.Record(False, cluster_health.REFUSED, "connection refused", since)
    failing = probe.Streak(False, 5, 1.8e9, probe.Outcome(False, cluster_health.TIMED_OUT, "x"))
    b = binder.Binder(api)
    path = f"/apis/{GV}/inferenceclusters/{cluster_name}"
    kube_apiserver.admin.patch(
        path,
        json={"metadata": {"annotations": {cluster_health.ANNOTATION: earlier.to_annotation()}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    obj = kube_apiserver.admin.get(path).json()
    out = b.publish_health({cluster_name: obj}, {cluster_name: failing})
    record = cluster_health.record_of(out[cluster_name])
    assert record == cluster_health.Record(False, cluster_health.TIMED_OUT, "x", since)
    assert cluster_health.record_of(kube_apiserver.admin.get(path).json()) == record


def _node(kube_apiserver, name: str, pool: str, ready: str) -> None:
    kube_apiserver.admin.delete(f"/api/v1/nodes/{name}")
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"modelplane.ai/pool": pool}}}  # fmt: skip
    assert kube_apiserver.admin.post("/api/v1/nodes", json=body).status_code == 201
    path = f"/api/v1/nodes/{name}/status"
    obj = kube_apiserver.admin.get(path).json()
    obj["status"] = {"conditions": [{"type": "Ready", "status": ready, "reason": "Kubelet"}]}
    assert kube_apiserver.admin.put(path, json=obj).status_code == 200


@pytest.mark.timeout(120)
def test_capacity_follows_the_nodes_of_the_workload_cluster(
    kube_apiserver, api, cluster_name, tmp_path
):
    """The prober counts the pool's Ready Nodes on the workload API server; the binder publishes
    the counts on the InferenceCluster with a Warning Event, and the fleet view offers the
    Ready nodes only, saying why; a workload cluster that stops answering keeps the last counts."""
    secret = f"{cluster_name}-kubeconfig"
    _existing(kube_apiserver, cluster_name, secret)
    path = f"/apis/{GV}/inferenceclusters/{cluster_name}"
    pool = f"gpu-{cluster_name}"[:40]  # the nodes' pool label: this test's alone on the server
    obj = kube_apiserver.admin.get(path).json()
    obj["status"]["pools"] = [{"name": pool, "className": "h100-8x", "nodeCapacity": 3}]
    assert kube_apiserver.admin.put(path, json=obj).status_code == 200
    for i, ready in enumerate(("True", "True", "False")):
        _node(kube_apiserver, f"{pool}-{i}", pool, ready)
    core = binder.client.CoreV1Api(api)

    def read_secret(namespace: str, name: str) -> dict[str, str]:
        return dict(core.read_namespaced_secret(name, namespace).data or {})

    prober = probe.Prober(read_secret, interval=0.1, timeout=0.5)
    b = binder.Binder(api, prober=prober, failures=2, successes=2)
    _secret(kube_apiserver, secret, kubeconfig_for(kube_apiserver, tmp_path))
    b.bind_once()  # learns the clusters
    prober.round(wait=True)
    b.bind_once()
    counted = pool_nodes.record_of(kube_apiserver.admin.get(path).json())
    assert counted is not None and counted.pools[pool] == (2, 3) and not counted.error

    def shown() -> fleet_view.ClusterView:
        parts = kube_apiserver.admin.get(
            "/api/v1/namespaces/plnt-system/configmaps",
            params={"labelSelector": f"{fleet_view.VIEW_LABEL}=true"},
        ).json()["items"]
        return fleet_view.read(parts)[0][cluster_name]

    view = shown()
    assert [(p.name, p.capacity) for p in view.cluster.pools] == [(pool, 2)]
    why = f"2 of 3 nodes Ready (3 exist) on the workload cluster since {counted.since}"
    assert view.cluster.reduced == {pool: why}
    assert ("Warning", "PoolCapacityReduced", f"pool {pool}: {why}") in _events(
        kube_apiserver, cluster_name
    )

    # the workload cluster stops answering: the counts stand as last observed
    kube_apiserver.admin.delete(f"/api/v1/nodes/{pool}-0")
    with silent_server() as port:
        _secret(kube_apiserver, secret, kubeconfig_for(kube_apiserver, tmp_path, port))
        prober.round(wait=True)
        b.bind_once()
    assert pool_nodes.record_of(kube_apiserver.admin.get(path).json()) == counted
    # it answers again: the node that went is counted
    _secret(kube_apiserver, secret, kubeconfig_for(kube_apiserver, tmp_path))
    prober.round(wait=True)
    b.bind_once()
    again = pool_nodes.record_of(kube_apiserver.admin.get(path).json())
    assert again is not None and again.pools[pool] == (1, 2)
    assert [(p.name, p.capacity) for p in shown().cluster.pools] == [(pool, 1)]
    prober.stop()
