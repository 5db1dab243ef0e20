"""InferenceGrant spec (apis/inferencegrants): what the platform grants the namespaces it selects
beyond their own: route paths, hostnames and Gateways on the control plane, and endpoint targets
(internal networks, other namespaces' replicas)."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, field_validator

from plnt.models.base import SpecModel
from plnt.models.model_deployment import ClusterSelector
from plnt.models.model_service import HOSTNAME_PATTERN, PATH_PATTERN

# A namespace name (DNS-1123 label), as the namespaces granted replicas are named.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# An IPv4 or IPv6 network in CIDR notation; the function parses it (ipaddress) as well.
CIDR_PATTERN = r"^[0-9A-Fa-f:.]+/[0-9]{1,3}$"
MAX_ITEMS = 64


class GatewayGrant(SpecModel):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(min_length=1, max_length=63)


class RouteGrants(SpecModel):
    paths: list[Annotated[str, Field(max_length=1024, pattern=PATH_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_ITEMS
    )
    hostnames: list[Annotated[str, Field(max_length=253, pattern=HOSTNAME_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_ITEMS
    )
    gateways: list[GatewayGrant] = Field(default_factory=list, max_length=16)


class EndpointGrants(SpecModel):
    cidrs: list[Annotated[str, Field(max_length=64, pattern=CIDR_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_ITEMS
    )
    replica_namespaces: list[Annotated[str, Field(max_length=63, pattern=NAMESPACE_PATTERN)]] = (
        Field(default_factory=list, max_length=MAX_ITEMS, alias="replicaNamespaces")
    )

    @field_validator("cidrs")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an IPv4 or IPv6 network") from None
        return value


class InferenceGrantSpec(SpecModel):
    namespace_selector: ClusterSelector = Field(alias="namespaceSelector")
    routes: RouteGrants = Field(default_factory=RouteGrants)
    endpoints: EndpointGrants = Field(default_factory=EndpointGrants)
