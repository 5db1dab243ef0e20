"""ModelEndpoint spec (modelplane.ai/v1alpha1), as its XRD states it.

The XRD's pattern and CEL rule on `url` are repeated here, and the parsed URL is checked once
more (the host is a DNS name of at most 253 characters or an IP address, the port is in range,
the path fits a Gateway API path rewrite, no credentials in the URL), so bad input that reaches
the function (for example through `crossplane render`) still fails naming the field. The host
ends up as a Gateway API hostname and an ExternalName, both of which accept only such names.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from pydantic import Field, field_validator

from plnt.models.base import NonNullSpecModel

# A host is a DNS name (no trailing dot: Gateway API hostnames have none) or an IP, IPv6 in
# brackets; the XRD's pattern says the same.
_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
DNS_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")
URL_PATTERN = rf"^https?://({DNS_NAME.pattern}|\[[0-9A-Fa-f:.]+\])(:[0-9]{{1,5}})?(/[^\s?#]*)?$"
MAX_HOST_LENGTH = 253
# Gateway API's limit on urlRewrite.path.replacePrefixMatch, which the path becomes.
MAX_PATH_LENGTH = 1024
PATH_PATTERN = r"^/[^\s?#]*$"
DEFAULT_PORTS = {"http": 80, "https": 443}


_Model = NonNullSpecModel


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class Auth(_Model):
    secret_ref: SecretKeyRef = Field(alias="secretRef")


class ModelEndpointSpec(_Model):
    url: str = Field(min_length=1, max_length=2048, pattern=URL_PATTERN)
    rewrite_path: str | None = Field(
        default=None, alias="rewritePath", max_length=MAX_PATH_LENGTH, pattern=PATH_PATTERN
    )
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
        if len(parsed.path) > MAX_PATH_LENGTH:  # the XRD's CEL rule
            raise ValueError(f"the path must be at most {MAX_PATH_LENGTH} characters")
        if not parsed.hostname or not usable_host(parsed.hostname):
            raise ValueError(
                f"the host must be a DNS name of at most {MAX_HOST_LENGTH} characters"
                " or an IP address"
            )
        return value


def usable_host(host: str) -> bool:
    """Whether ``host`` (as urlsplit gives it: lower case, IPv6 without brackets) is a DNS name
    or an IP address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return len(host) <= MAX_HOST_LENGTH and DNS_NAME.fullmatch(host) is not None
    return True


def target(url: str, rewrite_path: str | None) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) requests to this endpoint are sent to."""
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    path = rewrite_path or parsed.path or "/"
    return parsed.scheme, parsed.hostname or "", port, path
