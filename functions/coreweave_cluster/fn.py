"""function-coreweave-cluster: a CoreWeaveCluster as a CKS cluster with its node pools.

Reads: the CoreWeaveCluster (infrastructure.modelplane.ai/v1alpha1), the observed composed
resources and, once the cluster runs, the provider-coreweave (Cluster)ProviderConfig named
by spec.credentials and the Secret holding its CoreWeave API token (required resources).

Composes, in two stages:
  1. always: a provider-coreweave VPC with the pod, Service and internal load balancer
     prefixes, and a CKS Cluster in it at v<kubernetesVersion>;
  2. once the CKS Cluster is Ready (and from then on, even if it is briefly not): a kubeconfig
     Secret (endpoint + the ProviderConfig's API token), a provider-kubernetes ProviderConfig
     from it, and through that, as provider-kubernetes Objects, one CKS NodePool per pool, an
     observe-only view of CKS's shared-vast StorageClass, and a copy of it that deletes volumes
     with their claims.

Key choices:
  - A NodePool is named after its pool, verbatim (seed 004). CKS cannot change a pool's
    instance type, so the XRD refuses that change at admission (a transition rule on the
    name-keyed pool list); should such a spec reach the function anyway, the existing pool keeps
    its instance type and Provisioned says to add a pool under a new name. Nothing is ever
    deleted and recreated behind the user's back.
  - Stage 2 stays composed once the kubeconfig Secret exists: dropping it would delete every
    NodePool whenever the cluster flickers or the token cannot be read for a moment. The last
    good kubeconfig is kept instead.
  - The token goes only into the composed Secret; conditions and results name the objects
    involved, never their content.
  - Provisioned is True only when the VPC, the cluster, every pool and the StorageClass are
    ready; otherwise its message lists what is awaited.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.coreweave_cluster import credentials as creds
from functions.coreweave_cluster import resources as r
from plnt import conditions, xp
from plnt.models.coreweave_cluster import CoreWeaveClusterSpec, NodePool

# composition resource names
VPC = "vpc"
CLUSTER = "cluster"
KUBECONFIG = "kubeconfig"
PROVIDER_CONFIG = "provider-config"
SHARED_VAST = "shared-vast"
STORAGE_CLASS = "storage-class"


@dataclasses.dataclass
class Access:
    """How the function reaches the workload cluster, or why it cannot yet."""

    kubeconfig_b64: str | None = None
    problem: str = ""  # a missing dependency, safe to show
    waiting: str = ""  # something Crossplane is still resolving


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)

    # --- inputs
    xr = xp.composite(req)
    spec = xp.parse(CoreWeaveClusterSpec, xr.get("spec") or {}, "spec")
    meta = xr.get("metadata") or {}
    n = r.Names(xr=meta.get("name", ""), namespace=meta.get("namespace") or "default")
    observed = xp.observed_resources(req)
    provider_config_ref = {"kind": spec.credentials.type, "name": spec.credentials.name}

    # --- stage 1: VPC and CKS cluster
    vpc_ready = xp.is_ready(observed.get(VPC))
    endpoint = api_server_url(observed.get(CLUSTER))
    cluster_ready = xp.is_ready(observed.get(CLUSTER)) and endpoint is not None
    xp.compose(rsp, VPC, r.vpc(n, spec.zone, provider_config_ref), ready=vpc_ready)
    xp.compose(
        rsp,
        CLUSTER,
        r.cks_cluster(n, spec.zone, spec.kubernetes_version, provider_config_ref),
        ready=cluster_ready,
    )
    waiting = [what for what, ok in (("VPC", vpc_ready), ("CKS cluster", cluster_ready)) if not ok]

    # --- decisions: pools whose spec asks CKS for what it cannot do
    pools, refused = keep_instance_types(spec.pools(), observed)

    # --- stage 2: access to the cluster, then what lives inside it
    access = cluster_access(
        req, rsp, spec, n, observed=observed, cluster_ready=cluster_ready, endpoint=endpoint
    )
    status: dict[str, Any] = {"nodePools": pool_status(pools, observed)}
    if endpoint:
        status["endpoint"] = endpoint
    if access.waiting:
        waiting.append(access.waiting)

    if access.kubeconfig_b64 is not None:
        waiting += compose_inside(
            rsp, pools, n, observed, kubeconfig_b64=access.kubeconfig_b64, status=status
        )
    for i, pool in enumerate(spec.node_pools):
        if pool.autoscaled and pool.min_node_count == 0:
            xp.warning(rsp, f"spec.nodePools[{i}].minNodeCount 0 is raised to 1 (see the API docs)")

    for problem in refused:
        xp.warning(rsp, problem)

    # --- status
    xp.set_status(rsp, status)
    xp.set_conditions(rsp, provisioned_condition(refused, access, waiting))
    return rsp


def compose_inside(
    rsp: fnv1.RunFunctionResponse,
    pools: list[NodePool],
    n: r.Names,
    observed: dict[str, dict[str, Any]],
    *,
    kubeconfig_b64: str,
    status: dict[str, Any],
) -> list[str]:
    """Stage 2, once the cluster is reachable: what lives inside it (compose_in_cluster), its
    kubeconfig Secret and StorageClass in `status`; what it still waits for."""
    compose_in_cluster(rsp, pools, n, observed, kubeconfig_b64)
    status["secrets"] = [
        {"name": n.kubeconfig_secret, "key": r.KUBECONFIG_KEY, "type": "Kubeconfig"}
    ]
    waiting: list[str] = []
    unready_pools = [p["name"] for p in status["nodePools"] if not p["ready"]]
    if unready_pools:
        waiting.append(f"node pools: {', '.join(unready_pools)}")
    if STORAGE_CLASS in rsp.desired.resources:
        status["cache"] = {"storageClassName": r.MODEL_CACHE_STORAGE_CLASS}
    if not _ready(observed, STORAGE_CLASS):
        waiting.append(f"the {r.MODEL_CACHE_STORAGE_CLASS} StorageClass")
    return waiting


def provisioned_condition(refused: list[str], access: Access, waiting: list[str]) -> xp.Condition:
    """Provisioned: an invalid spec first, then a kubeconfig that cannot be built, then what it
    waits for."""
    if refused:
        return conditions.waiting(
            conditions.PROVISIONED, "; ".join(refused + waiting), conditions.INVALID_SPEC
        )
    if access.problem:
        return conditions.waiting(
            conditions.PROVISIONED,
            f"cannot build the kubeconfig: {access.problem}",
            conditions.MISSING_DEPENDENCY,
        )
    if waiting:
        message = "; ".join(f"waiting for {w}" for w in waiting)
        return conditions.waiting(conditions.PROVISIONED, message)
    return conditions.available(conditions.PROVISIONED, "CKS cluster and node pools ready")


# --- decisions -------------------------------------------------------------------------


def api_server_url(cluster: dict[str, Any] | None) -> str | None:
    """The CKS API server's URL from the observed Cluster (it reports a bare host name)."""
    at_provider = ((cluster or {}).get("status") or {}).get("atProvider") or {}
    host = at_provider.get("apiServerEndpoint")
    if not isinstance(host, str) or not host:
        return None
    return host if host.startswith("https://") else f"https://{host}"


