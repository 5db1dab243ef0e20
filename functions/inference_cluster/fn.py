"""InferenceCluster: a cluster of the fleet, its ProviderConfigs and its serving stack.

Also serves InferenceQuota (quota.py) and InferenceGrant (grant.py), the platform team's other
fleet-wide kinds: it checks them and composes nothing (the binder enforces a quota and writes its
status; the ModelService and ModelEndpoint functions read grants).

Reads: the InferenceCluster (XR); each node pool's InferenceClass (required by name); for
source Existing, the kubeconfig Secret (required by name and namespace); observed composed
resources (readiness, the CoreWeaveCluster's published Secret, the Gateway's address).

Composes:
- source CoreWeave: a CoreWeaveCluster named after the XR, in ``spec.cluster.coreweave.namespace``,
  one pool per node pool (instance and accelerator type from the class's CoreWeave
  provisioning; role GPU when the class has GPU devices, else CPU). Source Existing: nothing
  provisioned, the Secret is used as is.
- a provider-kubernetes and a provider-helm ClusterProviderConfig named after the XR, from the
  kubeconfig Secret.
- the serving stack (``stack.STACK``): provider-helm Releases and provider-kubernetes Objects
  in the same namespace as the cluster's Secret, each created only once what it needs is
  observed Ready; the NVIDIA DRA driver only when a pool's class claims NVIDIA GPUs via DRA.
- what the replicas of one namespace share (tenants.py): the endpoint picker's ClusterRole once,
  and per namespace the binder publishes its Namespace, ServiceAccount and RoleBinding;
  ``status.namespaces`` lists those in place.

Key choices:
- Nothing half-made: while a class is missing, a class cannot be provisioned on CoreWeave, or
  the Existing Secret is missing, nothing new is composed. What already exists is carried
  forward unchanged (never deleted by a transient mistake), and the XR is held not Ready with
  ``Provisioned`` False naming the missing thing. Once fixed, the whole set is composed from
  the spec in one response, so no partial CoreWeaveCluster is ever created.
- The ProviderConfigs and the first tier of the stack are composed from the start, before the
  cluster is up: the providers retry until the kubeconfig works, and Crossplane's Ready (what
  the scheduler reads) only turns True when every piece, and the Gateway's address, is there.
- Reachable: the binder probes the cluster's API server and publishes what it saw in the
  ``plnt.work/cluster-health`` annotation (plnt.cluster_health); while it does not answer, the
  XR is not Ready and ``Reachable`` False names what failed and since when.
- A component, once observed, stays composed even if something it needed turns unready, so a
  flapping controller never deletes the Gateway.
- A CKS pool keeps its instance type for life (seed 004): a class edited under a running pool
  leaves the pool as it runs, and ``Provisioned`` (reason ``InstanceTypeHeld``) says to add a
  pool under a new name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.inference_cluster import grant, quota, resources, stack, tenants
from plnt import cluster_health, conditions, contracts, workload_cluster, xp
from plnt.models import inference_class, inference_cluster
from plnt.models.inference_class import InferenceClassSpec
from plnt.models.inference_cluster import InferenceClusterSpec

COREWEAVE_CLUSTER = "coreweavecluster"  # composition resource names
PROVIDER_CONFIGS = {"kubernetes": "providerconfig-kubernetes", "helm": "providerconfig-helm"}
SECRET_REQUIREMENT = "kubeconfig-secret"  # noqa: S105 (a requirement name, not a secret)
INSTANCE_TYPE_HELD = "InstanceTypeHeld"  # Provisioned reason: a pool keeps its instance type


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)
    if xr.get("kind") == "InferenceQuota":
        return quota.run(rsp, xr)
    if xr.get("kind") == "InferenceGrant":
        return grant.run(rsp, xr)
    name = (xr.get("metadata") or {}).get("name", "")
    inference_cluster.check_name(name)
    spec = inference_cluster.parse(xr.get("spec"))
    observed = xp.observed_resources(req)

    # inputs: each pool's InferenceClass and, for Existing, the kubeconfig Secret
    classes = require_classes(req, rsp, spec)
    secret = require_existing_secret(req, rsp, spec)
    if classes is None or secret is None:
        xp.set_composite_ready(rsp, False)
        return rsp  # Crossplane calls again with what was asked for

    # decisions
    problems = class_problems(spec, classes) + source_problems(spec, classes, secret)
    gateway_address = stack.gateway_address(observed.get(stack.resource_name("gateway")))
    status: dict[str, Any] = {"gateway": {"address": gateway_address}, "pools": pool_status(spec)}
    if problems:
        hold(rsp, observed, status, name, problems)
        return rsp
    usable = {n: c for n, c in classes.items() if isinstance(c, InferenceClassSpec)}
    kubeconfig, namespace = kubeconfig_ref(spec, name, observed, secret)
    target = stack.Target(
        nvidia_gpu_pools=tuple(
            p.name for p in spec.node_pools if usable[p.class_name].needs_nvidia_dra_driver
        )
    )

    # desired resources
    out = Composed()
    if spec.cluster.coreweave is not None:
        compose_coreweave(rsp, observed, out, spec, usable, name=name, namespace=namespace)
    compose_provider_configs(rsp, observed, out, name, kubeconfig)
    out.waiting += compose_stack(
        rsp,
        observed,
        name=name,
        namespace=namespace,
        target=target,
        gateway_address=gateway_address,
    )
    prepared = tenants.compose(
        rsp, observed, name, namespace, workload_cluster.tenant_namespaces_of(xr)
    )

    # status
    status["providerConfigRef"] = {"name": name}
    status["namespaces"] = prepared
    xp.set_status(rsp, status)
    provisioned = provisioned_condition(spec, name, namespace, kubeconfig, out.cluster_ready)
    write_conditions(rsp, xr, out, provisioned, gateway_address)
    return rsp


@dataclasses.dataclass
class Composed:
    """What composing found: what the stack still waits for, the pools held at their instance
    type, whether the CoreWeaveCluster (if any) is ready."""

    waiting: list[str] = dataclasses.field(default_factory=list)
    held: list[str] = dataclasses.field(default_factory=list)
    cluster_ready: bool = True


def compose_coreweave(
    rsp: fnv1.RunFunctionResponse,
    observed: dict[str, Any],
    out: Composed,
    spec: InferenceClusterSpec,
    usable: dict[str, InferenceClassSpec],
    *,
    name: str,
    namespace: str,
) -> None:
    """The CoreWeaveCluster. CKS can't change a pool's instance type (the CoreWeaveCluster XRD
    refuses it): a class edited under a running pool keeps the pool as it is, and Provisioned
    says so."""
    assert spec.cluster.coreweave is not None
    cwc = resources.coreweave_cluster(name, spec.cluster.coreweave, spec, usable)
    out.held = resources.keep_instance_types(cwc, observed.get(COREWEAVE_CLUSTER), spec)
    for message in out.held:
        xp.warning(rsp, message)
    out.cluster_ready = xp.is_ready(observed.get(COREWEAVE_CLUSTER))
    xp.compose(rsp, COREWEAVE_CLUSTER, cwc, ready=out.cluster_ready)
    if not out.cluster_ready:
        out.waiting.append(f"CoreWeaveCluster {namespace}/{name}")


def compose_provider_configs(
    rsp: fnv1.RunFunctionResponse,
    observed: dict[str, Any],
    out: Composed,
    name: str,
    kubeconfig: resources.KubeconfigRef,
) -> None:
    """A ClusterProviderConfig per provider, over the cluster's kubeconfig Secret."""
    for provider, rname in PROVIDER_CONFIGS.items():
        pc_ready = kubeconfig.published and rname in observed
        xp.compose(
            rsp, rname, resources.provider_config(provider, name, kubeconfig), ready=pc_ready
        )
    if not kubeconfig.published:
        out.waiting.append(f"kubeconfig Secret {kubeconfig}")
    elif not all(r in observed for r in PROVIDER_CONFIGS.values()):
        out.waiting.append(f"ClusterProviderConfigs {name}")


