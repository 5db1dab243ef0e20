"""The serving stack an InferenceCluster installs on its cluster, as a table, and its builders.

Every component is a provider-helm Release with a pinned chart version, except two things no
chart ships: the Gateway API Inference Extension's InferencePool CRD (upstream publishes it
only as plain YAML, so it is a provider-kubernetes Object holding the CRD, read from the
vendored upstream file by ``inferencepool_crd.py``) and the cluster Gateway itself (an Object
holding a gateway.networking.k8s.io/v1 Gateway, in a Namespace Object of its own).

Gateway implementation: kgateway. It is an Envoy-based Gateway API implementation that
conforms to the Inference Extension (HTTPRoutes may point at InferencePools, with the
endpoint picker called over ext_proc) and installs from two OCI charts with a single value
(``inferenceExtension.enabled``) to turn the extension on. The Gateway API CRDs come from
Envoy Gateway's ``gateway-crds-helm`` chart with only the upstream standard-channel Gateway
API CRDs switched on, because Gateway API itself publishes no chart.

Order: ``needs`` names what must be observed Ready before a component is composed at all, so
a controller never starts without its CRDs and the Gateway never precedes its controller.
Components that need only the cluster are composed from the start: provider-helm and
provider-kubernetes retry until the ProviderConfig's kubeconfig works, and composing them
early lets a preview (and an operator) see the whole plan.

Placement: plnt taints every pool it provisions (plnt/workload_cluster.py) and a cluster may be
nothing but one GPU pool, so every component that runs pods tolerates every pool taint, through
the values key its own chart reads (``PLACEMENTS``; each key is cited in
docs/inference-cluster.md). The NVIDIA DRA driver's kubelet plugin must run on the GPU nodes to
publish their devices: it is pinned to the pools whose class claims NVIDIA GPUs (by
``modelplane.ai/pool``), beside the chart's own GPU-node terms. The Gateway's Envoy proxy is
deployed by kgateway, not by a chart: a GatewayParameters object gives it the tolerations.

Deletes: what may be shared or may have existed before plnt (the plnt-system Namespace, CRDs,
and the Releases whose charts template CRDs, so that uninstalling them would delete every
Gateway, HTTPRoute or InferencePool on the cluster) is composed with management policies
without Delete (``keep_on_delete``): deleting the InferenceCluster leaves it in place.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from functions.inference_cluster import inferencepool_crd as vendored_crd
from plnt import labels, workload_cluster

HELM_API = "helm.m.crossplane.io/v1beta1"
KUBERNETES_API = "kubernetes.m.crossplane.io/v1alpha1"
EXTERNAL_NAME = "crossplane.io/external-name"

GATEWAY_NAME = "plnt-inference"
GATEWAY_NAMESPACE = "plnt-system"
GATEWAY_CLASS = "kgateway"
GATEWAY_PORT = 80
GATEWAY_PARAMETERS_GROUP = "gateway.kgateway.dev"  # kgateway's proxy settings (kgateway-crds)


@dataclasses.dataclass(frozen=True)
class Target:
    """What about the cluster the stack's values depend on."""

    nvidia_gpu_pools: tuple[str, ...] = ()  # pools whose class claims NVIDIA GPUs through DRA


def tolerate_every_pool(_: Target) -> dict[str, Any]:
    """Charts whose pods may run anywhere: the top-level ``tolerations`` key they read."""
    return {"tolerations": workload_cluster.pool_tolerations()}


# The chart's own kubeletPlugin.affinity terms (NFD's NVIDIA PCI vendor label, NFD's Tegra CPU
# vendor, the nvidia.com/gpu.present override), kept because Helm replaces a list outright.
DRA_DRIVER_NODE_TERMS = [
    {
        "matchExpressions": [
            {
                "key": "feature.node.kubernetes.io/pci-10de.present",
                "operator": "In",
                "values": ["true"],
            }
        ]
    },
    {
        "matchExpressions": [
            {
                "key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                "operator": "In",
                "values": ["NVIDIA"],
            }
        ]
    },
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
]


def on_nvidia_gpu_nodes(target: Target) -> dict[str, Any]:
    """The DRA driver's kubelet plugin: on plnt's NVIDIA GPU pools (or the chart's GPU nodes),
    tolerating their taints. Its controller and webhook are off (compute domains disabled)."""
    terms = list(DRA_DRIVER_NODE_TERMS)
    if target.nvidia_gpu_pools:
        pools = {"key": labels.POOL, "operator": "In", "values": list(target.nvidia_gpu_pools)}
        terms.insert(0, {"matchExpressions": [pools]})
    return {
        "kubeletPlugin": {
            "tolerations": workload_cluster.pool_tolerations(),
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            },
        }
    }


