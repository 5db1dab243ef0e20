"""The in-cluster endpoint of a ModelService: a Service on port 8000 that reaches the route.

With ``spec.service.name`` a pod of the control-plane cluster reaches the model at
``http://<service>.<namespace>.svc.cluster.local:8000/v1``, the address shape of an engine's own
Service, while the model runs on workload clusters behind the control-plane Gateway:

- a selector-less Service ``<service>`` (port 8000, ``http``) and an EndpointSlice holding the
  Gateway's address and its HTTP listener's port, so the cluster's DNS and service proxy take
  the connection to the Gateway;
- an HTTPRoute on that Gateway matching the Service's in-cluster names (plnt.routes:
  ``<service>.<namespace>.svc.cluster.local`` and ``<service>.<namespace>.svc``) at ``/``, with
  the same weighted backends as the ModelService's own route, so the request reaches the same
  endpoints without the ``/<namespace>/<name>`` prefix.

The names are the namespace's own, so no grant is asked for; a Service, EndpointSlice or
HTTPRoute of those names that this ModelService does not control (a hand-made Service, another
ModelService's) is never taken over: nothing is composed for the endpoint and the condition
InClusterEndpoint names what holds it. A Gateway whose address is a host name (no IP for an
EndpointSlice) gets no in-cluster endpoint either, and the condition says so.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_service import backends
from plnt import conditions, routes, xp

PORT = 8000  # the seed's in-cluster port
SERVICE = "in-cluster-service"
SLICE = "in-cluster-endpointslice"
ROUTE = "in-cluster-route"
SERVICES_REQUIREMENT = "in-cluster-services"
SLICES_REQUIREMENT = "in-cluster-endpointslices"
NAME_TAKEN = "NameTaken"  # InClusterEndpoint reason: an object of the name is not this one's
GATEWAY_ADDRESS = "GatewayAddressNotIP"  # InClusterEndpoint reason
DEFAULT_LISTENER_PORT = 80


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the in-cluster endpoint composes, or why nothing: ``objects`` by composition resource
    name (empty when refused), the endpoint once it serves, and the condition."""

    objects: dict[str, dict[str, Any]]
    endpoint: str | None
    condition: xp.Condition


def route_name(service: str) -> str:
    return f"{service}.svc"


def endpoint_of(service: str, namespace: str) -> str:
    return f"{routes.in_cluster_hostnames(service, namespace)[0]}:{PORT}"


def require(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, service: str, namespace: str
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """The Service and EndpointSlice of the name, whoever made them (None until read)."""
    found = xp.require(
        req, rsp, SERVICES_REQUIREMENT, "v1", "Service", match_name=service, namespace=namespace
    )
    slices = xp.require(
        req,
        rsp,
        SLICES_REQUIREMENT,
        "discovery.k8s.io/v1",
        "EndpointSlice",
        match_name=service,
        namespace=namespace,
    )
    return found, slices


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(
        isinstance(ref, dict) and ref.get("controller") and ref.get("uid") == uid
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


def holder(
    uid: str,
    namespace: str,
    candidates: Iterable[tuple[str, dict[str, Any]]],
    seen: dict[str, dict[str, Any]],
) -> str | None:
    """The first ``Kind namespace/name`` of an existing object this ModelService may not take
    over: one it neither composed (observed) nor controls."""
    for key, obj in candidates:
        meta = obj.get("metadata") or {}
        if meta.get("namespace", namespace) != namespace:
            continue
        mine = (seen.get(key) or {}).get("metadata", {}).get("name") == meta.get("name")
        if not mine and not controlled_by(obj, uid):
            return f"{obj.get('kind')} {namespace}/{meta.get('name')}"
    return None


def gateway_ip(gateways: list[dict[str, Any]] | None) -> str | None:
    """The Gateway's first status address, if it is an IP address."""
    address = _first_address(gateways)
    try:
        ipaddress.ip_address(address or "")
    except ValueError:
        return None
    return address


def listener_port(gateways: list[dict[str, Any]] | None) -> int:
    """The port of the Gateway's first HTTP listener (80 if it declares none)."""
    for gw in gateways or []:
        listeners = (gw.get("spec") or {}).get("listeners")
        for listener in listeners if isinstance(listeners, list) else []:
            if not isinstance(listener, dict) or listener.get("protocol") != "HTTP":
                continue
            port = listener.get("port")
            if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
                return port
    return DEFAULT_LISTENER_PORT


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "ports": [{"name": "http", "port": PORT, "protocol": "TCP", "appProtocol": "http"}]
        },
    }