def write_conditions(
    rsp: fnv1.RunFunctionResponse,
    xr: dict[str, Any],
    out: Composed,
    provisioned: xp.Condition,
    gateway_address: str,
) -> None:
    """Reachable (the binder's probe, with a Warning when not), Provisioned (InstanceTypeHeld
    while a pool keeps its instance type) and StackReady."""
    reachable = reachable_condition(xr)
    if reachable is not None:
        xp.set_conditions(rsp, reachable)
        if not reachable.status:
            xp.set_composite_ready(rsp, False)
            xp.warning(rsp, f"{reachable.reason}: {reachable.message}")
    if out.held:
        provisioned = conditions.waiting(
            conditions.PROVISIONED, "; ".join(out.held), INSTANCE_TYPE_HELD
        )
    xp.set_conditions(rsp, provisioned)
    if out.waiting:
        xp.set_conditions(
            rsp, conditions.waiting(conditions.STACK_READY, "waiting for " + "; ".join(out.waiting))
        )
    else:
        xp.set_conditions(
            rsp, conditions.available(conditions.STACK_READY, f"gateway at {gateway_address}")
        )


# --- inputs ---------------------------------------------------------------------------


def require_classes(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, spec: InferenceClusterSpec
) -> dict[str, InferenceClassSpec | str | None] | None:
    """Each class by name: its spec, None if missing, or why it is unusable; None until resolved."""
    out: dict[str, InferenceClassSpec | str | None] = {}
    resolved = True
    for class_name in sorted({p.class_name for p in spec.node_pools}):
        found = xp.require(
            req,
            rsp,
            f"inferenceclass-{class_name}",
            contracts.MODELPLANE_API_VERSION,
            "InferenceClass",
            match_name=class_name,
        )
        if found is None:
            resolved = False
            continue
        if not found:
            out[class_name] = None
            continue
        try:
            out[class_name] = inference_class.parse(found[0].get("spec"))
        except xp.InvalidInput as err:
            out[class_name] = str(err)
    return out if resolved else None


