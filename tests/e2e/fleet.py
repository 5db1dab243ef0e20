"""The fleet the e2e scenarios serve models on: an InferenceClass and an Existing InferenceCluster
whose kubeconfig reaches a workload API server, plus the control-plane Gateway ModelService
routes through (a prerequisite plnt does not compose: README, "Installing")."""

from __future__ import annotations

import base64
import copy
from typing import Any

import yaml

from plnt.capacity import fleet_view
from tests.e2e import live, lws, simulator
from tests.e2e.stack import REPO, ControlPlane

API = "modelplane.ai/v1alpha1"
CLUSTER = "lab-h100"
CLASS = "nvidia-h100-8x"
NODES = 4  # four 8-GPU nodes
SECRET_NAMESPACE = "plnt-system"
OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")


def h100_class() -> dict[str, Any]:
    docs = yaml.safe_load_all(
        (REPO / "examples" / "fleet" / "classes-coreweave-h100.yaml").read_text()
    )
    cls = next(d for d in docs if d["metadata"]["name"] == CLASS)
    return copy.deepcopy(cls)


def existing_cluster(name: str = CLUSTER, nodes: int = NODES) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {
            "name": name,
            "labels": {"modelplane.ai/provider": "on-prem", "modelplane.ai/region": "eu-west"},
        },
        "spec": {
            "cluster": {
                "source": "Existing",
                "existing": {
                    "secretRef": {
                        "name": f"{name}-kubeconfig",
                        "namespace": SECRET_NAMESPACE,
                        "key": "kubeconfig",
                    }
                },
            },
            "nodePools": [{"name": "h100", "className": CLASS, "nodeCount": nodes}],
        },
    }


def control_plane_gateway() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plnt-system"}},
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "plnt-control-plane"},
            "spec": {"controllerName": "example.net/gateway-controller"},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "plnt-gateway", "namespace": "plnt-system"},
            "spec": {
                "gatewayClassName": "plnt-control-plane",
                "listeners": [
                    {
                        "name": "http",
                        "protocol": "HTTP",
                        "port": 80,
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    }
                ],
            },
        },
    ]


# An existing GPU cluster's nodes, as its operators run them: labelled with their plnt pool
# (docs/inference-cluster.md) and tainted as NVIDIA's GPU operator and managed node groups do.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SYSTEM_LABEL = "modelplane.ai/system"


def apply_existing_cluster(
    plane: ControlPlane,
    name: str = CLUSTER,
    nodes: int = NODES,
    cluster: dict[str, Any] | None = None,
    *,
    pool: str = "h100",
    cls: dict[str, Any] | None = None,
) -> None:
    """A workload cluster with ``nodes`` nodes of class ``cls`` (by default the H100 one) in
    pool ``pool`` and a System node, its kubeconfig Secret, the class and the InferenceCluster
    (``cluster``, by default `existing_cluster`) that adopts it."""
    cls = cls or h100_class()
    workload = plane.workload(name)
    # its operators installed NVIDIA's DRA driver (its DeviceClass, and each node's GPUs) and
    # the LeaderWorkerSet controller gangs need, as they would on any GPU cluster
    workload.apply(simulator.NVIDIA_DEVICE_CLASS)
    lws.start(workload.name, plane.procs, workload, plane.ca, workload.dir / "lws")
    plane.simulator.add_nodes(
        workload,
        pool,
        nodes,
        labels={"modelplane.ai/pool": pool},
        taints=[GPU_TAINT],
        devices=cls["spec"]["devices"],
    )
    # and a node without GPUs for what needs none (each replica's endpoint picker), labelled as
    # docs/inference-cluster.md asks an existing cluster's operators to
    plane.simulator.add_nodes(
        workload, "system", 1, labels={SYSTEM_LABEL: "true"}, taints=[], devices=[]
    )
    kubeconfig = yaml.safe_dump(workload.kubeconfig_doc())
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SECRET_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-kubeconfig", "namespace": SECRET_NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
        },
        cls,
        cluster or existing_cluster(name, nodes),
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def ensure(plane: ControlPlane) -> dict[str, Any]:
    """The fleet, Ready; returns the InferenceCluster as read back."""
    if plane.mgmt.get(API, "InferenceCluster", CLUSTER) is None:
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(control_plane_gateway()))
        apply_existing_cluster(plane)
    cluster = live.wait_ready(plane.mgmt, API, "InferenceCluster", CLUSTER, seconds=240)
    wait_in_view(plane, CLUSTER)
    return cluster