def endpoint_slice(name: str, address: str, port: int) -> dict[str, Any]:
    family = "IPv6" if ipaddress.ip_address(address).version == 6 else "IPv4"
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
        "addressType": family,
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP", "appProtocol": "http"}],
    }


@dataclasses.dataclass(frozen=True)
class Gateway:
    """The control-plane Gateway: its name and namespace, and the objects Crossplane found for
    it (None until it answered; empty when there is no such Gateway)."""

    ref: dict[str, str]
    found: list[dict[str, Any]] | None


def plan(
    *,
    name: str,
    namespace: str,
    uid: str,
    gateway: Gateway,
    backend_refs: list[dict[str, Any]],
    existing: Iterable[tuple[str, dict[str, Any]]],
    httproutes: list[dict[str, Any]],
    seen: dict[str, dict[str, Any]],
) -> Plan:
    """The in-cluster endpoint for Service ``name``: the objects, or the reason there are none.

    ``existing`` pairs each object of the three names that exists (read as required resources,
    and the HTTPRoutes of the namespace) with the composition resource name it would have."""
    hostnames = list(routes.in_cluster_hostnames(name, namespace))
    where = f"Service {namespace}/{name}"
    taken = holder(uid, namespace, existing, seen)
    if taken is not None:
        return Plan(
            {},
            None,
            conditions.waiting(
                conditions.IN_CLUSTER_ENDPOINT,
                f"{taken} exists and is not this ModelService's; it is never taken over, so "
                f"there is no in-cluster endpoint {endpoint_of(name, namespace)}",
                NAME_TAKEN,
            ),
        )
    ours = routes.Route(namespace, route_name(name), tuple(hostnames), ("/",), _created(seen))
    gw = (gateway.ref["namespace"], gateway.ref["name"])
    owner = routes.owner(ours, "/", routes.routes_on(gw, httproutes))
    if owner is not None:
        return Plan(
            {},
            None,
            conditions.waiting(
                conditions.IN_CLUSTER_ENDPOINT,
                f"HTTPRoute {owner.key} claims the in-cluster names of {where}",
                routes.ROUTE_CONFLICT,
            ),
        )
    if gateway.found is not None and not gateway.found:
        why = f"Gateway {gw[0]}/{gw[1]} not found"
        return Plan({}, None, conditions.waiting(conditions.IN_CLUSTER_ENDPOINT, why))
    address = gateway_ip(gateway.found)
    if address is None:
        said = _first_address(gateway.found)
        if said is None:
            why = f"Gateway {gw[0]}/{gw[1]} has no address yet"
            return Plan({}, None, conditions.waiting(conditions.IN_CLUSTER_ENDPOINT, why))
        return Plan(
            {},
            None,
            conditions.waiting(
                conditions.IN_CLUSTER_ENDPOINT,
                f"Gateway {gw[0]}/{gw[1]} has the address {said}, not an IP address an "
                "EndpointSlice can hold; use status.url",
                GATEWAY_ADDRESS,
            ),
        )
    objects = {
        SERVICE: service(name),
        SLICE: endpoint_slice(name, address, listener_port(gateway.found)),
        ROUTE: backends.http_route(route_name(name), gateway.ref, hostnames, "/", backend_refs),
    }
    serving = SERVICE in seen and SLICE in seen and _accepted(seen.get(ROUTE))
    endpoint = endpoint_of(name, namespace)
    if not serving:
        return Plan(
            objects,
            None,
            conditions.waiting(
                conditions.IN_CLUSTER_ENDPOINT,
                f"{where} and its route are being created for {endpoint}",
            ),
        )
    return Plan(
        objects,
        endpoint,
        conditions.available(
            conditions.IN_CLUSTER_ENDPOINT,
            f"{where} reaches the route through Gateway {gw[0]}/{gw[1]} at {address}: {endpoint}",
        ),
    )


def _created(seen: dict[str, dict[str, Any]]) -> str:
    created = ((seen.get(ROUTE) or {}).get("metadata") or {}).get("creationTimestamp")
    return created if isinstance(created, str) and created else routes.NEWEST


def _first_address(gateways: list[dict[str, Any]] | None) -> str | None:
    for gw in gateways or []:
        addresses = xp.status_of(gw).get("addresses")
        for address in addresses if isinstance(addresses, list) else []:
            value = address.get("value") if isinstance(address, dict) else None
            if isinstance(value, str) and value:
                return value
    return None


def _accepted(route: dict[str, Any] | None) -> bool:
    for parent in ((route or {}).get("status") or {}).get("parents") or []:
        for cond in parent.get("conditions") or []:
            if cond.get("type") == "Accepted" and cond.get("status") == "True":
                return True
    return False