def require_existing_secret(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, spec: InferenceClusterSpec
) -> dict[str, Any] | None:
    """The Existing source's kubeconfig Secret ({} if missing or CoreWeave); None until resolved."""
    existing = spec.cluster.existing
    if existing is None:
        return {}
    ref = existing.secret_ref
    found = xp.require(
        req, rsp, SECRET_REQUIREMENT, "v1", "Secret", match_name=ref.name, namespace=ref.namespace
    )
    if found is None:
        return None
    return found[0] if found else {}


# --- decisions ------------------------------------------------------------------------


def class_problems(spec: InferenceClusterSpec, classes: dict[str, Any]) -> list[str]:
    """Missing or unusable classes, each naming the pool that uses it."""
    out = []
    for pool in spec.node_pools:
        cls = classes.get(pool.class_name)
        if cls is None:
            out.append(f'node pool "{pool.name}": InferenceClass "{pool.class_name}" not found')
        elif isinstance(cls, str):
            out.append(
                f'node pool "{pool.name}": InferenceClass "{pool.class_name}" is invalid ({cls})'
            )
    return out


def source_problems(
    spec: InferenceClusterSpec, classes: dict[str, Any], secret: dict[str, Any]
) -> list[str]:
    """What the source needs and lacks: CoreWeave provisioning per class, or the Existing Secret."""
    out = []
    if spec.cluster.coreweave is not None:
        for pool in spec.node_pools:
            cls = classes.get(pool.class_name)
            if not isinstance(cls, InferenceClassSpec):
                continue
            if cls.coreweave is None:
                out.append(
                    f'node pool "{pool.name}": InferenceClass "{pool.class_name}" has no CoreWeave '
                    "provisioning (spec.provisioning.coreweave)"
                )
            elif cls.has_gpu and not cls.coreweave.accelerator_type:
                out.append(
                    f'node pool "{pool.name}": InferenceClass "{pool.class_name}" has GPU '
                    "devices but no spec.provisioning.coreweave.acceleratorType"
                )
    if spec.cluster.existing is not None:
        ref = spec.cluster.existing.secret_ref
        if not secret:
            out.append(f'kubeconfig Secret "{ref.namespace}/{ref.name}" not found')
        elif ref.key not in (secret.get("data") or {}) and ref.key not in (
            secret.get("stringData") or {}
        ):
            out.append(f'kubeconfig Secret "{ref.namespace}/{ref.name}" has no key "{ref.key}"')
    return out


