"""Builders for what a CoreWeaveCluster composes, each named for what it returns.

Two groups: the CoreWeave side (VPC and CKS Cluster, through provider-coreweave) and the
workload-cluster side (kubeconfig Secret, provider-kubernetes ProviderConfig, and the
provider-kubernetes Objects that carry CKS NodePools and the StorageClass into the cluster).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import yaml

from plnt import labels, names
from plnt.models.coreweave_cluster import NodePool

VPC_API = "networking.coreweave.m.crossplane.io/v1alpha1"
CKS_API = "cks.coreweave.m.crossplane.io/v1alpha1"
K8S_PROVIDER_API = "kubernetes.m.crossplane.io/v1alpha1"
NODEPOOL_API = "compute.coreweave.com/v1alpha1"

# The VPC prefixes a CKS cluster draws from, by the name the cluster refers to them with.
# Sizes follow CoreWeave's examples: a /13 of pod addresses, /22s for Services and for
# internal load balancers. Every cluster has its own VPC, so the ranges never collide.
POD_CIDR = "pod-cidr"
SERVICE_CIDR = "service-cidr"
INTERNAL_LB_CIDR = "internal-lb-cidr"
VPC_PREFIXES = {
    POD_CIDR: "10.0.0.0/13",
    SERVICE_CIDR: "10.16.0.0/22",
    INTERNAL_LB_CIDR: "10.32.4.0/22",
}
COREWEAVE_NAME_MAX = 30  # CoreWeave's limit on VPC and cluster names

KUBECONFIG_KEY = "kubeconfig"
SHARED_VAST = "shared-vast"  # the ReadWriteMany class every CKS cluster ships with
MODEL_CACHE_STORAGE_CLASS = "modelplane-shared-vast"
# StorageClass fields copied from shared-vast; reclaimPolicy is ours (Delete).
STORAGE_CLASS_FIELDS = ("provisioner", "parameters", "mountOptions", "volumeBindingMode")

# GPU pools repel pods that do not tolerate this taint; CPU pools repel on modelplane.ai/cpu.
ROLE_TAINT = {"GPU": labels.GPU, "CPU": labels.CPU}
SYSTEM_LABEL = labels.SYSTEM

# An Object holding a NodePool is ready when CKS reports the pool at its target size.
NODEPOOL_AT_TARGET = (
    "has(object.status) && has(object.status.conditions) && "
    "object.status.conditions.exists(c, c.type == 'AtTarget' && c.status == 'True')"
)


@dataclasses.dataclass(frozen=True)
class Names:
    """Every name derived from the XR, in one place so builders and status agree."""

    xr: str
    namespace: str

    @property
    def coreweave(self) -> str:
        """The VPC's and cluster's name at CoreWeave (at most 30 characters)."""
        return names.dns_label(self.xr, max_len=COREWEAVE_NAME_MAX)

    @property
    def kubeconfig_secret(self) -> str:
        return names.dns_subdomain(self.xr, "kubeconfig")

    @property
    def provider_config(self) -> str:
        return names.dns_subdomain(self.xr)

    def object(self, suffix: str) -> str:
        return names.dns_label(self.xr, suffix)


def node_pool_name(pool: NodePool) -> str:
    """The CKS NodePool's name: the pool's name, verbatim (seed 004).

    CKS cannot change a pool's instance type; the XRD refuses such a change at admission, so a
    pool keeps its name for life and a new instance type is a new pool under a new name.
    """
    return pool.name


def node_pool_resource(pool: NodePool) -> str:
    """Composition resource name of the pool's Object (keyed like the NodePool's name)."""
    return f"nodepool-{node_pool_name(pool)}"


def _provider_config_ref(kind: str, name: str) -> dict[str, str]:
    return {"kind": kind, "name": name}


def vpc(n: Names, zone: str, credentials: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": VPC_API,
        "kind": "VPC",
        "metadata": {"name": n.xr, "namespace": n.namespace},
        "spec": {
            "forProvider": {
                "name": n.coreweave,
                "zone": zone,
                "vpcPrefixes": [{"name": k, "value": v} for k, v in VPC_PREFIXES.items()],
            },
            "providerConfigRef": credentials,
        },
    }


def cks_cluster(n: Names, zone: str, version: str, credentials: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": CKS_API,
        "kind": "Cluster",
        "metadata": {"name": n.xr, "namespace": n.namespace},
        "spec": {
            "forProvider": {
                "name": n.coreweave,
                "zone": zone,
                "version": f"v{version}",
                # plnt's control plane reaches the API server from outside CoreWeave.
                "public": True,
                "vpcIdRef": {"name": n.xr},
                "podCidrName": POD_CIDR,
                "serviceCidrName": SERVICE_CIDR,
                "internalLbCidrNames": [INTERNAL_LB_CIDR],
            },
            "providerConfigRef": credentials,
        },
    }


def kubeconfig(n: Names, server: str, token: str) -> str:
    """A kubeconfig for the cluster, authenticating with a CoreWeave API access token.

    The CKS Cluster reports no CA bundle, so the client verifies the API server's certificate
    against the system's trust roots.
    """
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n.xr, "cluster": {"server": server}}],
        "users": [{"name": n.xr, "user": {"token": token}}],
        "contexts": [{"name": n.xr, "context": {"cluster": n.xr, "user": n.xr}}],
        "current-context": n.xr,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubeconfig_secret(n: Names, data_b64: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": n.kubeconfig_secret, "namespace": n.namespace},
        "type": "Opaque",
        "data": {KUBECONFIG_KEY: data_b64},
    }


def encode(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubernetes_provider_config(n: Names) -> dict[str, Any]:
    return {
        "apiVersion": K8S_PROVIDER_API,
        "kind": "ProviderConfig",
        "metadata": {"name": n.provider_config, "namespace": n.namespace},
        "spec": {
            "credentials": {
                "source": "Secret",
                "secretRef": {
                    "namespace": n.namespace,
                    "name": n.kubeconfig_secret,
                    "key": KUBECONFIG_KEY,
                },
            }
        },
    }


def _object(n: Names, name: str, manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": K8S_PROVIDER_API,
        "kind": "Object",
        "metadata": {"name": name, "namespace": n.namespace},
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": _provider_config_ref("ProviderConfig", n.provider_config),
            **spec,
        },
    }


@dataclasses.dataclass(frozen=True)
class NodeCounts:
    target: int
    min: int | None = None
    max: int | None = None

    @property
    def autoscaling(self) -> bool:
        return self.max is not None


def node_counts(pool: NodePool, observed_target: int | None) -> NodeCounts:
    """The seed's node count rules.

    Fixed size: exactly nodeCount. Autoscaled: CKS's autoscaler moves the target between
    minNodeCount (default nodeCount, or 1 when that is 0; never below 1) and maxNodeCount.
    A new autoscaled pool starts at nodeCount but with at least one node; an existing one keeps
    the target the autoscaler set (even zero), only pulled down to maxNodeCount.
    """
    high = pool.max_node_count
    if high is None:
        return NodeCounts(target=pool.node_count)
    floor = pool.min_node_count if pool.min_node_count is not None else pool.node_count
    low = max(1, floor)
    if observed_target is not None:
        target = min(observed_target, high)
    else:
        target = min(max(pool.node_count, low), high)
    return NodeCounts(target=target, min=low, max=high)


def node_labels(pool: NodePool) -> dict[str, str]:
    out = {labels.POOL: pool.name}
    if pool.role == "GPU" and pool.gpu is not None:
        out[labels.ACCELERATOR] = pool.gpu.accelerator_type
    if pool.role == "CPU":
        out[labels.CPU] = "true"
    if pool.role == "System":
        out[SYSTEM_LABEL] = "true"
    return out


def node_taints(pool: NodePool) -> list[dict[str, str]]:
    """GPU and CPU pools repel what does not tolerate their role; a System pool is untainted,
    so cluster add-ons (CoreDNS, metrics, controllers) that tolerate nothing run there."""
    if pool.role not in ROLE_TAINT:
        return []
    return [{"key": ROLE_TAINT[pool.role], "value": "true", "effect": "NoSchedule"}]


def node_pool(pool: NodePool, counts: NodeCounts) -> dict[str, Any]:
    """The CKS NodePool manifest (cluster-scoped, inside the CKS cluster)."""
    spec: dict[str, Any] = {
        "computeClass": "default",
        "instanceType": pool.instance_type,
        "targetNodes": counts.target,
        "autoscaling": counts.autoscaling,
        "nodeLabels": node_labels(pool),
        "nodeTaints": node_taints(pool),
    }
    if counts.autoscaling:
        spec["minNodes"] = counts.min
        spec["maxNodes"] = counts.max
    return {
        "apiVersion": NODEPOOL_API,
        "kind": "NodePool",
        "metadata": {"name": node_pool_name(pool), "labels": {labels.POOL: pool.name}},
        "spec": spec,
    }


def node_pool_object(n: Names, pool: NodePool, counts: NodeCounts) -> dict[str, Any]:
    return _object(
        n,
        n.object(node_pool_resource(pool)),
        node_pool(pool, counts),
        readiness={"policy": "DeriveFromCelQuery", "celQuery": NODEPOOL_AT_TARGET},
    )


def shared_vast_observer(n: Names) -> dict[str, Any]:
    """Reads (never writes) the cluster's shared-vast StorageClass, so it can be copied."""
    manifest = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": SHARED_VAST},
    }
    return _object(n, n.object(SHARED_VAST), manifest, managementPolicies=["Observe"])


def model_cache_storage_class(n: Names, shared_vast: dict[str, Any]) -> dict[str, Any]:
    """A copy of shared-vast that deletes a volume when its claim is deleted."""
    manifest: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": MODEL_CACHE_STORAGE_CLASS},
    }
    for field in STORAGE_CLASS_FIELDS:
        if field in shared_vast:
            manifest[field] = shared_vast[field]
    manifest["allowVolumeExpansion"] = bool(shared_vast.get("allowVolumeExpansion", False))
    manifest["reclaimPolicy"] = "Delete"
    return _object(n, n.object("storageclass"), manifest)
