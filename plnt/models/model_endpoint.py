"""ModelEndpoint spec (modelplane.ai/v1alpha1), as its XRD states it.

The XRD's pattern on `url` is repeated here, and the parsed URL is checked once more (a host
is required, no credentials in the URL), so bad input that reaches the function (for
example through `crossplane render`) still fails naming the field.
"""

from __future__ import annotations

import urllib.parse

from pydantic import BaseModel, ConfigDict, Field, field_validator

URL_PATTERN = r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"
PATH_PATTERN = r"^/[^\s?#]*$"
DEFAULT_PORTS = {"http": 80, "https": 443}


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        # the XRD has no nullable field: an explicit null is refused, not read as "unset"
        if value is None:
            raise ValueError("must not be null")
        return value


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class Auth(_Model):
    secret_ref: SecretKeyRef = Field(alias="secretRef")


class ModelEndpointSpec(_Model):
    url: str = Field(min_length=1, max_length=2048, pattern=URL_PATTERN)
    rewrite_path: str | None = Field(default=None, alias="rewritePath", pattern=PATH_PATTERN)
    auth: Auth | None = None
    model: str | None = Field(default=None, min_length=1, max_length=253)

    @field_validator("url")
    @classmethod
    def _has_port_in_range(cls, value: str) -> str:
        parsed = urllib.parse.urlsplit(value)
        try:
            port = parsed.port
        except ValueError:
            raise ValueError("port must be a number between 0 and 65535") from None
        if port == 0:
            raise ValueError("port must be between 1 and 65535")
        if not parsed.hostname:
            raise ValueError("must name a host")
        return value


def target(url: str, rewrite_path: str | None) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) requests to this endpoint are sent to."""
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    path = rewrite_path or parsed.path or "/"
    return parsed.scheme, parsed.hostname or "", port, path