def kubeconfig_ref(
    spec: InferenceClusterSpec, name: str, observed: dict[str, Any], secret: dict[str, Any]
) -> tuple[resources.KubeconfigRef, str]:
    """Where the kubeconfig is, and the namespace everything namespaced is composed in."""
    if spec.cluster.coreweave is not None:
        namespace = spec.cluster.coreweave.namespace
        ref = resources.coreweave_kubeconfig_ref(name, namespace, observed.get(COREWEAVE_CLUSTER))
        return ref, namespace
    assert spec.cluster.existing is not None
    s = spec.cluster.existing.secret_ref
    return resources.KubeconfigRef(s.name, s.namespace, s.key, published=bool(secret)), s.namespace


def pool_status(spec: InferenceClusterSpec) -> list[dict[str, Any]]:
    return [
        {"name": p.name, "className": p.class_name, "nodeCapacity": p.node_capacity}
        for p in spec.node_pools
    ]


# --- desired resources ----------------------------------------------------------------


def compose_stack(
    rsp: fnv1.RunFunctionResponse,
    observed: dict[str, Any],
    *,
    name: str,
    namespace: str,
    target: stack.Target,
    gateway_address: str,
) -> list[str]:
    """Composes each stack component whose needs are Ready (or that exists); returns what waits."""
    waiting = []
    for component in stack.components(with_gpu=bool(target.nvidia_gpu_pools)):
        rname = stack.resource_name(component)
        unmet = [
            n
            for n in stack.STACK[component].needs
            if not xp.is_ready(observed.get(stack.resource_name(n)))
        ]
        if unmet and rname not in observed:
            waiting.append(f"{component} (after {', '.join(unmet)})")
            continue
        ready = xp.is_ready(observed.get(rname))
        if component == "gateway" and not gateway_address:
            ready = False
            waiting.append("gateway address")
        elif not ready:
            waiting.append(component)
        manifest = stack.component(name, namespace, component, target)
        xp.compose(rsp, rname, manifest, ready=ready)
    return waiting


def hold(
    rsp: fnv1.RunFunctionResponse,
    observed: dict[str, Any],
    status: dict[str, Any],
    name: str,
    problems: list[str],
) -> None:
    """Blocked by bad input: compose nothing new, keep what exists, say what is missing."""
    for rname, obj in observed.items():
        xp.compose(rsp, rname, resources.desired_from_observed(obj), ready=xp.is_ready(obj))
    if all(r in observed for r in PROVIDER_CONFIGS.values()):
        status["providerConfigRef"] = {"name": name}
    xp.set_status(rsp, status)
    xp.set_composite_ready(rsp, False)
    message = "; ".join(problems)
    xp.set_conditions(
        rsp,
        conditions.waiting(conditions.PROVISIONED, message, conditions.MISSING_DEPENDENCY),
        conditions.waiting(
            conditions.STACK_READY, "blocked: " + message, conditions.MISSING_DEPENDENCY
        ),
    )
    xp.warning(rsp, message)


def reachable_condition(xr: dict[str, Any]) -> xp.Condition | None:
    """Reachable, from the health the binder published on the XR (plnt.cluster_health): False
    naming what failed while its API server does not answer, which makes the cluster not Ready
    (new replicas go elsewhere, its replicas' endpoints leave the routes); None when no binder
    has probed it."""
    record = cluster_health.record_of(xr)
    if record is None:
        return None
    if record.reachable:
        return xp.Condition(
            conditions.REACHABLE, True, cluster_health.REACHABLE,
            f"the API server answers /readyz (since {record.since})",
        )  # fmt: skip
    return xp.Condition(
        conditions.REACHABLE, False, record.reason or cluster_health.UNREACHABLE_REASON,
        f"the API server has not answered since {record.since}: {record.message}",
    )  # fmt: skip


def provisioned_condition(
    spec: InferenceClusterSpec,
    name: str,
    namespace: str,
    kubeconfig: resources.KubeconfigRef,
    cluster_ready: bool,
) -> xp.Condition:
    if spec.cluster.existing is not None:
        return conditions.available(
            conditions.PROVISIONED, f"existing cluster, kubeconfig Secret {kubeconfig}"
        )
    if cluster_ready and kubeconfig.published:
        return conditions.available(
            conditions.PROVISIONED,
            f"CoreWeaveCluster {namespace}/{name}, kubeconfig Secret {kubeconfig}",
        )
    return conditions.waiting(
        conditions.PROVISIONED, f"waiting for CoreWeaveCluster {namespace}/{name}"
    )
