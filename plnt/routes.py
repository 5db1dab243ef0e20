"""Which paths, hostnames and Gateways a namespace's ModelService may claim on the control plane,
and whose route wins where two namespaces' routes overlap.

Every ModelService's HTTPRoute shares the platform's Gateway, where the longest matching path
prefix wins; a route is therefore a claim on traffic, and a claim is the platform's to grant:

- the path (``spec.path``, default ``/<namespace>/<name>``) is at or under ``/<namespace>``
  (matched element by element, as Gateway API's PathPrefix), or under a prefix an InferenceGrant
  gives the namespace (``routes.paths``); a path with percent-encoding, ``.``/``..`` segments or
  an empty segment is refused outright (a gateway normalises it into another path);
- each hostname is one an InferenceGrant gives it (``routes.hostnames``; a granted wildcard
  ``*.example.com`` covers every name under example.com, as a Gateway listener's does);
- the Gateway is ``plnt-system/plnt-gateway`` or one an InferenceGrant lists
  (``routes.gateways``);
- a route that overlaps (same Gateway, intersecting hostnames, one path at or under the other)
  an HTTPRoute of another namespace is refused, naming it, unless this one is the owner: a
  namespace always owns ``/<namespace>``, so its own prefix beats another's granted one; between
  two granted claims the older route wins (creation time, then ``<namespace>/<name>``), as
  Gateway API settles conflicting routes.

In-cluster names: ``<service>.<namespace>.svc.cluster.local`` and ``<service>.<namespace>.svc``
are the names a pod's DNS resolves to a Service of that namespace, so they are that namespace's
and no grant gives them to another: a hostname that names, or a wildcard that covers, a name
under another namespace's ``.svc`` domain is refused (``*.svc.cluster.local`` and ``*.local``
included). A route whose hostnames are all its own namespace's in-cluster names (an *in-cluster
route*: the one a ModelService composes for its Service) takes only requests addressed to those
names; Gateway API gives a matching hostname precedence over a route without hostnames, so it
overlaps no route without hostnames, and it owns its names against any route that lists them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from plnt.grants import Grant

PATH_NOT_PERMITTED = "PathNotPermitted"
HOSTNAME_NOT_PERMITTED = "HostnameNotPermitted"
GATEWAY_NOT_PERMITTED = "GatewayNotPermitted"
ROUTE_CONFLICT = "RouteConflict"
NEWEST = "~"  # sorts after every RFC 3339 time: a route not created yet is the newest
CLUSTER_DOMAIN = "cluster.local"  # the cluster's DNS domain, as kubelet's default
SERVICE_DOMAINS = (("svc",), ("svc", *CLUSTER_DOMAIN.split(".")))


@dataclasses.dataclass(frozen=True)
class Route:
    """An HTTPRoute as the overlap check reads it. A path of None matches every path (a match
    the check cannot bound, such as a regular expression)."""

    namespace: str
    name: str
    hostnames: tuple[str, ...]
    paths: tuple[str | None, ...]
    created: str = NEWEST

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def in_cluster(self) -> bool:
        """Its hostnames are all its own namespace's in-cluster names."""
        return bool(self.hostnames) and all(
            own_in_cluster_name(self.namespace, h) for h in self.hostnames
        )


@dataclasses.dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def segments(path: str) -> tuple[str, ...]:
    """A path's elements, a trailing slash ignored (``/a/`` and ``/a`` are the same prefix)."""
    return tuple(s for s in path.split("/")[1:] if s != "") if path != "/" else ()


def under(path: str, prefix: str) -> bool:
    """Whether a request to ``path`` matches PathPrefix ``prefix``, element by element."""
    p, q = segments(path), segments(prefix)
    return p[: len(q)] == q


