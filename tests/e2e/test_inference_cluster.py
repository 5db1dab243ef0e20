"""Scenario 2: an InferenceClass and an Existing InferenceCluster on a live Crossplane.

The kubeconfig Secret reaches a workload kube-apiserver. provider-helm cannot run here: the
simulator plays it (Release status, and the CRDs and classes a chart would install that other
components need); the Objects (the Gateway's Namespace, the InferencePool CRD, the Gateway) are
applied by the real provider-kubernetes, and the simulated gateway controller gives the Gateway
its address.
"""

from __future__ import annotations

from tests.e2e import fleet, live

API = "modelplane.ai/v1alpha1"


def test_existing_cluster_gets_its_serving_stack(plane) -> None:
    cluster = fleet.ensure(plane)
    assert live.is_true(cluster, "Synced")
    assert live.is_true(cluster, "StackReady"), live.condition(cluster, "StackReady")
    status = cluster["status"]
    assert status["providerConfigRef"] == {"name": fleet.CLUSTER}
    address = status["gateway"]["address"]
    assert address.startswith("192.0.2.")
    assert status["pools"] == [
        {"name": "h100", "className": fleet.CLASS, "nodeCapacity": fleet.NODES}
    ]

    releases = plane.mgmt.list(
        "helm.m.crossplane.io/v1beta1",
        "Release",
        labels={"modelplane.ai/inference-cluster": fleet.CLUSTER},
    )
    charts = sorted(r["spec"]["forProvider"]["chart"]["name"] for r in releases)
    assert charts == sorted(
        ["gateway-crds-helm", "kgateway-crds", "kgateway", "lws", "nvidia-dra-driver-gpu"]
    )

    # What provider-kubernetes applied on the workload cluster, read back from its API server.
    workload = plane.workloads[fleet.CLUSTER]
    gateway = workload.get(
        "gateway.networking.k8s.io/v1", "Gateway", "plnt-inference", "plnt-system"
    )
    assert gateway is not None
    assert gateway["status"]["addresses"][0]["value"] == address
    crd = workload.get(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "inferencepools.inference.networking.k8s.io",
    )
    assert live.is_true(crd, "Established")

    header, rows = live.table(plane.kubectl("get", "inferencecluster"))
    assert header.count("READY") == 1, header
    row = next(r for r in rows if r[0] == fleet.CLUSTER)
    assert row[header.index("READY")] == "True"


def test_deleting_a_cluster_keeps_what_plnt_did_not_create(plane) -> None:
    """An Existing cluster's `plnt-system` namespace and the InferencePool CRD may be shared or
    pre-existing (the cluster may be the management cluster itself): deleting the
    InferenceCluster removes plnt's stack but keeps them, and what others put there."""
    fleet.ensure(plane)
    name = "lab-shared"
    workload = plane.workload(name)
    workload.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plnt-system"}})
    theirs = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "someone-elses", "namespace": "plnt-system"},
        "data": {"owner": "another team"},
    }
    workload.apply(theirs)
    fleet.apply_existing_cluster(plane, name, nodes=1)
    live.wait_ready(plane.mgmt, API, "InferenceCluster", name, seconds=240)
    assert workload.get("gateway.networking.k8s.io/v1", "Gateway", "plnt-inference", "plnt-system")

    plane.kubectl("delete", "inferencecluster", name, "--wait=false")
    live.wait_for(
        lambda: plane.mgmt.get(API, "InferenceCluster", name) is None,
        240,
        f"InferenceCluster {name} deleted",
    )
    live.wait_for(
        lambda: (
            workload.get("gateway.networking.k8s.io/v1", "Gateway", "plnt-inference", "plnt-system")
            is None
        ),
        120,
        "plnt's Gateway removed from the cluster",
    )
    namespace = workload.get("v1", "Namespace", "plnt-system")
    assert namespace is not None and not namespace["metadata"].get("deletionTimestamp")
    kept = workload.get("v1", "ConfigMap", "someone-elses", "plnt-system")
    assert kept is not None and kept["data"] == {"owner": "another team"}
    crd = workload.get(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "inferencepools.inference.networking.k8s.io",
    )
    assert crd is not None and not crd["metadata"].get("deletionTimestamp")
