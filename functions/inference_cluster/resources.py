"""Builders for what an InferenceCluster composes besides its serving stack.

- ``coreweave_cluster``: the CoreWeaveCluster (source CoreWeave), one CKS pool per node pool,
  shaped by the pool's InferenceClass.
- ``provider_config``: a provider-kubernetes or provider-helm ClusterProviderConfig reading
  the cluster's kubeconfig Secret.
- ``kubeconfig_ref``: where that Secret is, for either source.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from plnt import labels, xp
from plnt.models.inference_class import InferenceClassSpec
from plnt.models.inference_cluster import CoreWeaveSource, InferenceClusterSpec

COREWEAVE_CLUSTER_API = "infrastructure.modelplane.ai/v1alpha1"
KUBECONFIG_KEY = "kubeconfig"
PROVIDER_CONFIG_APIS = {
    "kubernetes": "kubernetes.m.crossplane.io/v1alpha1",
    "helm": "helm.m.crossplane.io/v1beta1",
}


@dataclasses.dataclass(frozen=True)
class KubeconfigRef:
    name: str
    namespace: str
    key: str
    published: bool  # the Secret is known to exist (observed), not only expected

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (key {self.key})"


def coreweave_cluster(
    name: str,
    source: CoreWeaveSource,
    spec: InferenceClusterSpec,
    classes: dict[str, InferenceClassSpec],
) -> dict[str, Any]:
    """The CoreWeaveCluster, named after the InferenceCluster, in the source's namespace."""
    return {
        "apiVersion": COREWEAVE_CLUSTER_API,
        "kind": "CoreWeaveCluster",
        "metadata": {
            "name": name,
            "namespace": source.namespace,
            "labels": {labels.INFERENCE_CLUSTER: labels.value(name)},
        },
        "spec": {
            "zone": source.zone,
            "kubernetesVersion": source.kubernetes_version,
            "credentials": {"name": source.credentials.name, "type": source.credentials.type},
            "nodePools": [node_pool(p, classes[p.class_name]) for p in spec.node_pools],
        },
    }


def node_pool(pool: Any, cls: InferenceClassSpec) -> dict[str, Any]:
    """One CoreWeaveCluster pool: the class gives the hardware, the InferenceCluster the size."""
    provisioning = cls.coreweave
    assert provisioning is not None  # checked before anything is composed
    out: dict[str, Any] = {
        "name": pool.name,
        "role": "GPU" if cls.has_gpu else "CPU",
        "instanceType": provisioning.instance_type,
        "nodeCount": pool.node_count,
    }
    if pool.min_node_count is not None:
        out["minNodeCount"] = pool.min_node_count
    if pool.max_node_count is not None:
        out["maxNodeCount"] = pool.max_node_count
    if cls.has_gpu:
        out["gpu"] = {"acceleratorType": provisioning.accelerator_type}
    return out


def keep_instance_types(
    cwc: dict[str, Any], observed: dict[str, Any] | None, spec: InferenceClusterSpec
) -> list[str]:
    """Gives each pool of ``cwc`` that already exists the instance type it has; says which.

    A pool's class may be edited under it (a new instanceType), but CKS cannot change a pool's
    instance type and the CoreWeaveCluster refuses the change at admission, so the pool is
    left as it is and the message says how to move to the new type.
    """
    existing = {
        p.get("name"): p.get("instanceType")
        for p in ((observed or {}).get("spec") or {}).get("nodePools") or []
        if isinstance(p, dict)
    }
    classes = {p.name: p.class_name for p in spec.node_pools}
    held = []
    for pool in cwc["spec"]["nodePools"]:
        runs = existing.get(pool["name"])
        if isinstance(runs, str) and runs and runs != pool["instanceType"]:
            name, wanted = pool["name"], pool["instanceType"]
            held.append(
                f'node pool "{name}": InferenceClass "{classes[name]}" now asks for instance '
                f"type {wanted}, but the pool runs {runs} and CKS can't "
                "change an existing pool's instance type: add a pool under a new name for the "
                "new type (and remove this one once its workloads have moved)"
            )
            pool["instanceType"] = runs
    return held


def provider_config(provider: str, name: str, ref: KubeconfigRef) -> dict[str, Any]:
    """A ClusterProviderConfig named after the InferenceCluster, from its kubeconfig Secret."""
    return {
        "apiVersion": PROVIDER_CONFIG_APIS[provider],
        "kind": "ClusterProviderConfig",
        "metadata": {"name": name, "labels": {labels.INFERENCE_CLUSTER: labels.value(name)}},
        "spec": {
            "credentials": {
                "source": "Secret",
                "secretRef": {"name": ref.name, "namespace": ref.namespace, "key": ref.key},
            }
        },
    }


def coreweave_kubeconfig_ref(
    name: str, namespace: str, observed: dict[str, Any] | None
) -> KubeconfigRef:
    """The kubeconfig the CoreWeaveCluster publishes (status.secrets), once it has.

    Until then the expected name (``<cluster>-kubeconfig``, key ``kubeconfig``) stands in, so
    the ProviderConfigs exist from the start and only their secretRef follows the status.
    """
    for secret in ((observed or {}).get("status") or {}).get("secrets") or []:
        if secret.get("type", "Kubeconfig") == "Kubeconfig" and secret.get("name"):
            key = secret.get("key") or KUBECONFIG_KEY
            return KubeconfigRef(secret["name"], namespace, key, published=True)
    return KubeconfigRef(f"{name}-kubeconfig", namespace, KUBECONFIG_KEY, published=False)


def desired_from_observed(obj: dict[str, Any]) -> dict[str, Any]:
    """An observed composed resource as desired: identity and spec, nothing Crossplane adds."""
    meta = obj.get("metadata") or {}
    out_meta = {k: meta[k] for k in ("name", "namespace", "labels") if meta.get(k)}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": out_meta,
        "spec": xp.kept_spec(obj),
    }
