"""What every function composing onto a workload cluster shares: how plnt's pods get past the
taints plnt puts on its pools, and which objects a delete must leave alone.

Taints: CoreWeaveCluster taints GPU pools ``modelplane.ai/gpu`` and CPU pools
``modelplane.ai/cpu`` (seed 004), and GPU nodes elsewhere commonly carry ``nvidia.com/gpu``
(NVIDIA's GPU operator, managed node groups). A cluster may have no untainted node at all (the
seed's cluster is one GPU pool), so the serving stack plnt runs there tolerates all three; a pod
that must land on one pool says so with its nodeSelector or affinity, never with a toleration.
A pod that needs no device and runs beside every replica (the endpoint picker) must not take
room on a GPU node: it runs on a CPU or System pool only (`cpu_pool_placement`).

The cluster itself: a function composing onto one pinned cluster asks for its InferenceCluster
(`pinned_cluster`) under one requirement name.

Tenant namespaces: what every replica of one namespace on one cluster shares (the Namespace,
and the endpoint picker's ServiceAccount and RoleBinding to the cluster's `plnt-endpoint-picker`
ClusterRole) is composed once, by the cluster's InferenceCluster, for the namespaces the binder
publishes in the cluster's ``plnt.work/tenant-namespaces`` annotation: those with a ModelReplica
naming the cluster that the cluster's fence admits. The InferenceCluster lists in
``status.namespaces`` those whose objects are there, and a replica composes nothing until its
namespace is listed. Only the platform writes an InferenceCluster (it is cluster-scoped), so a
tenant cannot name a namespace here.

Deletes: a Namespace or CRD on a workload cluster may be shared with other replicas or other
software, or may have existed before plnt (an Existing cluster can be the management cluster
itself). Objects carrying one are composed with :data:`KEEP_ON_DELETE`: created and updated,
never deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import contracts, labels, xp

POOL_TAINTS = (labels.GPU, "nvidia.com/gpu", labels.CPU)
# Crossplane management policies without Delete: deleting the composite orphans the object.
KEEP_ON_DELETE = ["Observe", "Create", "Update", "LateInitialize"]


def pool_tolerations() -> list[dict[str, Any]]:
    """Tolerations (any effect) for every taint plnt's pools may carry."""
    return [{"key": key, "operator": "Exists"} for key in POOL_TAINTS]


# Taints of the pools a pod that needs no device may run on (GPU pools' taints are not among
# them), and the node labels those pools carry: a CPU pool (`modelplane.ai/cpu`, labelled and
# tainted) or the untainted System pool (`modelplane.ai/system`).
CPU_POOL_TAINTS = (labels.CPU,)
CPU_POOL_LABELS = (labels.SYSTEM, labels.CPU)


def cpu_pool_placement() -> dict[str, Any]:
    """Pod spec fields that keep a pod off every GPU node: a required node affinity on a CPU
    or System pool's label (terms are ORed) and tolerations of the CPU pools' taint only."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": key, "operator": "In", "values": ["true"]}]}
                        for key in CPU_POOL_LABELS
                    ]
                }
            }
        },
        "tolerations": [{"key": key, "operator": "Exists"} for key in CPU_POOL_TAINTS],
    }


CLUSTER_REQUIREMENT = "inference-cluster"


def pinned_cluster(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, name: str
) -> list[dict[str, Any]] | None:
    """Requires the InferenceCluster named `name`; what Crossplane resolved, None if not yet."""
    return xp.require(
        req,
        rsp,
        CLUSTER_REQUIREMENT,
        contracts.MODELPLANE_API_VERSION,
        "InferenceCluster",
        match_name=name,
    )


TENANT_NAMESPACES = "plnt.work/tenant-namespaces"  # annotation on an InferenceCluster
ENDPOINT_PICKER = "plnt-endpoint-picker"  # its ServiceAccount, RoleBinding and ClusterRole
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def tenant_namespaces_value(namespaces: Iterable[str]) -> str:
    """The annotation's value: the namespaces, sorted, comma-separated."""
    return ",".join(sorted(set(namespaces)))


def tenant_namespaces_of(cluster: Mapping[str, Any]) -> tuple[str, ...]:
    """The namespaces the binder published on an InferenceCluster, sorted; anything that is not
    a namespace name is left out."""
    annotations = (cluster.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(TENANT_NAMESPACES)
    if not isinstance(value, str):
        return ()
    return tuple(sorted({n for n in value.split(",") if _DNS_LABEL.match(n)}))


def prepared_namespaces(cluster_status: Mapping[str, Any]) -> set[str]:
    """The namespaces whose shared objects an InferenceCluster reports in place."""
    listed = cluster_status.get("namespaces")
    return {n for n in listed if isinstance(n, str)} if isinstance(listed, list) else set()


def endpoint_picker_rules() -> list[dict[str, Any]]:
    """What an endpoint picker reads in its namespace: the pods, the InferencePools and the
    Inference Extension's objectives and rewrites."""
    read = ["get", "list", "watch"]
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": read,
        },
        {
            "apiGroups": ["inference.networking.x-k8s.io"],
            "resources": ["inferenceobjectives", "inferencemodelrewrites"],
            "verbs": read,
        },
    ]
