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
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import conditions, labels, names, weights, workload_cluster, xp
from plnt.models.model_cache import ModelCacheSpec, Source

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
WEIGHTS_STAGED = "WeightsStaged"
FAILED = "Failed"
CACHE_MOUNT = "/cache"
BACKOFF_LIMIT = 4
CACHE_LABEL = f"{labels.DOMAIN}/model-cache"


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)

    # --- inputs -------------------------------------------------------------------------------
    xr = xp.composite(req)
    meta = xr.get("metadata") or {}
    spec = xp.parse(ModelCacheSpec, xr.get("spec") or {}, "spec")
    name, namespace = meta["name"], meta.get("namespace") or "default"
    clusters = workload_cluster.pinned_cluster(req, rsp, spec.cluster_name)
    if clusters is None:
        return rsp
    status = (clusters[0].get("status") or {}) if clusters else {}
    provider_config = (status.get("providerConfigRef") or {}).get("name")

    # --- decisions ----------------------------------------------------------------------------
    if not clusters or not provider_config:
        why = "not found" if not clusters else "has no providerConfigRef yet"
        xp.set_conditions(
            rsp,
            conditions.waiting(
                WEIGHTS_STAGED,
                f"InferenceCluster {spec.cluster_name} {why}: nothing is composed until it is",
                reason=conditions.MISSING_DEPENDENCY,
            ),
        )
        xp.set_composite_ready(rsp, False)
        return rsp
    storage_class = spec.storage_class_name or (status.get("cache") or {}).get("storageClassName")
    pvc_name = names.dns_subdomain(name, "weights")
    observed = xp.observed_resources(req)

    # --- desired resources --------------------------------------------------------------------
    def obj(manifest: dict[str, Any], **extra: Any) -> dict[str, Any]:
        spec_ = {
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": provider_config},
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
    staged = int(job_status.get("succeeded") or 0) >= 1
    xp.compose(rsp, "job", obj(job), ready=staged)

    # --- status -------------------------------------------------------------------------------
    xp.set_status(rsp, {"pvcName": pvc_name})
    source = weights.display(spec.source.uri)  # no presigned query or user info in conditions
    failed = next(
        (c for c in job_status.get("conditions") or [] if c.get("type") == "Failed"), None
    )
    if staged:
        xp.set_conditions(
            rsp, conditions.available(WEIGHTS_STAGED, f"{source} staged in {pvc_name}")
        )
    elif failed and failed.get("status") == "True":
        message = f"Job {job['metadata']['name']} failed: {failed.get('reason', '')}".rstrip(": ")
        xp.set_conditions(rsp, conditions.waiting(WEIGHTS_STAGED, message, reason=FAILED))
    else:
        xp.set_conditions(
            rsp,
            conditions.waiting(
                WEIGHTS_STAGED, f"Job {job['metadata']['name']} is staging {source}"
            ),
        )
    return rsp


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
