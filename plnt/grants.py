"""What the platform grants a namespace (InferenceGrants), and the required resources the
ModelService and ModelEndpoint functions read it and the endpoint check from.

A namespace's grant is the union of every InferenceGrant whose ``namespaceSelector`` selects
it (by the Namespace's labels; ``kubernetes.io/metadata.name`` is always there). A grant whose
spec does not parse grants nothing. No grant: routes under ``/<namespace>/`` on
``plnt-system/plnt-gateway``, no hostnames, no internal networks, no other namespace's replicas.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import contracts, targets, xp
from plnt.capacity import admission
from plnt.models.inference_grant import InferenceGrantSpec
from plnt.models.model_service import DEFAULT_GATEWAY_NAME, DEFAULT_GATEWAY_NAMESPACE

GATEWAY_API = "gateway.networking.k8s.io/v1"
GRANTS_REQUIREMENT = "inference-grants"
NAMESPACE_REQUIREMENT = "namespace"
CLUSTERS_REQUIREMENT = "inference-clusters"
GATEWAYS_REQUIREMENT = "platform-gateways"
DEFAULT_GATEWAY = (DEFAULT_GATEWAY_NAMESPACE, DEFAULT_GATEWAY_NAME)


@dataclasses.dataclass(frozen=True)
class Grant:
    """The union of the InferenceGrants selecting one namespace."""

    paths: tuple[str, ...] = ()
    hostnames: tuple[str, ...] = ()
    gateways: frozenset[tuple[str, str]] = frozenset()  # (namespace, name)
    networks: tuple[targets.Network, ...] = ()
    replica_namespaces: frozenset[str] = frozenset()
    names: tuple[str, ...] = ()  # the InferenceGrants it comes from

    def allows_gateway(self, namespace: str, name: str) -> bool:
        return (namespace, name) == DEFAULT_GATEWAY or (namespace, name) in self.gateways


def grant_for(
    namespace: str, namespace_obj: Mapping[str, Any] | None, grants: Iterable[Mapping[str, Any]]
) -> Grant:
    labels = admission.namespace_labels(namespace_obj, namespace)
    paths: list[str] = []
    hostnames: list[str] = []
    gateways: set[tuple[str, str]] = set()
    networks: list[targets.Network] = []
    replicas: set[str] = set()
    names: list[str] = []
    for obj in sorted(grants, key=lambda g: str((g.get("metadata") or {}).get("name"))):
        try:
            spec = InferenceGrantSpec.model_validate(obj.get("spec") or {})
        except ValueError:
            continue  # fails closed: an invalid grant grants nothing (its own XR says why)
        if not spec.namespace_selector.matches(labels):
            continue
        names.append(str((obj.get("metadata") or {}).get("name")))
        paths += spec.routes.paths
        hostnames += spec.routes.hostnames
        gateways |= {(g.namespace, g.name) for g in spec.routes.gateways}
        networks += [ipaddress.ip_network(c, strict=False) for c in spec.endpoints.cidrs]
        replicas |= set(spec.endpoints.replica_namespaces)
    return Grant(
        tuple(paths),
        tuple(hostnames),
        frozenset(gateways),
        tuple(networks),
        frozenset(replicas),
        tuple(names),
    )


def require_grant(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, namespace: str
) -> Grant:
    """The namespace's grant, from its Namespace and every InferenceGrant (required)."""
    ns = xp.require(req, rsp, NAMESPACE_REQUIREMENT, "v1", "Namespace", match_name=namespace)
    found = xp.require(
        req, rsp, GRANTS_REQUIREMENT, contracts.MODELPLANE_API_VERSION, "InferenceGrant",
        match_labels={},
    )  # fmt: skip
    return grant_for(namespace, ns[0] if ns else None, found or [])


def require_policy(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    namespace: str,
    grant: Grant,
    urls: Iterable[str],
) -> targets.Policy:
    """The endpoint check's policy for ``namespace``: its grant, the platform's gateway hosts
    (every InferenceCluster's gateway address, every Gateway's addresses and listener hostnames
    in plnt-system) and which last labels of the endpoints' host names are Namespaces."""
    clusters = xp.require(
        req, rsp, CLUSTERS_REQUIREMENT, contracts.MODELPLANE_API_VERSION, "InferenceCluster",
        match_labels={},
    )  # fmt: skip
    gateways = xp.require(
        req, rsp, GATEWAYS_REQUIREMENT, GATEWAY_API, "Gateway",
        match_labels={}, namespace=DEFAULT_GATEWAY_NAMESPACE,
    )  # fmt: skip
    hosts = [_cluster_gateway(c) for c in clusters or []]
    for gw in gateways or []:
        hosts += gateway_hosts(gw)
    existing: set[str] = set()
    for label in sorted({_last_label(u) for u in urls} - {""}):
        found = xp.require(req, rsp, f"namespace-{label}", "v1", "Namespace", match_name=label)
        if found is None or found:  # not answered yet counts as there: it fails closed
            existing.add(label)
    return targets.Policy(
        namespace=namespace,
        networks=grant.networks,
        replica_namespaces=grant.replica_namespaces,
        gateways=targets.gateway_hosts(hosts),
        cluster_namespaces=frozenset(existing),
    )


def gateway_hosts(gateway: Mapping[str, Any]) -> list[str]:
    """A Gateway's status addresses and listener hostnames (wildcards left out)."""
    out = []
    addresses = xp.status_of(gateway).get("addresses")
    for address in addresses if isinstance(addresses, list) else []:
        value = address.get("value") if isinstance(address, dict) else None
        if isinstance(value, str):
            out.append(value)
    listeners = (gateway.get("spec") or {}).get("listeners")
    for listener in listeners if isinstance(listeners, list) else []:
        name = listener.get("hostname") if isinstance(listener, dict) else None
        if isinstance(name, str) and not name.startswith("*"):
            out.append(name)
    return out


def _cluster_gateway(cluster: Mapping[str, Any]) -> str:
    gateway = xp.status_of(cluster).get("gateway")
    address = gateway.get("address") if isinstance(gateway, dict) else None
    return address if isinstance(address, str) else ""


def _last_label(url: str) -> str:
    host = targets.normal_host(targets.host_of(url))
    if "." not in host or targets.ip_literal(host) is not None:
        return ""
    last = host.rsplit(".", 1)[1]
    return last if targets.NAMESPACE_NAME.fullmatch(last) else ""
