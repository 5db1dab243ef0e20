"""Where a ModelEndpoint may send the platform's gateway: the one check the ModelEndpoint and
ModelService functions share.

A ModelService turns each endpoint into a Service (ExternalName or EndpointSlice) the
control-plane gateway forwards to, so an endpoint's host is where the platform's own proxy
sends a tenant's requests (the CVE-2021-25740 class). Refused, after the host is normalised the
way resolvers and URL parsers read it:

- IP addresses inside the platform: private (RFC 1918, unique-local), shared (CGNAT), loopback,
  link-local (cloud metadata), unspecified, multicast and reserved ranges; IPv4 addresses
  hidden in IPv6 (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are unwrapped first; a
  network an InferenceGrant lists for the namespace is let through;
- IPv4 written any other way than canonical dotted decimal (``2852039166``, ``0251.0376.0.1``,
  ``0xa9fea9fe``, ``127.1``): resolvers read those as addresses, so they are refused whatever
  they mean;
- in-cluster names: single labels and names ending in a Namespace of the control plane or a
  Kubernetes namespace (the cluster's DNS search domains complete ``kubernetes.default`` or
  ``plnt-reconciler.plnt-system`` to Services), ``*.svc``, ``*.cluster.local``, ``*.pod``,
  ``localhost``, ``*.localhost``, ``*.local``; and the clouds' metadata and internal host names
  (``metadata.google.internal``, ``*.ec2.internal``, ...);
- the platform's own gateways (every InferenceCluster's gateway and the control-plane
  Gateways) are targets only for a path under ``/<namespace>/`` of the endpoint's own
  namespace or one an InferenceGrant lists (``endpoints.replicaNamespaces``): behind them are
  every namespace's replicas and routes, and a replica's GPUs are its namespace's.

The check is offline (a function does no I/O): a public DNS name that resolves to a private
address is not caught here (docs/tenancy.md says what covers it).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Iterable

from plnt.models.model_endpoint import target, usable_host

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

INTERNAL_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (CGNAT; pod networks use it)
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local: cloud metadata
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "100::/64",  # discard-only
        "fc00::/7",  # unique-local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, still routed by some stacks)
        "ff00::/8",  # multicast
    )
)
# Namespaces every Kubernetes cluster has, and plnt's: their Services are in-cluster names even
# where the Namespace is not among those the function was given.
KUBERNETES_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "plnt-system"}
)
IN_CLUSTER_SUFFIXES = (".svc", ".cluster.local", ".pod", ".localhost", ".local")
METADATA_NAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
# The clouds' internal DNS zones: names there resolve to the VPC's private addresses.
CLOUD_INTERNAL = re.compile(
    r"(^|\.)(google\.internal|ec2\.internal|compute\.internal)$|(^|\.)c\.[^.]+\.internal$"
)
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_EMBEDDED_NETWORKS = {
    "nat64": ipaddress.ip_network("64:ff9b::/96"),
    "nat64-local": ipaddress.ip_network("64:ff9b:1::/48"),
    "ipv4-compatible": ipaddress.ip_network("::/96"),
}


@dataclasses.dataclass(frozen=True)
class Policy:
    """What an endpoint of ``namespace`` may target, as the platform granted it."""

    namespace: str
    networks: tuple[Network, ...] = ()  # InferenceGrant endpoints.cidrs
    replica_namespaces: frozenset[str] = frozenset()  # InferenceGrant endpoints.replicaNamespaces
    gateways: frozenset[str] = frozenset()  # the platform's gateway hosts, normalised
    cluster_namespaces: frozenset[str] = frozenset()  # Namespaces known on the control plane

    def may_target_replicas_of(self, namespace: str) -> bool:
        return namespace == self.namespace or namespace in self.replica_namespaces


def refusal(url: str, rewrite_path: str | None, policy: Policy) -> str | None:
    """Why the platform's gateway must not be sent to this endpoint, or None."""
    _, raw_host, _, path = target(url, rewrite_path)
    host = normal_host(raw_host)
    if not usable_host(raw_host) or not host:
        return f"neither a DNS name nor an IP address ({raw_host})"
    if host in policy.gateways:
        return _gateway_path_refusal(host, path, policy)
    address = ip_literal(host)
    if address is not None:
        return _address_refusal(address, policy)
    numeric = legacy_ipv4(host)
    if numeric is not None:
        return (
            f"an IPv4 address written in a non-canonical form ({host}, read as {numeric}); "
            "write it in dotted decimal"
        )
    return _name_refusal(host, policy)


