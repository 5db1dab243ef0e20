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