# Placement name -> the values that put a chart's pods where they can (and must) run.
PLACEMENTS = {
    "none": lambda _: {},  # a chart of CRDs only: no pods
    "anywhere": tolerate_every_pool,
    "nvidia-gpu-nodes": on_nvidia_gpu_nodes,
}


@dataclasses.dataclass(frozen=True)
class Chart:
    """One Helm chart install on the workload cluster."""

    chart: str
    repository: str
    version: str
    namespace: str  # on the workload cluster
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    needs: tuple[str, ...] = ()
    gpu_only: bool = False  # installed only when a pool's class claims NVIDIA GPUs through DRA
    release: str = ""  # the Helm release name on the workload cluster; default: the component
    placement: str = "anywhere"  # key of PLACEMENTS: where the chart's pods may run
    keep_on_delete: bool = False  # the chart templates CRDs: uninstalling would delete them


@dataclasses.dataclass(frozen=True)
class Manifest:
    """One object on the workload cluster, through a provider-kubernetes Object."""

    load: str  # builder name in MANIFESTS
    ready_query: str | None  # a CEL readiness query; None: Ready once created
    needs: tuple[str, ...] = ()
    keep_on_delete: bool = False  # may be shared or pre-existing: never deleted


STACK: dict[str, Chart | Manifest] = {
    "gateway-api-crds": Chart(
        chart="gateway-crds-helm",
        repository="oci://docker.io/envoyproxy",
        version="v1.5.0",
        namespace="kgateway-system",
        values={
            "crds": {
                "gatewayAPI": {"enabled": True, "channel": "standard"},
                "envoyGateway": {"enabled": False},
            }
        },
        placement="none",
        keep_on_delete=True,
    ),
    "inference-extension-crds": Manifest(
        load="inferencepool_crd",
        ready_query=(
            'object.status.conditions.exists(c, c.type == "Established" && c.status == "True")'
        ),
        keep_on_delete=True,
    ),
    "kgateway-crds": Chart(
        chart="kgateway-crds",
        repository="oci://cr.kgateway.dev/kgateway-dev/charts",
        version="v2.0.4",
        namespace="kgateway-system",
        placement="none",
        keep_on_delete=True,
    ),
    "kgateway": Chart(
        chart="kgateway",
        repository="oci://cr.kgateway.dev/kgateway-dev/charts",
        version="v2.0.4",
        namespace="kgateway-system",
        values={"inferenceExtension": {"enabled": True}},
        needs=("gateway-api-crds", "inference-extension-crds", "kgateway-crds"),
    ),
    "leaderworkerset": Chart(
        chart="lws",
        repository="oci://registry.k8s.io/lws/charts",
        version="0.8.0",
        namespace="lws-system",
        release="lws",
    ),
    "nvidia-dra-driver-gpu": Chart(
        chart="nvidia-dra-driver-gpu",
        repository="https://helm.ngc.nvidia.com/nvidia",
        version="25.12.0",
        namespace="nvidia-dra-driver-gpu",
        # GPUs only (DeviceClass gpu.nvidia.com); the node's driver is installed on the host.
        # The override acknowledges GPU allocation's preview status in the chart's values.
        values={
            "nvidiaDriverRoot": "/",
            "gpuResourcesEnabledOverride": True,
            "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        },
        gpu_only=True,
        placement="nvidia-gpu-nodes",
    ),
    "gateway-namespace": Manifest(
        load="gateway_namespace",
        ready_query='object.status.phase == "Active"',
        keep_on_delete=True,  # plnt-system may be shared, or the management cluster's own
    ),
    "gateway-parameters": Manifest(
        load="gateway_parameters",
        ready_query=None,
        needs=("kgateway-crds", "gateway-namespace"),
    ),
    "gateway": Manifest(
        load="gateway",
        ready_query=(
            'object.status.conditions.exists(c, c.type == "Programmed" && c.status == "True")'
            " && has(object.status.addresses) && size(object.status.addresses) > 0"
        ),
        needs=("kgateway", "gateway-namespace", "gateway-parameters"),
    ),
}


def components(with_gpu: bool) -> list[str]:
    """The stack's component names for this cluster, in table order."""
    return [name for name, c in STACK.items() if with_gpu or not getattr(c, "gpu_only", False)]


def resource_name(component: str) -> str:
    """Composition resource name of a stack component."""
    kind = "release" if isinstance(STACK[component], Chart) else "object"
    return f"{kind}-{component}"


# --- builders -------------------------------------------------------------------------


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, maps key by key (Helm's own merge of values)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def release(cluster: str, namespace: str, component: str, target: Target) -> dict[str, Any]:
    """A provider-helm Release installing one pinned chart on the cluster."""
    chart = STACK[component]
    assert isinstance(chart, Chart)
    for_provider: dict[str, Any] = {
        "chart": {"name": chart.chart, "repository": chart.repository, "version": chart.version},
        "namespace": chart.namespace,
    }
    values = merged(chart.values, PLACEMENTS[chart.placement](target))
    if values:
        for_provider["values"] = values
    spec: dict[str, Any] = {
        "forProvider": for_provider,
        "providerConfigRef": {"kind": "ClusterProviderConfig", "name": cluster},
    }
    if chart.keep_on_delete:
        spec["managementPolicies"] = list(workload_cluster.KEEP_ON_DELETE)
    return {
        "apiVersion": HELM_API,
        "kind": "Release",
        "metadata": {
            "name": f"{cluster}-{component}",
            "namespace": namespace,
            "labels": {labels.INFERENCE_CLUSTER: labels.value(cluster)},
            # provider-helm names the Helm release after the external name: on the workload
            # cluster the release is plainly "lws", "kgateway", ... as the charts expect.
            "annotations": {EXTERNAL_NAME: chart.release or component},
        },
        "spec": spec,
    }


def manifest_object(cluster: str, namespace: str, component: str) -> dict[str, Any]:
    """A provider-kubernetes Object holding one manifest, Ready when its CEL query holds."""
    item = STACK[component]
    assert isinstance(item, Manifest)
    readiness: dict[str, str] = {"policy": "SuccessfulCreate"}
    if item.ready_query is not None:
        readiness = {"policy": "DeriveFromCelQuery", "celQuery": item.ready_query}
    spec: dict[str, Any] = {
        "forProvider": {"manifest": MANIFESTS[item.load]()},
        "readiness": readiness,
        "providerConfigRef": {"kind": "ClusterProviderConfig", "name": cluster},
    }
    if item.keep_on_delete:
        spec["managementPolicies"] = list(workload_cluster.KEEP_ON_DELETE)
    return {
        "apiVersion": KUBERNETES_API,
        "kind": "Object",
        "metadata": {
            "name": f"{cluster}-{component}",
            "namespace": namespace,
            "labels": {labels.INFERENCE_CLUSTER: labels.value(cluster)},
        },
        "spec": spec,
    }


def component(cluster: str, namespace: str, name: str, target: Target) -> dict[str, Any]:
    if isinstance(STACK[name], Chart):
        return release(cluster, namespace, name, target)
    return manifest_object(cluster, namespace, name)


def gateway() -> dict[str, Any]:
    """The one cluster Gateway for model traffic; HTTPRoutes of every model attach to it."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            # kgateway (since v2.0.0, kgateway-dev/kgateway#10866) reads the proxy's settings
            # from the GatewayParameters this names, in the Gateway's namespace
            "infrastructure": {
                "parametersRef": {
                    "group": GATEWAY_PARAMETERS_GROUP,
                    "kind": "GatewayParameters",
                    "name": GATEWAY_NAME,
                }
            },
            "listeners": [
                {
                    "name": "http",
                    "protocol": "HTTP",
                    "port": GATEWAY_PORT,
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }
            ],
        },
    }


def gateway_parameters() -> dict[str, Any]:
    """kgateway's settings for the Gateway's Envoy proxy pods: tolerate every pool taint."""
    return {
        "apiVersion": f"{GATEWAY_PARAMETERS_GROUP}/v1alpha1",
        "kind": "GatewayParameters",
        "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
        "spec": {"kube": {"podTemplate": {"tolerations": workload_cluster.pool_tolerations()}}},
    }


def gateway_namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE}}


def inferencepool_crd() -> dict[str, Any]:
    """The InferencePool CRD (inference.networking.k8s.io/v1), read from the vendored file."""
    return vendored_crd.crd()


MANIFESTS = {
    "inferencepool_crd": inferencepool_crd,
    "gateway_namespace": gateway_namespace,
    "gateway_parameters": gateway_parameters,
    "gateway": gateway,
}


def gateway_address(observed_gateway: dict[str, Any] | None) -> str:
    """The Gateway's first address as the Object last observed it, or "" until it has one."""
    if not observed_gateway:
        return ""
    manifest = ((observed_gateway.get("status") or {}).get("atProvider") or {}).get(
        "manifest"
    ) or {}
    addresses = (manifest.get("status") or {}).get("addresses") or []
    first = addresses[0] if isinstance(addresses, list) and addresses else None
    # the manifest is whatever the provider last read back: trust no shape
    return str(first.get("value") or "") if isinstance(first, dict) else ""