def normal_host(host: str) -> str:
    """Lower case, without brackets or trailing dots: how a resolver reads the name."""
    return host.strip("[]").rstrip(".").lower()


def ip_literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address a host whose last label is numeric means to inet_aton and URL parsers (one to
    four parts, decimal, octal with a leading 0 or hexadecimal with 0x), or None for a DNS name.
    A name with a numeric last label that is no such address is read as 0.0.0.0 (refused)."""
    labels = host.split(".")
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    if len(labels) > 4 or not all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        return ipaddress.IPv4Address(0)
    parts = [_number(label) for label in labels]
    *leading, last = parts
    if any(p > 255 for p in leading) or last >= 256 ** (5 - len(parts)):
        return ipaddress.IPv4Address(0)
    value = last
    for i, part in enumerate(leading):
        value += part << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _number(label: str) -> int:
    if label.startswith("0x"):
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label, 8) if set(label) <= set("01234567") else 256**4
    return int(label)


def embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    out = []
    if address.ipv4_mapped is not None:
        out.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        out.append(address.sixtofour)
    if address.teredo is not None:
        out.extend(address.teredo)
    for network in _EMBEDDED_NETWORKS.values():
        if address in network:
            out.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return out


def _address_refusal(address: Address, policy: Policy) -> str | None:
    for candidate in (address, *embedded_ipv4(address)):
        inside = next((n for n in INTERNAL_NETWORKS if candidate in n), None)
        if inside is None or any(
            candidate.version == n.version and candidate in n for n in policy.networks
        ):
            continue
        shown = str(address) if candidate == address else f"{address}, which is {candidate}"
        return (
            f"an address inside the platform ({shown}, in {inside}); an InferenceGrant's "
            "endpoints.cidrs may list it"
        )
    return None


def _name_refusal(host: str, policy: Policy) -> str | None:
    if host in METADATA_NAMES or CLOUD_INTERNAL.search(host):
        return f"a cloud metadata or internal host name ({host})"
    if host == "localhost" or host.endswith(IN_CLUSTER_SUFFIXES):
        return f"an in-cluster or local host name ({host})"
    if "." not in host:
        return f"a single-label name the cluster's DNS search domains resolve ({host})"
    last = host.rsplit(".", 1)[1]
    if last in KUBERNETES_NAMESPACES or last in policy.cluster_namespaces:
        return f"a Service name in namespace {last} of the control plane ({host})"
    return None


def _gateway_path_refusal(host: str, path: str, policy: Policy) -> str | None:
    """A platform gateway is a target only for a path under a namespace the endpoint may use."""
    segments = path.split("/")
    if "%" in path or "\\" in path or any(s in (".", "..") for s in segments[1:]):
        return f"a path the gateway may rewrite ({path}) on the platform's gateway {host}"
    owner = segments[1] if len(segments) > 1 else ""
    if not owner or not policy.may_target_replicas_of(owner):
        whose = f"namespace {owner}'s" if owner else "no namespace's"
        return (
            f"{whose} replicas on the platform's gateway {host} (path {path}); only "
            f"/{policy.namespace}/ or a namespace an InferenceGrant's "
            "endpoints.replicaNamespaces lists"
        )
    return None


def gateway_hosts(values: Iterable[str]) -> frozenset[str]:
    return frozenset(normal_host(v) for v in values if isinstance(v, str) and v)


def host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""
