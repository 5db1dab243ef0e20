"""Names of composed objects: deterministic, DNS-safe, and stable across reconciles."""

from __future__ import annotations

import hashlib
import re

_INVALID = re.compile(r"[^a-z0-9-]+")


def dns_label(*parts: str, max_len: int = 63) -> str:
    """Joins parts into a DNS-1123 label; too-long names keep a hash suffix so they stay unique."""
    raw = "-".join(p for p in parts if p)
    name = _INVALID.sub("-", raw.lower()).strip("-")
    if len(name) <= max_len:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{name[: max_len - 9].rstrip('-')}-{digest}"


def dns_subdomain(*parts: str) -> str:
    return dns_label(*parts, max_len=253)


def short_hash(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:length]


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
SERVICE_PREFIX = "m-"  # before a derived Service name that would not start with a letter


def service_name(name: str) -> str:
    """The in-cluster Service name for an object named ``name`` (a DNS subdomain): ``name``
    itself where it is a DNS-1035 label (what a Service name must be), else derived from it
    deterministically: each ``.`` becomes ``-``, ``m-`` goes before a name that does not start
    with a letter, and a name over 63 characters keeps its first 54 and 8 hex of sha256(name)."""
    if is_service_name(name):
        return name
    label = _INVALID.sub("-", name.lower().replace(".", "-")).strip("-")
    if not label[:1].isalpha():
        label = SERVICE_PREFIX + label
    if len(label) > 63:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        label = f"{label[:54].rstrip('-')}-{digest}"
    return label


def is_service_name(name: str) -> bool:
    """Whether ``name`` is a DNS-1035 label, the form of a Service name."""
    return len(name) <= 63 and bool(_DNS_1035.match(name))