def cluster_access(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    spec: CoreWeaveClusterSpec,
    n: r.Names,
    *,
    observed: dict[str, dict[str, Any]],
    cluster_ready: bool,
    endpoint: str | None,
) -> Access:
    """The kubeconfig to compose: fresh when the token is at hand, else the last good one."""
    previous = ((observed.get(KUBECONFIG) or {}).get("data") or {}).get(r.KUBECONFIG_KEY)
    if not cluster_ready and previous is None:
        return Access()  # stage 1 still running; nothing to look up yet
    token = creds.find_token(req, rsp, spec.credentials, n.namespace)
    if token.value and endpoint:
        return Access(kubeconfig_b64=r.encode(r.kubeconfig(n, endpoint, token.value)))
    if previous is not None:
        if not token.pending and token.problem:
            xp.warning(rsp, f"keeping the existing kubeconfig Secret: {token.problem}")
        return Access(kubeconfig_b64=previous)
    if token.pending:
        return Access(waiting=token.problem)
    return Access(problem=token.problem)


def _ready(observed: dict[str, dict[str, Any]], name: str) -> bool:
    return xp.is_ready(observed.get(name))


def _exists(observed: dict[str, dict[str, Any]], name: str) -> bool:
    return name in observed


def _observed_manifest(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """What provider-kubernetes last saw of an Object's manifest in the workload cluster."""
    manifest = (((obj or {}).get("status") or {}).get("atProvider") or {}).get("manifest")
    return manifest if isinstance(manifest, dict) else None


def pool_ready(obj: dict[str, Any] | None) -> bool:
    """The Object is Ready and, where we can see it, the NodePool reports AtTarget True."""
    if not xp.is_ready(obj):
        return False
    manifest = _observed_manifest(obj)
    if manifest is None or "status" not in manifest:
        return True
    at_target = xp.condition_of(manifest, "AtTarget")
    return bool(at_target and at_target.get("status") == "True")


def observed_target(obj: dict[str, Any] | None) -> int | None:
    """targetNodes of the NodePool as it is now (the autoscaler's choice), if observed."""
    manifest = _observed_manifest(obj)
    target = ((manifest or {}).get("spec") or {}).get("targetNodes")
    return target if isinstance(target, int) and not isinstance(target, bool) else None


def existing_instance_type(obj: dict[str, Any] | None) -> str | None:
    """The instance type of a pool's NodePool as it exists (last seen, else last asked for)."""
    for manifest in (
        _observed_manifest(obj),
        (((obj or {}).get("spec") or {}).get("forProvider") or {}).get("manifest"),
    ):
        value = ((manifest or {}).get("spec") or {}).get("instanceType")
        if isinstance(value, str) and value:
            return value
    return None


def keep_instance_types(
    pools: list[NodePool], observed: dict[str, dict[str, Any]]
) -> tuple[list[NodePool], list[str]]:
    """The pools to compose, and why any of them keeps its existing instance type.

    The XRD refuses an instance type change at admission; input that never passed admission
    (``crossplane render``, an XRD without the rule) is held here the same way, so a pool is
    never replaced behind the user's back.
    """
    out, refused = [], []
    for i, pool in enumerate(pools):
        existing = existing_instance_type(observed.get(r.node_pool_resource(pool)))
        if existing is None or existing == pool.instance_type:
            out.append(pool)
            continue
        out.append(pool.model_copy(update={"instance_type": existing}))
        refused.append(
            f"spec.nodePools[{i}].instanceType: node pool {pool.name} runs {existing}, and CKS "
            f"can't change an existing pool's instance type, so {pool.instance_type} is not "
            "applied: add a pool with it under a new name instead"
        )
    return out, refused


def pool_status(pools: list[NodePool], observed: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": pool.name,
            "nodePoolName": r.node_pool_name(pool),
            "instanceType": pool.instance_type,
            "ready": pool_ready(observed.get(r.node_pool_resource(pool))),
        }
        for pool in pools
    ]


