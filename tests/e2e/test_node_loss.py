"""A workload node deleted under a serving fleet of two clusters (docs/scheduler.md, "Capacity
follows the nodes"), on the live control plane:

- the binder counts the pool's Ready nodes on the workload cluster: the InferenceCluster's
  `plnt.work/ready-nodes` annotation, a `PoolCapacityReduced` Warning Event, and the fleet view
  read back from the management API server offer the pool 0 nodes, saying why;
- the replica whose pod ran there cannot come back (the pod garbage collector deletes the pod
  of a Node that is gone; its pool has no other node): its ModelDeployment's `ClustersHealthy`
  carries the kube-scheduler's words, and past `spec.failover.after` a replacement is placed,
  bound and served on the other cluster, and the stuck replica released;
- the node back, the pool offers its node again (`PoolCapacityRestored`).

The test prints the seconds from the deletion to each step.

The fleet: lab-h100 (tests/e2e/fleet.py, four nodes) and nodeloss-b, whose pool h100 has one
node; the deployment's two replicas are spread one per cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from functions.model_deployment import replicas as rep
from plnt import cluster_health
from plnt.capacity import binding, fleet_view, pool_nodes
from tests.e2e import fleet, live, workload
from tests.e2e.stack import REPO, ControlPlane

NS = "nodeloss"
OTHER = "nodeloss-b"  # the cluster that loses its node
NODE = "h100-0"  # its pool h100's one node (Simulator.add_nodes names them <pool>-<i>)
API = "modelplane.ai/v1alpha1"
MD = (API, "ModelDeployment")
MR = (API, "ModelReplica")
ME = (API, "ModelEndpoint")
IC = (API, "InferenceCluster")
NAME = "qwen"
GRACE = 20  # seconds: spec.failover.after
SIMULATED_START = workload.STAGING_SECONDS + workload.ENGINE_START_SECONDS


def _deployment() -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md["metadata"] = {"name": NAME, "namespace": NS}
    md["spec"]["replicas"] = 2
    md["spec"]["failover"] = {"after": f"{GRACE}s"}
    return md


def _replicas(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in plane.mgmt.list(*MR, namespace=NS)}


def _serving(plane: ControlPlane, replica: dict[str, Any]) -> bool:
    name = replica["metadata"]["name"]
    return (
        binding.state_of(replica).state == binding.BOUND
        and live.is_true(replica, "Ready")
        and live.is_true(plane.mgmt.get(*ME, name, NS), "Ready")
    )


def _spread(plane: ControlPlane) -> dict[str, str] | None:
    """Replica -> cluster once one replica serves on each cluster, else None."""
    found = _replicas(plane)
    where = {n: r["spec"]["clusterName"] for n, r in found.items()}
    if sorted(where.values()) != sorted([fleet.CLUSTER, OTHER]):
        return None
    return where if all(_serving(plane, r) for r in found.values()) else None


def _view(plane: ControlPlane) -> fleet_view.ClusterView | None:
    """OTHER as the binder's fleet view on the management API server shows it."""
    views, _ = fleet_view.read(plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE))
    return views.get(OTHER)


def _offered(plane: ControlPlane) -> tuple[int, str] | None:
    """Pool h100's nodes in the fleet view, and why fewer than its spec ('' when not)."""
    view = _view(plane)
    if view is None:
        return None
    nodes = {p.name: p.capacity for p in view.cluster.pools}
    return nodes.get("h100", -1), view.cluster.reduced.get("h100", "")


def _counted(plane: ControlPlane) -> tuple[int, int] | None:
    record = pool_nodes.record_of(plane.mgmt.get(*IC, OTHER))
    return None if record is None else record.pools.get("h100", (0, 0))


def _node(plane: ControlPlane) -> None:
    """OTHER's pool node, as fleet.apply_existing_cluster made it."""
    workload.add_node(
        plane.workloads[OTHER],
        NODE,
        labels={"modelplane.ai/pool": "h100"},
        taints=[fleet.GPU_TAINT],
        devices=fleet.h100_class()["spec"]["devices"],
    )


