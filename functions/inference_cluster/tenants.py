"""What the replicas of one namespace share on the cluster, composed once per namespace.

Every replica's endpoint picker runs as the namespace's ``plnt-endpoint-picker`` ServiceAccount,
bound by a RoleBinding in that namespace to the cluster's ``plnt-endpoint-picker`` ClusterRole
(read pods, InferencePools and the Inference Extension's objectives: in its own namespace only,
as a RoleBinding grants a ClusterRole's rules). The InferenceCluster composes the ClusterRole
once (while there is any namespace to bind it in) and, per namespace the binder publishes
(``plnt.workload_cluster.tenant_namespaces_of``), the Namespace (never deleted: a ModelCache or
other software may share it), the ServiceAccount and the RoleBinding; ``status.namespaces``
lists the namespaces whose three objects and the ClusterRole are observed Ready, which is what a
replica waits for before it composes.

A namespace the binder stops publishing (no ModelReplica there names the cluster any more) loses
its ServiceAccount and RoleBinding. The binder publishes a namespace before it binds the first
replica there, so a replica is never bound into a namespace whose objects are going away.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.inference_cluster.stack import KUBERNETES_API
from plnt import labels, workload_cluster, xp

CLUSTER_ROLE = "endpoint-picker-clusterrole"  # composition resource name
PARTS = ("namespace", "serviceaccount", "rolebinding")  # per namespace, in this order


def resource_name(namespace: str, part: str) -> str:
    return f"tenant-{namespace}-{part}"


def manifests(namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's shared objects, by part."""
    name = workload_cluster.ENDPOINT_PICKER
    meta = {"name": name, "namespace": namespace}
    return {
        "namespace": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        "serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        "rolebinding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    }


def cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": workload_cluster.ENDPOINT_PICKER},
        "rules": workload_cluster.endpoint_picker_rules(),
    }


def _object(cluster: str, namespace: str, suffix: str, manifest: dict[str, Any]) -> dict[str, Any]:
    readiness: dict[str, str] = {"policy": "SuccessfulCreate"}
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": "ClusterProviderConfig", "name": cluster},
    }
    if manifest["kind"] == "Namespace":
        readiness = {"policy": "DeriveFromCelQuery", "celQuery": 'object.status.phase == "Active"'}
        spec["managementPolicies"] = list(workload_cluster.KEEP_ON_DELETE)
    spec["readiness"] = readiness
    return {
        "apiVersion": KUBERNETES_API,
        "kind": "Object",
        "metadata": {
            "name": f"{cluster}-{suffix}",
            "namespace": namespace,
            "labels": {labels.INFERENCE_CLUSTER: labels.value(cluster)},
        },
        "spec": spec,
    }


def compose(
    rsp: fnv1.RunFunctionResponse,
    observed: dict[str, Any],
    cluster: str,
    namespace: str,
    tenants: tuple[str, ...],
) -> list[str]:
    """Composes the ClusterRole and each tenant namespace's objects (Objects in ``namespace``
    on the management cluster); returns the tenant namespaces whose objects are all Ready.
    None of them holds the cluster's own Ready: a namespace being prepared is no outage, and
    the scheduler reads the cluster's Ready."""
    if not tenants:
        return []  # nothing shared: not even the ClusterRole
    role_ready = xp.is_ready(observed.get(CLUSTER_ROLE))
    role = _object(cluster, namespace, workload_cluster.ENDPOINT_PICKER, cluster_role())
    xp.compose(rsp, CLUSTER_ROLE, role, ready=True)
    prepared = []
    for tenant in tenants:
        ready = role_ready
        for part, manifest in manifests(tenant).items():
            rname = resource_name(tenant, part)
            ready = ready and xp.is_ready(observed.get(rname))
            obj = _object(cluster, namespace, f"tenant-{tenant}-{part}", manifest)
            xp.compose(rsp, rname, obj, ready=True)
        if ready:
            prepared.append(tenant)
    return prepared
