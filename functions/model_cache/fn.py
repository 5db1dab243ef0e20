"""ModelCache: a model's weights staged into a ReadWriteMany PVC on an InferenceCluster.

Reads the ModelCache and the InferenceCluster named by ``spec.clusterName`` (required
resource: ``status.providerConfigRef.name`` reaches the cluster; ``status.cache.storageClassName``,
when the cluster reports one, is the default StorageClass). Composes provider-kubernetes
Objects in the cache's namespace on that cluster: the Namespace (never deleted), the PVC
(ReadWriteMany) and a Job that downloads the weights into it with a downloader per URI
scheme (``plnt.weights.DOWNLOADERS``, shared with ModelReplica's weights init container). The
source reaches the script only through environment variables, so a URI can never inject
shell. The Job's name carries a hash of the source: a new URI stages afresh instead of
editing an immutable Job. Ready (and ``WeightsStaged`` True) once the Job
has succeeded; ``status.pvcName`` names the claim ModelReplicas mount.

Tenancy (docs/tenancy.md, "Caches"): a cache claims storage on a cluster as a replica claims
devices, so it is held to the same rules. It requires its Namespace (labels) and the binder's
quota ledgers; it composes only when the cluster's fence admits its namespace (the check the
scheduler and the binder make, plnt.capacity.admission) and every InferenceQuota capping cache
storage in its namespace has reserved exactly its size there. Otherwise ``WeightsStaged`` is False
with the reason (``NamespaceNotAdmitted``, ``InsufficientQuota``, ``AwaitingReservation``) and a
Warning, nothing new is composed, and what it composed before is kept exactly as observed (a
volume replicas mount is never deleted by a fence or quota changed under it, nor grown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import conditions, labels, names, weights, workload_cluster, xp
from plnt.capacity import admission, ledger_parse, quotas
from plnt.models.model_cache import ModelCacheSpec, Source

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
WEIGHTS_STAGED = "WeightsStaged"
FAILED = "Failed"
CACHE_MOUNT = "/cache"
BACKOFF_LIMIT = 4
CACHE_LABEL = f"{labels.DOMAIN}/model-cache"
NAMESPACE_REQUIREMENT = "namespace"
# WeightsStaged reasons while tenancy holds the cache back
NOT_ADMITTED = "NamespaceNotAdmitted"
INSUFFICIENT_QUOTA = "InsufficientQuota"
AWAITING_RESERVATION = "AwaitingReservation"
QUOTA_UNKNOWN = "QuotaUnknown"


@dataclass(frozen=True)
class Inputs:
    """The cache, its cluster, its Namespace and the quota ledgers, as required."""

    meta: dict[str, Any]
    spec: ModelCacheSpec
    namespace: str
    cluster: dict[str, Any] | None  # None: no such InferenceCluster
    namespace_obj: dict[str, Any] | None
    quota_ledgers: list[dict[str, Any]]

    @property
    def cluster_status(self) -> dict[str, Any]:
        return dict((self.cluster or {}).get("status") or {})

    @property
    def provider_config(self) -> str | None:
        return (self.cluster_status.get("providerConfigRef") or {}).get("name")


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Inputs, then the decisions (a reachable cluster, tenancy), then the desired Namespace,
    PVC and Job, then status."""
    rsp = xp.respond(req)
    inputs = read_inputs(req, rsp)
    if inputs is None:
        return rsp
    if inputs.cluster is None or not inputs.provider_config:
        why = "not found" if inputs.cluster is None else "has no providerConfigRef yet"
        xp.set_conditions(
            rsp,
            conditions.waiting(
                WEIGHTS_STAGED,
                f"InferenceCluster {inputs.spec.cluster_name} {why}: nothing is composed until "
                "it is",
                reason=conditions.MISSING_DEPENDENCY,
            ),
        )
        xp.set_composite_ready(rsp, False)
        return rsp
    observed = xp.observed_resources(req)
    held_back = tenancy_hold(
        inputs.cluster,
        inputs.spec,
        inputs.meta,
        inputs.namespace,
        namespace_obj=inputs.namespace_obj,
        quota_ledgers=inputs.quota_ledgers,
    )
    if held_back is not None:
        hold(rsp, observed, *held_back)
        return rsp
    pvc_name = names.dns_subdomain(inputs.meta["name"], "weights")
    job, job_status = compose(rsp, inputs, observed, pvc_name)
    xp.set_status(rsp, {"pvcName": pvc_name})
    xp.set_conditions(rsp, staged_condition(inputs.spec, job, job_status, pvc_name))
    return rsp