def wait_in_view(plane: ControlPlane, name: str, *, ready: bool = True) -> None:
    """Until the binder's fleet view, which the ModelDeployment function schedules from, shows
    cluster ``name`` Ready (or, ``ready`` False, no longer has it): a deployment applied
    before would see a cluster that is not Ready yet (Pending) or one that is gone."""

    def shown() -> bool:
        views, _ = fleet_view.read(
            plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE)
        )
        view = views.get(name)
        return (view is not None and view.cluster.ready) if ready else view is None

    live.wait_for(
        shown, 120, f"the fleet view to show cluster {name} {'Ready' if ready else 'gone'}"
    )


def rendered_gpus(plane: ControlPlane, namespace: str) -> dict[str, int]:
    """GPUs of every ModelReplica whose engine workload has been composed, by replica name:
    read from the replica's spec and the Objects on the management cluster, not the ledger."""
    objects = plane.mgmt.list(*OBJECT, namespace=namespace)
    # an Object's controller is the XR that composed it (Crossplane's crossplane.io/composite
    # label names the top of the tree instead)
    workloads = {
        ref["name"]
        for o in objects
        if ((o.get("spec") or {}).get("forProvider") or {}).get("manifest", {}).get("kind")
        == "Deployment"
        for ref in o["metadata"].get("ownerReferences") or []
        if ref.get("controller") and ref.get("kind") == "ModelReplica"
    }
    out: dict[str, int] = {}
    for replica in plane.mgmt.list(API, "ModelReplica", namespace=namespace):
        name = replica["metadata"]["name"]
        if name not in workloads:
            continue
        out[name] = sum(
            request.get("count", 1) * engine.get("copies", 1)
            for engine in replica["spec"]["engines"]
            for member in engine["members"]
            for request in member.get("deviceRequests") or []
        )
    return out


# plnt's namespaced kinds a team creates, every one an XR whose tree ends in provider-kubernetes
# Objects (CoreWeaveCluster is a platform kind and absent from the teams' namespaces here)
TEAM_KINDS = "workflowruns,modeldeployments,modelservices,modelcaches,modelendpoints,modelreplicas"
OBJECT_WAIT_SECONDS = 300


def delete_namespace(plane: ControlPlane, *namespaces: str, gone: float = 0) -> None:
    """Deletes tests' namespaces with the commands docs/workflow-run.md gives users: plnt's XRs
    first, then, once their provider-kubernetes Objects are gone (`kubectl wait`), the
    namespaces. Deleting a namespace while Objects remain can leave it Terminating for good: the
    namespace controller removes the provider's ProviderConfigUsages, which the provider cannot
    create again in a terminating namespace, so it never drops the Objects' finalizers
    (crossplane/crossplane-runtime#1150). With `gone`, also waits that many seconds for the
    namespaces themselves to go."""
    for namespace in namespaces:
        plane.kubectl(
            "delete", TEAM_KINDS, "--all", "-n", namespace, "--wait=false", "--ignore-not-found"
        )
    for namespace in namespaces:
        try:
            plane.kubectl(
                "wait", "--for=delete", "objects.kubernetes.m.crossplane.io", "--all",
                "-n", namespace, f"--timeout={OBJECT_WAIT_SECONDS}s",
                timeout=OBJECT_WAIT_SECONDS + 60,
            )  # fmt: skip
        except RuntimeError as e:
            left = [
                f"{o['metadata']['name']} ({live.condition(o, 'Synced').get('message')})"
                for o in plane.mgmt.list(*OBJECT, namespace=namespace)
            ]
            raise TimeoutError(f"{e}; left: {left[:5]} ({len(left)} in all)") from None
    live.wait_for(
        lambda: not any(plane.mgmt.list(API, "ModelReplica", namespace=n) for n in namespaces),
        120,
        f"the ModelReplicas in {', '.join(namespaces)} deleted",
    )
    for namespace in namespaces:
        plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
    if gone:
        live.wait_for(
            lambda: not [n for n in namespaces if plane.mgmt.get("v1", "Namespace", n)],
            gone,
            f"namespaces {', '.join(namespaces)} gone",
        )