@pytest.fixture(scope="module")
def two_clusters(plane: ControlPlane) -> Iterator[None]:
    fleet.ensure(plane)
    if plane.mgmt.get(*IC, OTHER) is None:
        fleet.apply_existing_cluster(plane, OTHER, nodes=1)
    live.wait_ready(plane.mgmt, *IC, OTHER, seconds=240)
    fleet.wait_in_view(plane, OTHER)
    plane.kubectl(
        "apply", "-f", "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )  # fmt: skip
    try:
        yield
    finally:
        # the fleet as the files that follow expect it: lab-h100 alone
        fleet.delete_namespace(plane, NS)
        plane.kubectl("delete", "inferencecluster", OTHER, "--wait=false", check=False)
        fleet.wait_in_view(plane, OTHER, ready=False)


@pytest.mark.timeout(1200)
def test_a_deleted_node_drops_capacity_and_its_stuck_replica_fails_over(
    plane: ControlPlane, two_clusters: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # counted whole before: the annotation [1 Ready, 1 exists] and the view offering 1 node
    live.wait_for(lambda: _counted(plane) == (1, 1), 60, f"{OTHER}'s node counted")
    assert _offered(plane) == (1, "")
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_deployment()))
    before = live.wait_for(lambda: _spread(plane), 420, "the deployment spread over both")
    stuck = next(n for n, c in before.items() if c == OTHER)
    healthy = next(n for n, c in before.items() if c != OTHER)
    wl = plane.workloads[OTHER]
    pods_before = {p["metadata"]["name"] for p in wl.list("v1", "Pod", namespace=NS)
                   if (p.get("spec") or {}).get("nodeName") == NODE}  # fmt: skip
    assert pods_before, f"no pod of {stuck} on {NODE}"

    timeline = live.Timeline()
    # the Node goes, and with it what its DRA driver published (the kubelet plugin's slices
    # are the Node's by owner reference)
    wl.delete("v1", "Node", NODE)
    wl.delete("resource.k8s.io/v1", "ResourceSlice", f"{NODE}-{workload.DRIVER}")
    said: set[str] = set()  # the deployment's ClustersHealthy messages while it is stuck
    replacement = ""

    def look() -> bool:
        nonlocal replacement
        timeline.mark("counted: 0 Ready nodes published", _counted(plane) == (0, 0))
        timeline.mark("fleet view offers 0 nodes", (_offered(plane) or (None,))[0] == 0)
        pods = {p["metadata"]["name"] for p in wl.list("v1", "Pod", namespace=NS)}
        timeline.mark("its pod deleted (pod GC)", not pods_before & pods)
        health = live.condition(plane.mgmt.get(*MD, NAME, NS), "ClustersHealthy")
        if f"{stuck} on {OTHER} (Unschedulable:" in health.get("message", ""):
            said.add(f"{health.get('reason')}: {health['message']}")
            timeline.mark("Unschedulable reported", True)
        found = _replicas(plane)
        for name, replica in found.items():
            if (replica["metadata"].get("annotations") or {}).get(rep.REPLACES) == stuck:
                replacement = name
        if replacement in found:
            new = found[replacement]
            timeline.mark("replacement placed", True)
            timeline.mark("replacement bound", binding.state_of(new).state == binding.BOUND)
            timeline.mark("replacement serving", _serving(plane, new))
        gone = stuck not in found or bool(found[stuck]["metadata"].get("deletionTimestamp"))
        timeline.mark("stuck replica released", gone)
        return "replacement serving" in timeline.seen and gone

    live.wait_for(look, 420, "a replacement serving and the stuck replica released", 0.5)
    live.wait_for(lambda: set(_replicas(plane)) == {healthy, replacement}, 120, "stuck deleted")

    # capacity: counted, published with why, and offered so in the view
    record = pool_nodes.record_of(plane.mgmt.get(*IC, OTHER))
    assert record is not None and record.pools.get("h100", (0, 0)) == (0, 0)  # none left
    why = f"0 of 1 nodes Ready (0 exist) on the workload cluster since {record.since}"
    assert _offered(plane) == (0, why)
    events = live.events_for(plane.mgmt, "default", OTHER)
    assert any(
        e.get("reason") == "PoolCapacityReduced" and e.get("message") == f"pool h100: {why}"
        for e in events
    ), [(e.get("reason"), e.get("message")) for e in events]
    # the stuck replica: reported with the kube-scheduler's words, replaced after the grace
    assert any("cannot be scheduled: 0/" in m for m in said), said
    new = plane.mgmt.get(*MR, replacement, NS)
    assert new["spec"]["clusterName"] == fleet.CLUSTER
    assert timeline.seen["replacement placed"] - timeline.seen["Unschedulable reported"] >= (
        GRACE - 2  # the condition is read by polling: it may be seen up to a look late
    ), timeline.seen
    endpoint = plane.mgmt.get(*ME, replacement, NS)
    assert live.is_true(endpoint, "Ready")
    health = live.condition(plane.mgmt.get(*MD, NAME, NS), "ClustersHealthy")
    assert health.get("reason") in ("FailedOver", "Healthy"), health

    # the node back: the pool offers it again
    restored = time.monotonic()
    _node(plane)
    live.wait_for(lambda: _offered(plane) == (1, ""), 120, "the view offering the node again")
    back = time.monotonic() - restored
    assert _counted(plane) == (1, 1)
    live.wait_for(
        lambda: any(
            e.get("reason") == "PoolCapacityRestored"
            for e in live.events_for(plane.mgmt, "default", OTHER)
        ),
        30,
        "PoolCapacityRestored",
    )
    assert cluster_health.record_of(plane.mgmt.get(*IC, OTHER)) is not None
    with capsys.disabled():
        print(f"\nnode {NODE} of {OTHER} deleted (grace {GRACE}s):")
        for step in (
            "counted: 0 Ready nodes published",
            "fleet view offers 0 nodes",
            "its pod deleted (pod GC)",
            "Unschedulable reported",
            "replacement placed",
            "replacement bound",
            "replacement serving",
            "stuck replica released",
        ):
            print(timeline.line(step))
        print(f"  (replacement serving includes {SIMULATED_START:.0f} s of simulated weight "
              "staging and engine start)")  # fmt: skip
        print(f"  the node added back: offered again in the fleet view after {back:.1f} s")
        for m in sorted(said):
            print(f"  ClustersHealthy {m}")