# --- desired resources inside the cluster ------------------------------------------------


def compose_in_cluster(
    rsp: fnv1.RunFunctionResponse,
    pools: list[NodePool],
    n: r.Names,
    observed: dict[str, dict[str, Any]],
    kubeconfig_b64: str,
) -> None:
    xp.compose(
        rsp,
        KUBECONFIG,
        r.kubeconfig_secret(n, kubeconfig_b64),
        ready=_exists(observed, KUBECONFIG),
    )
    xp.compose(
        rsp,
        PROVIDER_CONFIG,
        r.kubernetes_provider_config(n),
        ready=_exists(observed, PROVIDER_CONFIG),
    )
    for pool in pools:
        name = r.node_pool_resource(pool)
        counts = r.node_counts(pool, observed_target(observed.get(name)))
        xp.compose(
            rsp, name, r.node_pool_object(n, pool, counts), ready=pool_ready(observed.get(name))
        )

    shared_vast = _observed_manifest(observed.get(SHARED_VAST))
    xp.compose(rsp, SHARED_VAST, r.shared_vast_observer(n), ready=shared_vast is not None)
    if shared_vast is not None:
        xp.compose(
            rsp,
            STORAGE_CLASS,
            r.model_cache_storage_class(n, shared_vast),
            ready=_ready(observed, STORAGE_CLASS),
        )
