"""Gateway API backends for ModelEndpoints that live outside the control-plane cluster.

Gateway API routes to Services, so each endpoint gets a Service in the ModelService's
namespace that stands for it:

- a DNS host becomes a Service of ``type: ExternalName`` (the gateway resolves the name);
- an IP address (ExternalName cannot hold one) becomes a selector-less Service plus an
  EndpointSlice with that address, which every implementation routes to.

Per backendRef a ``URLRewrite`` filter replaces the ModelService path prefix with the
endpoint's own path and, for a DNS host, sets the Host header to it (virtual-hosted
providers and TLS SNI need it). An ``https`` endpoint also gets a BackendTLSPolicy so the
gateway originates TLS and verifies the host's certificate against the system CAs.

Which hosts may become a backend at all is plnt.targets' to say (the ModelService function asks
it before anything here is built).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from plnt import names
from plnt.models.model_endpoint import target

GATEWAY_API = "gateway.networking.k8s.io/v1"


def backend_name(service: str, endpoint: str) -> str:
    """A DNS-1035 Service name (it must start with a letter) per (ModelService, endpoint)."""
    return names.dns_label("ep", service, endpoint)


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def backend_objects(
    name: str, url: str, rewrite_path: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """(composition resource suffix, object) for the Service(s) standing for one endpoint."""
    scheme, host, port, _ = target(url, rewrite_path)
    port_spec = {"name": scheme, "port": port, "protocol": "TCP", "appProtocol": scheme}
    out: list[tuple[str, dict[str, Any]]]
    svc: dict[str, Any]
    if not is_ip(host):
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": "ExternalName", "externalName": host, "ports": [port_spec]},
        }
        out = [("service", svc)]
    else:
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": [port_spec]},
        }
        family = "IPv6" if ipaddress.ip_address(host).version == 6 else "IPv4"
        slice_: dict[str, Any] = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": family,
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
            "ports": [{"name": scheme, "port": port, "protocol": "TCP", "appProtocol": scheme}],
        }
        out = [("service", svc), ("endpointslice", slice_)]
    if scheme == "https":
        out.append(("tls", backend_tls_policy(name, host)))
    return out


def backend_tls_policy(name: str, host: str) -> dict[str, Any]:
    return {
        "apiVersion": GATEWAY_API,
        "kind": "BackendTLSPolicy",
        "metadata": {"name": name},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": name}],
            "validation": {"hostname": host, "wellKnownCACertificates": "System"},
        },
    }


def backend_ref(name: str, url: str, rewrite_path: str | None, weight: int) -> dict[str, Any]:
    _, host, port, path = target(url, rewrite_path)
    rewrite: dict[str, Any] = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": path}}
    if not is_ip(host):  # Gateway API hostnames are DNS names; an IP keeps the Host header
        rewrite["hostname"] = host
    return {
        "group": "",
        "kind": "Service",
        "name": name,
        "port": port,
        "weight": weight,
        "filters": [{"type": "URLRewrite", "urlRewrite": rewrite}],
    }


def http_route(
    name: str,
    gateway: dict[str, str],
    hostnames: list[str],
    path: str,
    backend_refs: list[dict[str, Any]],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "name": gateway["name"],
                "namespace": gateway["namespace"],
            }
        ],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": backend_refs,
            }
        ],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": spec,
    }
