"""plnt's device accounting against the real DRA allocator.

A cluster of its own, lab-alloc (one pool of two 8-GPU H100 nodes: 16 devices, fenced to this
test's namespaces so no other scenario lands there), receives, across two namespaces and four
ModelDeployments, exactly as many 8-, 4-, 2- and 1-GPU replicas as plnt's accounting says fit:
16 devices. kube-scheduler v1.37.2 on the workload cluster then has to bind every pod and
allocate every ResourceClaim from the nodes' ResourceSlices, read back from its API server. One
more 1-GPU replica must be refused by plnt (ReplicasScheduled False) before any pod exists for
it. The second round carries CEL selectors on the driver's attributes and capacity
(`productName`, `cudaComputeCapability` as a semver, `memory` as a quantity): what plnt's CEL
oracle accepts the real allocator must satisfy on the same devices.

The replicas are applied largest first, each once the one before is bound, because plnt proves
that a packing exists while kube-scheduler picks nodes itself: with sizes that divide one
another, arriving largest first, every node's free devices stay a multiple of the next size, so
any node the scheduler picks keeps the rest placeable. (In another order kube-scheduler, which
scores DRA devices not at all, may spread small claims so that a large one no longer fits on
one node although the pool has room: plnt's accounting assumes the best-fit packing.)
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import yaml

from tests.e2e import fleet, live
from tests.e2e.stack import REPO, ControlPlane

API = "modelplane.ai/v1alpha1"
MD = (API, "ModelDeployment")
MR = (API, "ModelReplica")
CLUSTER = "lab-alloc"
NODES = 2
FENCE = {"plnt.test/allocator": "true"}
TEAMS = ("alloc-a", "alloc-b")
# (deployment, namespace, replicas, GPUs each): 8 + 4 + 2 + 2 x 1 = 16, largest first
PLAN = (
    ("whole", "alloc-a", 1, 8),
    ("half", "alloc-b", 1, 4),
    ("pair", "alloc-a", 1, 2),
    ("single", "alloc-b", 2, 1),
)
SELECTORS = [
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
]


def _cluster() -> dict[str, Any]:
    ic = fleet.existing_cluster(CLUSTER, NODES)
    ic["metadata"]["labels"] = {**ic["metadata"]["labels"], **FENCE}
    ic["spec"]["namespaceSelector"] = {"matchLabels": dict(FENCE)}
    return ic


def _deployment(name: str, ns: str, replicas: int, gpus: int, *, cel: bool) -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md["metadata"] = {"name": name, "namespace": ns}
    md["spec"]["replicas"] = replicas
    md["spec"]["clusterSelector"] = {"matchLabels": copy.deepcopy(FENCE)}
    (device,) = md["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    device["count"] = gpus
    if cel:
        device["selectors"] = [{"cel": c} for c in SELECTORS]
    else:
        device.pop("selectors", None)
    return md


@pytest.fixture(scope="module")
def alloc_cluster(plane: ControlPlane):
    fleet.ensure(plane)  # the control-plane gateway and lab-h100 exist as every scenario expects
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": t, "labels": FENCE}}
        for t in TEAMS
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    fleet.apply_existing_cluster(plane, CLUSTER, NODES, cluster=_cluster())
    workload = plane.workload(CLUSTER)
    live.wait_ready(plane.mgmt, API, "InferenceCluster", CLUSTER, seconds=240)
    fleet.wait_in_view(plane, CLUSTER)
    try:
        yield workload
    finally:
        plane.kubectl("delete", "inferencecluster", CLUSTER, "--wait=false", check=False)
        fleet.wait_in_view(plane, CLUSTER, ready=False)


def _pods(workload, ns: str, deployment: str) -> list[dict[str, Any]]:
    """The deployment's engine pods (not its replicas' endpoint pickers)."""
    pods = workload.list("v1", "Pod", namespace=ns, labels={"modelplane.ai/deployment": deployment})
    return [p for p in pods if "modelplane.ai/engine" in p["metadata"].get("labels", {})]


def _bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and live.is_true(pod, "PodScheduled")


def _claims(workload, ns: str) -> list[dict[str, Any]]:
    return workload.list("resource.k8s.io/v1", "ResourceClaim", namespace=ns)


def _allocated(claim: dict[str, Any]) -> list[tuple[str, str]]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get(
        "results"
    ) or []
    return [(r["pool"], r["device"]) for r in results if r.get("driver") == "gpu.nvidia.com"]


def _clean(plane: ControlPlane, workload) -> None:
    for ns in TEAMS:
        plane.kubectl("delete", "modeldeployment", "--all", "-n", ns, "--wait=false")
    live.wait_for(
        lambda: not any(plane.mgmt.list(*MR, namespace=ns) for ns in TEAMS),
        300,
        "the allocator test's replicas deleted",
    )
    live.wait_for(
        lambda: not any(workload.list("v1", "Pod", namespace=ns) for ns in TEAMS),
        120,
        "their pods gone from lab-alloc",
    )


@pytest.mark.parametrize("cel", [False, True], ids=["counts", "cel-selectors"])
def test_what_plnt_says_fits_the_real_allocator_places(plane, alloc_cluster, cel: bool) -> None:
    workload = alloc_cluster
    try:
        for name, ns, replicas, gpus in PLAN:
            plane.kubectl(
                "apply",
                "-f",
                "-",
                stdin=yaml.safe_dump(_deployment(name, ns, replicas, gpus, cel=cel)),
            )
            live.wait_for(
                lambda name=name, ns=ns, replicas=replicas: (
                    len(pods := _pods(workload, ns, name)) == replicas and all(map(_bound, pods))
                ),
                240,
                f"{ns}/{name}'s {replicas} pod(s) bound by kube-scheduler",
            )
        # every claim allocated, exactly the devices asked, no device twice, the pool full
        taken: list[tuple[str, str]] = []
        for name, ns, replicas, gpus in PLAN:
            pods = _pods(workload, ns, name)
            assert len(pods) == replicas and all(map(_bound, pods)), (name, pods)
            for pod in pods:
                claims = [
                    c
                    for c in _claims(workload, ns)
                    if any(
                        o.get("name") == pod["metadata"]["name"]
                        for o in c["metadata"].get("ownerReferences") or []
                    )
                ]
                assert len(claims) == 1, (pod["metadata"]["name"], claims)
                devices = _allocated(claims[0])
                assert len(devices) == gpus, (name, devices)
                # the allocator put the devices on the node the pod is bound to
                assert {pool for pool, _ in devices} == {pod["spec"]["nodeName"]}, (name, devices)
                taken += devices
        assert len(taken) == len(set(taken)) == NODES * 8, taken

        # one more replica: plnt refuses it before any pod exists
        plane.kubectl(
            "apply", "-f", "-", stdin=yaml.safe_dump(_deployment("extra", "alloc-b", 1, 1, cel=cel))
        )
        md = live.wait_object(
            plane.mgmt,
            *MD,
            "extra",
            "alloc-b",
            until=lambda o: live.condition(o, "ReplicasScheduled").get("status") == "False",
            seconds=120,
        )
        why = live.condition(md, "ReplicasScheduled").get("message", "")
        assert CLUSTER in why, why
        time.sleep(10)  # a pod would appear within the binder's pass and a provider poll
        assert _pods(workload, "alloc-b", "extra") == []
        extra = plane.mgmt.list(
            *MR, namespace="alloc-b", labels={"modelplane.ai/deployment": "extra"}
        )
        assert not any(live.is_true(r, "Bound") for r in extra), extra
    finally:
        _clean(plane, workload)


MAINTENANCE = {"key": "plnt.test/maintenance", "value": "drain", "effect": "NoSchedule"}


def _set_taints(workload, node: str, taints: list[dict[str, Any]]) -> None:
    """The node's taints, as its operator sets them (a field manager of their own)."""
    workload.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {"taints": taints},
        },
        manager="plnt-e2e-operator",
    )


