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
