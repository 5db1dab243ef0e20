"""ModelService spec (modelplane.ai/v1alpha1), as its XRD states it (bounds and defaults)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from plnt.models.base import NonNullSpecModel

DEFAULT_GATEWAY_NAME = "plnt-gateway"
DEFAULT_GATEWAY_NAMESPACE = "plnt-system"
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
PATH_PATTERN = r"^/[^\s?#]*$"
SERVICE_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_WEIGHT = 1000


_Model = NonNullSpecModel


class Selector(_Model):
    match_labels: dict[str, str] = Field(alias="matchLabels", min_length=1)


class EndpointGroup(_Model):
    weight: int = Field(default=1, ge=0, le=MAX_WEIGHT)
    selector: Selector


class GatewayRef(_Model):
    name: str = Field(default=DEFAULT_GATEWAY_NAME, min_length=1, max_length=253)
    namespace: str = Field(default=DEFAULT_GATEWAY_NAMESPACE, min_length=1, max_length=63)


class InClusterService(_Model):
    name: str = Field(min_length=1, max_length=63, pattern=SERVICE_NAME_PATTERN)


class ModelServiceSpec(_Model):
    endpoints: list[EndpointGroup] = Field(min_length=1, max_length=16)
    gateway_ref: GatewayRef = Field(default_factory=GatewayRef, alias="gatewayRef")
    hostnames: list[Annotated[str, Field(max_length=253, pattern=HOSTNAME_PATTERN)]] = Field(
        default_factory=list, max_length=16
    )
    path: str | None = Field(default=None, pattern=PATH_PATTERN, max_length=1024)
    service: InClusterService | None = None

    @model_validator(mode="after")
    def _some_weight(self) -> ModelServiceSpec:
        if not any(group.weight > 0 for group in self.endpoints):
            raise ValueError("at least one endpoints[] entry needs a weight above 0")
        return self

    def route_path(self, namespace: str, name: str) -> str:
        return self.path or f"/{namespace}/{name}"