def test_what_the_real_scheduler_cannot_place_reaches_the_user(plane, alloc_cluster) -> None:
    """A bound replica whose pod kube-scheduler cannot place (its node tainted for maintenance
    and the pod replaced; the other node has 4 of the 8 devices it asks) shows the scheduler's
    own message on its ModelReplica and ModelDeployment, and a Warning event says it."""
    workload = alloc_cluster
    try:
        for name, ns, gpus in (("whole", "alloc-a", 8), ("half", "alloc-b", 4)):
            plane.kubectl(
                "apply", "-f", "-", stdin=yaml.safe_dump(_deployment(name, ns, 1, gpus, cel=False))
            )
            live.wait_for(
                lambda name=name, ns=ns: (
                    len(pods := _pods(workload, ns, name)) == 1 and all(map(_bound, pods))
                ),
                240,
                f"{ns}/{name}'s pod bound by kube-scheduler",
            )
        (pod,) = _pods(workload, "alloc-a", "whole")
        node = workload.get("v1", "Node", pod["spec"]["nodeName"])
        taints = node["spec"].get("taints") or []
        _set_taints(workload, node["metadata"]["name"], [*taints, MAINTENANCE])
        workload.delete("v1", "Pod", pod["metadata"]["name"], "alloc-a")

        def unschedulable(o: dict) -> bool:
            return live.condition(o, "ReplicasReady").get("reason") == "Unschedulable"

        md = live.wait_object(plane.mgmt, *MD, "whole", "alloc-a", until=unschedulable, seconds=180)
        (replica,) = plane.mgmt.list(
            *MR, namespace="alloc-a", labels={"modelplane.ai/deployment": "whole"}
        )
        # the replica's own condition, as its reconciles see the pod: a reconcile between two
        # looks at the pod's Object can say Waiting for a moment (seen on a fresh-clone run)
        replica = live.wait_object(
            plane.mgmt, *MR, replica["metadata"]["name"], "alloc-a",
            until=lambda o: live.condition(o, "WorkloadsReady").get("reason") == "Unschedulable",
            seconds=60,
        )  # fmt: skip
        workloads = live.condition(replica, "WorkloadsReady")
        assert workloads.get("reason") == "Unschedulable", workloads
        message = workloads.get("message", "")
        # the real scheduler's words, verbatim: two GPU nodes, a taint on one, devices on the
        # other, and the System node (the endpoint picker's) outside the pod's pool
        assert "cannot be scheduled: 0/3 nodes are available" in message, message
        assert "1 node(s) had untolerated taint" in message, message
        assert "1 node(s) didn't match Pod's node affinity/selector" in message, message
        assert "1 cannot allocate all claims" in message, message
        ready = live.condition(md, "ReplicasReady")
        assert replica["metadata"]["name"] in ready["message"], ready
        assert "0/3 nodes are available" in ready["message"], ready
        assert not live.is_true(md, "Ready")
        warnings = [
            e
            for e in live.events_for(plane.mgmt, "alloc-a", "whole")
            if e.get("type") == "Warning" and "0/3 nodes are available" in e.get("message", "")
        ]
        assert warnings, live.events_for(plane.mgmt, "alloc-a", "whole")
        # the node back in service: the pod is placed and the message goes
        _set_taints(workload, node["metadata"]["name"], taints)
        live.wait_object(
            plane.mgmt,
            *MD,
            "whole",
            "alloc-a",
            until=lambda o: not unschedulable(o) and live.is_true(o, "ReplicasReady"),
            seconds=180,
        )
    finally:
        _clean(plane, workload)