def paths_overlap(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return True
    return under(a, b) or under(b, a)


def hostname_covers(granted: str, claimed: str) -> bool:
    if granted == claimed:
        return True
    return granted.startswith("*.") and claimed.endswith(granted[1:])


def hostnames_intersect(a: Iterable[str], b: Iterable[str]) -> bool:
    """Gateway API's intersection: no hostnames matches every host."""
    a, b = list(a), list(b)
    if not a or not b:
        return True
    return any(hostname_covers(x, y) or hostname_covers(y, x) for x in a for y in b)


def in_cluster_hostnames(service: str, namespace: str) -> tuple[str, str]:
    """The names a pod resolves to Service ``service`` of ``namespace`` (fully qualified, and as
    the DNS search path completes ``<service>.<namespace>.svc``)."""
    return (f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}", f"{service}.{namespace}.svc")


def own_in_cluster_name(namespace: str, hostname: str) -> bool:
    """``hostname`` is exactly one of the names of a Service of ``namespace``."""
    parts = hostname.split(".")
    return parts[0] != "*" and any(
        len(parts) == len(domain) + 2 and tuple(parts[2:]) == domain and parts[1] == namespace
        for domain in SERVICE_DOMAINS
    )


def foreign_in_cluster_name(namespace: str, hostname: str) -> bool:
    """``hostname`` names, or as a wildcard covers, a name under the ``.svc`` domain of a
    namespace other than ``namespace``."""
    parts = hostname.split(".")
    wildcard = parts[0] == "*"
    rest = tuple(parts[1:] if wildcard else parts)
    for domain in SERVICE_DOMAINS:
        if wildcard and len(rest) <= len(domain) and domain[len(domain) - len(rest) :] == rest:
            return True  # *.svc, *.local, *.cluster.local, *.svc.cluster.local: every namespace
        if (
            len(rest) > len(domain)
            and rest[-len(domain) :] == domain
            and rest[-len(domain) - 1] != namespace
        ):
            return True
    return False


def home(namespace: str) -> str:
    return f"/{namespace}"


def permission_refusal(
    namespace: str, path: str, hostnames: Iterable[str], gateway: tuple[str, str], grant: Grant
) -> Refusal | None:
    """Why the namespace may not claim this path, these hostnames or this Gateway, or None."""
    if "%" in path or "\\" in path or any(s in ("", ".", "..") for s in path.split("/")[1:-1]):
        return Refusal(
            PATH_NOT_PERMITTED,
            f"spec.path {path} has percent-encoding, a . or .. element or an empty element, "
            "which a gateway normalises into another path",
        )
    if path.endswith(("/.", "/..")):
        return Refusal(PATH_NOT_PERMITTED, f"spec.path {path} ends in a . or .. element")
    if not under(path, home(namespace)) and not any(under(path, g) for g in grant.paths):
        granted = ", ".join(grant.paths)
        return Refusal(
            PATH_NOT_PERMITTED,
            f"spec.path {path} is outside {home(namespace)}/, the namespace's own prefix"
            + (f", and the prefixes granted to it ({granted})" if granted else "")
            + "; an InferenceGrant's routes.paths may grant it",
        )
    for name in hostnames:
        if foreign_in_cluster_name(namespace, name):
            return Refusal(
                HOSTNAME_NOT_PERMITTED,
                f"spec.hostnames {name} names Services of another namespace (a name under "
                "<namespace>.svc is that namespace's own); no grant gives it",
            )
        if not any(hostname_covers(g, name) for g in grant.hostnames):
            return Refusal(
                HOSTNAME_NOT_PERMITTED,
                f"spec.hostnames {name} is not granted to namespace {namespace}; an "
                "InferenceGrant's routes.hostnames may grant it",
            )
    if not grant.allows_gateway(*gateway):
        return Refusal(
            GATEWAY_NOT_PERMITTED,
            f"spec.gatewayRef {gateway[0]}/{gateway[1]} is not granted to namespace "
            f"{namespace}; routes attach to plnt-system/plnt-gateway unless an "
            "InferenceGrant's routes.gateways lists another",
        )
    return None


def routes_on(gateway: tuple[str, str], httproutes: Iterable[Mapping[str, Any]]) -> list[Route]:
    """The HTTPRoutes attached (by parentRef) to ``gateway`` = (namespace, name)."""
    out = []
    for obj in httproutes:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        namespace = str(meta.get("namespace") or "")
        if not any(_refers_to(ref, namespace, gateway) for ref in _list(spec.get("parentRefs"))):
            continue
        hostnames = tuple(h for h in _list(spec.get("hostnames")) if isinstance(h, str))
        paths = _paths(spec)
        created = meta.get("creationTimestamp")
        out.append(
            Route(
                namespace,
                str(meta.get("name") or ""),
                hostnames,
                paths,
                created if isinstance(created, str) and created else NEWEST,
            )
        )
    return out


def _paths(spec: Mapping[str, Any]) -> tuple[str | None, ...]:
    """Every rule's path matches (a rule without matches matches every path: "/")."""
    paths: list[str | None] = []
    for rule in _list(spec.get("rules")):
        matches = _list(rule.get("matches")) if isinstance(rule, dict) else []
        paths += [_path_of(m) for m in matches] or ["/"]
    return tuple(paths)


def owner(ours: Route, path: str, others: Iterable[Route]) -> Route | None:
    """The first route of another namespace that owns traffic ``ours`` would take, or None."""
    for other in sorted(others, key=lambda r: r.key):
        if other.namespace == ours.namespace:
            continue
        if not hostnames_intersect(ours.hostnames, other.hostnames):
            continue
        if ours.in_cluster != other.in_cluster:
            if not (ours.hostnames and other.hostnames):
                continue  # the in-cluster route's hostnames take precedence: no overlap
            if ours.in_cluster:
                continue  # its names are its namespace's: it owns them
            return other
        for theirs in other.paths:
            if not paths_overlap(path, theirs) or _wins(ours, path, other, theirs):
                continue
            return other
    return None


def conflict_message(path: str, other: Route, gateway: tuple[str, str]) -> str:
    return (
        f"spec.path {path} overlaps HTTPRoute {other.key} of namespace {other.namespace} on "
        f"Gateway {gateway[0]}/{gateway[1]}, which owns it; the route is not composed"
    )


def _wins(ours: Route, path: str, other: Route, theirs: str | None) -> bool:
    mine_home = under(path, home(ours.namespace))
    theirs_home = theirs is not None and under(theirs, home(other.namespace))
    if mine_home != theirs_home:
        return mine_home
    return (ours.created, ours.key) < (other.created, other.key)


def _refers_to(ref: Any, route_namespace: str, gateway: tuple[str, str]) -> bool:
    if not isinstance(ref, dict):
        return False
    if ref.get("group", "gateway.networking.k8s.io") != "gateway.networking.k8s.io":
        return False
    if ref.get("kind", "Gateway") != "Gateway":
        return False
    return (ref.get("namespace") or route_namespace, ref.get("name")) == gateway


def _path_of(match: Any) -> str | None:
    path = match.get("path") if isinstance(match, dict) else None
    if path is None:
        return "/"  # a match without a path matches every path
    if not isinstance(path, dict):
        return None
    kind, value = path.get("type", "PathPrefix"), path.get("value", "/")
    if kind in ("PathPrefix", "Exact") and isinstance(value, str) and value.startswith("/"):
        return value
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