def read_inputs(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> Inputs | None:
    """None until Crossplane has answered every requirement."""
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    spec = xp.parse(ModelCacheSpec, xr.get("spec") or {}, "spec")
    namespace = meta.get("namespace") or "default"
    clusters = workload_cluster.pinned_cluster(req, rsp, spec.cluster_name)
    ns = xp.require(req, rsp, NAMESPACE_REQUIREMENT, "v1", "Namespace", match_name=namespace)
    quota_ledgers = ledger_parse.require_quota_ledgers(req, rsp)
    if clusters is None or ns is None or quota_ledgers is None:
        return None
    return Inputs(
        meta=meta,
        spec=spec,
        namespace=namespace,
        cluster=clusters[0] if clusters else None,
        namespace_obj=ns[0] if ns else None,
        quota_ledgers=quota_ledgers,
    )


def hold(rsp: fnv1.RunFunctionResponse, observed: dict[str, Any], reason: str, why: str) -> None:
    """Tenancy holds the cache back: nothing new, what it composed kept, a Warning."""
    keep_as_observed(rsp, observed)
    kept = " (what it composed is kept as it is)" if observed else ""
    xp.set_conditions(
        rsp, conditions.waiting(WEIGHTS_STAGED, f"{why}: nothing new is composed{kept}", reason)
    )
    xp.warning(rsp, f"{reason}: {why}")
    xp.set_composite_ready(rsp, False)


def compose(
    rsp: fnv1.RunFunctionResponse, inputs: Inputs, observed: dict[str, Any], pvc_name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Namespace, the PVC and the staging Job on the cluster; the Job and its observed
    status."""
    spec, name, namespace = inputs.spec, inputs.meta["name"], inputs.namespace
    storage_class = spec.storage_class_name or (inputs.cluster_status.get("cache") or {}).get(
        "storageClassName"
    )

    def obj(manifest: dict[str, Any], **extra: Any) -> dict[str, Any]:
        spec_ = {
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": inputs.provider_config},
            "forProvider": {"manifest": manifest},
            **extra,
        }
        return {"apiVersion": OBJECT_API_VERSION, "kind": "Object", "spec": spec_}

    namespace_manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    xp.compose(
        rsp,
        "namespace",
        obj(namespace_manifest, managementPolicies=workload_cluster.KEEP_ON_DELETE),
        ready=xp.is_ready(observed.get("namespace")),
    )
    pvc = persistent_volume_claim(name, namespace, pvc_name, spec, storage_class)
    xp.compose(rsp, "pvc", obj(pvc), ready=xp.is_ready(observed.get("pvc")))
    job = staging_job(name, namespace, pvc_name, spec.source)
    job_status = observed_status(observed.get("job"))
    xp.compose(rsp, "job", obj(job), ready=_staged(job_status))
    return job, job_status


def _staged(job_status: dict[str, Any]) -> bool:
    return int(job_status.get("succeeded") or 0) >= 1


def staged_condition(
    spec: ModelCacheSpec, job: dict[str, Any], job_status: dict[str, Any], pvc_name: str
) -> xp.Condition:
    """WeightsStaged: True once the Job succeeded, Failed when it failed, else staging."""
    source = weights.display(spec.source.uri)  # no presigned query or user info in conditions
    failed = next(
        (c for c in job_status.get("conditions") or [] if c.get("type") == "Failed"), None
    )
    if _staged(job_status):
        return conditions.available(WEIGHTS_STAGED, f"{source} staged in {pvc_name}")
    if failed and failed.get("status") == "True":
        message = f"Job {job['metadata']['name']} failed: {failed.get('reason', '')}".rstrip(": ")
        return conditions.waiting(WEIGHTS_STAGED, message, reason=FAILED)
    return conditions.waiting(WEIGHTS_STAGED, f"Job {job['metadata']['name']} is staging {source}")


def tenancy_hold(
    cluster: dict[str, Any],
    spec: ModelCacheSpec,
    meta: dict[str, Any],
    namespace: str,
    *,
    namespace_obj: dict[str, Any] | None,
    quota_ledgers: list[dict[str, Any]],
) -> tuple[str, str] | None:
    """(reason, why) tenancy keeps the cache from claiming storage on its cluster, or None:
    the cluster's fence, then every quota capping cache storage in the namespace."""
    fence = (cluster.get("spec") or {}).get("namespaceSelector")
    if not admission.admits(fence, admission.namespace_labels(namespace_obj, namespace)):
        return NOT_ADMITTED, admission.fence_message(spec.cluster_name, namespace)
    held, unreadable = ledger_parse.quota_ledgers_in(quota_ledgers)
    if unreadable:
        return QUOTA_UNKNOWN, "cannot tell whether its storage is reserved: " + "; ".join(
            u.message for u in unreadable
        )
    size = quotas.cache_bytes(spec.size)
    why = quotas.cache_unreserved(
        held,
        namespace,
        meta["name"],
        uid=meta.get("uid", "") or "",
        digest=quotas.cache_digest(spec.cluster_name, size),
        size=size,
    )
    if not why:
        return None
    return (AWAITING_RESERVATION if why.startswith("awaiting") else INSUFFICIENT_QUOTA), why


def keep_as_observed(rsp: fnv1.RunFunctionResponse, observed: dict[str, dict[str, Any]]) -> None:
    """Desires every composed Object again exactly as observed (Crossplane deletes what a
    function stops returning): held back, a cache neither loses nor changes its volume."""
    for name, seen in observed.items():
        if (seen.get("apiVersion"), seen.get("kind")) != (OBJECT_API_VERSION, "Object"):
            continue
        out: dict[str, Any] = {"apiVersion": OBJECT_API_VERSION, "kind": "Object"}
        if (seen.get("metadata") or {}).get("name"):
            out["metadata"] = {"name": seen["metadata"]["name"]}
        out["spec"] = seen.get("spec") or {}
        xp.compose(rsp, name, out, ready=xp.is_ready(seen))


def observed_status(obj: dict[str, Any] | None) -> dict[str, Any]:
    manifest = (((obj or {}).get("status") or {}).get("atProvider") or {}).get("manifest") or {}
    return manifest.get("status") or {}


def persistent_volume_claim(
    name: str, namespace: str, pvc_name: str, spec: ModelCacheSpec, storage_class: str | None
) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": spec.size}},
    }
    if storage_class:
        claim["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc_name,
            "namespace": namespace,
            "labels": {CACHE_LABEL: labels.value(name)},
        },
        "spec": claim,
    }


def source_env(source: Source) -> list[dict[str, str]]:
    """What the downloader script reads: the location, the cache mount, for hf:// repo and
    revision."""
    return weights.source_env(source.uri, CACHE_MOUNT)


def staging_job(name: str, namespace: str, pvc_name: str, source: Source) -> dict[str, Any]:
    downloader = weights.DOWNLOADERS[source.scheme]
    job_name = names.dns_label(name, "stage", names.short_hash(source.uri, length=8))
    container: dict[str, Any] = {
        "name": "stage",
        "image": downloader.image,
        "command": downloader.command,
        "env": source_env(source),
        "volumeMounts": [{"name": "weights", "mountPath": CACHE_MOUNT}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
    if source.secret_name:
        container["envFrom"] = [{"secretRef": {"name": source.secret_name}}]
    pod_labels = {CACHE_LABEL: labels.value(name)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "labels": pod_labels},
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [container],
                    # stage on whatever node is free
                    "tolerations": workload_cluster.pool_tolerations(),
                    "volumes": [
                        {"name": "weights", "persistentVolumeClaim": {"claimName": pvc_name}}
                    ],
                },
            },
        },
    }
