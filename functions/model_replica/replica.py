"""What every builder of the ModelReplica function shares: the replica's identity, its names
and labels on the workload cluster, and the provider-kubernetes Object that carries a manifest
there. Composed manifests live in the replica's own namespace on its pinned cluster."""

from __future__ import annotations

import dataclasses
from typing import Any

from plnt import labels, names
from plnt.models.model_replica import ModelReplicaSpec

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
SERVING_PORT = 8000  # PrefillDecode pool port: the routing sidecar and the prefill engine
LWS_NAME_MAX = 45  # LWS derives StatefulSet, pod and revision-label names from its own


@dataclasses.dataclass(frozen=True)
class Replica:
    """A ModelReplica as the builders see it: parsed spec plus what was read around it."""

    name: str
    namespace: str
    spec: ModelReplicaSpec
    provider_config: str
    deployment: str | None = None  # the parent ModelDeployment, from the MR's own label
    pvc_name: str | None = None  # the ModelCache's PVC, when modelCacheRef is set

    @property
    def prefill_decode(self) -> bool:
        return self.spec.serving.mode == "PrefillDecode"

    def resource_name(self, *parts: str, max_len: int = 63) -> str:
        """A DNS-1035 label unique to this replica (Services need a leading letter)."""
        name = names.dns_label(self.name, *parts, max_len=max_len)
        return name if name[:1].isalpha() else names.dns_label("mr", name, max_len=max_len)

    def selector(self) -> dict[str, str]:
        """Labels every pod of this replica carries, and nothing else's pods do."""
        return {labels.REPLICA: label_value(self.name)}

    def common_labels(self) -> dict[str, str]:
        out = self.selector()
        if self.deployment:
            out[labels.DEPLOYMENT] = label_value(self.deployment)
        return out

    def metadata(self, name: str, **extra_labels: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": {**self.common_labels(), **extra_labels},
        }


label_value = labels.value  # a label value (63 characters at most) standing for a name


def kubernetes_object(replica: Replica, manifest: dict[str, Any]) -> dict[str, Any]:
    """A provider-kubernetes Object putting ``manifest`` on the replica's cluster."""
    return {
        "apiVersion": OBJECT_API_VERSION,
        "kind": "Object",
        "spec": {
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": replica.provider_config},
            "forProvider": {"manifest": manifest},
        },
    }


def observed_manifest(obj: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest as provider-kubernetes last observed it on the cluster ({} if never)."""
    found: Any = obj
    for key in ("status", "atProvider", "manifest"):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else {}
